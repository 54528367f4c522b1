// The gather-GEMM-scatter kernel for AVX-512F (compiled with -mavx512f -mfma; called only where
// gemm_x86.cpp found the CPU and the OS support it) in three register-tile shapes: 12 rows x
// 2 registers of 16 floats of accumulators, 8 x 3 and 6 x 4 — 24 of the 32 zmm registers each.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm_tile.h"

namespace {

struct Avx512 {
  using reg = __m512;
  static constexpr int W = 16;
  static inline reg zero() { return _mm512_setzero_ps(); }
  static inline reg load(const float* p) { return _mm512_loadu_ps(p); }
  static inline reg load_n(const float* p, int n) {
    return n >= W ? _mm512_loadu_ps(p) : n <= 0 ? zero() : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
  }
  static inline reg set1(float v) { return _mm512_set1_ps(v); }
  static inline reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static inline void store(float* p, reg r) { _mm512_storeu_ps(p, r); }
  static inline void store_n(float* p, reg r, int n) {
    _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << n) - 1u), r);
  }
  static inline void add_to(float* p, reg r) { _mm512_storeu_ps(p, _mm512_add_ps(_mm512_loadu_ps(p), r)); }
  static inline void add_to_n(float* p, reg r, int n) {
    const __mmask16 k = static_cast<__mmask16>((1u << n) - 1u);
    _mm512_mask_storeu_ps(p, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, p), r));
  }
};

}  // namespace

namespace lattice::gemm {

LATTICE_TILE_ENTRIES(avx512, Avx512, 12, 2)
LATTICE_TILE_ENTRIES(avx512, Avx512, 8, 3)
LATTICE_TILE_ENTRIES(avx512, Avx512, 6, 4)

}  // namespace lattice::gemm
