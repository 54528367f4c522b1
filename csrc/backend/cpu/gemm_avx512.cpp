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

// The entry points of one register-tile shape (declared in gemm_x86.cpp).
#define LATTICE_TILE_ENTRIES(mr, nv)                                                                               \
  void gather_gemm_scatter_avx512_##mr##x##nv(const float* x, int64_t ldx, const int32_t* in_rows,                  \
                                            const int32_t* out_rows, int64_t m, const float* wp, int c_in,         \
                                            int c_out, float* y, int64_t ldy) {                                    \
    gather_gemm_scatter<Avx512, mr, nv>(x, ldx, in_rows, out_rows, m, wp, c_in, c_out, y, ldy);                   \
  }                                                                                                                \
  int64_t gather_at_b_scratch_avx512_##mr##x##nv(int ca, int cb) { return atb_scratch<Avx512, mr, nv>(ca, cb); }     \
  void gather_at_b_avx512_##mr##x##nv(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb,   \
                                    const int32_t* rb, int64_t m, int ca, int cb, float* g, bool accumulate,       \
                                    float* scratch) {                                                              \
    gather_at_b<Avx512, mr, nv>(a, lda, ra, b, ldb, rb, m, ca, cb, g, accumulate, scratch);                       \
  }
LATTICE_TILE_ENTRIES(12, 2)
LATTICE_TILE_ENTRIES(8, 3)
LATTICE_TILE_ENTRIES(6, 4)
#undef LATTICE_TILE_ENTRIES

}  // namespace lattice::gemm
