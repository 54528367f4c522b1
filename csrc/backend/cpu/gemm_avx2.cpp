// The gather-GEMM-scatter kernel for AVX2 + FMA (compiled with -mavx2 -mfma; called only where
// gemm_x86.cpp found the CPU and the OS support it): 6 rows x 2 registers of 8 floats of
// accumulators, 12 of the 16 ymm registers.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm_tile.h"

namespace {

struct Avx2 {
  using reg = __m256;
  static constexpr int W = 8;
  static inline reg zero() { return _mm256_setzero_ps(); }
  static inline reg load(const float* p) { return _mm256_loadu_ps(p); }
  static inline reg load_n(const float* p, int n);
  static inline reg set1(float v) { return _mm256_set1_ps(v); }
  static inline reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static inline __m256i first(int n) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static inline void store(float* p, reg r) { _mm256_storeu_ps(p, r); }
  static inline void store_n(float* p, reg r, int n) { _mm256_maskstore_ps(p, first(n), r); }
  static inline void add_to(float* p, reg r) { _mm256_storeu_ps(p, _mm256_add_ps(_mm256_loadu_ps(p), r)); }
  static inline void add_to_n(float* p, reg r, int n) {
    const __m256i k = first(n);
    _mm256_maskstore_ps(p, k, _mm256_add_ps(_mm256_maskload_ps(p, k), r));
  }
};

inline Avx2::reg Avx2::load_n(const float* p, int n) {
  return n >= W ? _mm256_loadu_ps(p) : n <= 0 ? zero() : _mm256_maskload_ps(p, first(n));
}

}  // namespace

namespace lattice::gemm {

LATTICE_TILE_ENTRIES(avx2, Avx2, 6, 2)

}  // namespace lattice::gemm
