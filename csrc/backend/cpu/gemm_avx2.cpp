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

// The entry points of one register-tile shape (declared in gemm_x86.cpp).
#define LATTICE_TILE_ENTRIES(mr, nv)                                                                               \
  void gather_gemm_scatter_avx2_##mr##x##nv(const float* x, int64_t ldx, const int32_t* in_rows,                  \
                                            const int32_t* out_rows, int64_t m, const float* wp, int c_in,         \
                                            int c_out, float* y, int64_t ldy) {                                    \
    gather_gemm_scatter<Avx2, mr, nv>(x, ldx, in_rows, out_rows, m, wp, c_in, c_out, y, ldy);                   \
  }                                                                                                                \
  int64_t gather_at_b_scratch_avx2_##mr##x##nv(int ca, int cb) { return atb_scratch<Avx2, mr, nv>(ca, cb); }     \
  void gather_at_b_avx2_##mr##x##nv(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb,   \
                                    const int32_t* rb, int64_t m, int ca, int cb, float* g, bool accumulate,       \
                                    float* scratch) {                                                              \
    gather_at_b<Avx2, mr, nv>(a, lda, ra, b, ldb, rb, m, ca, cb, g, accumulate, scratch);                       \
  }
LATTICE_TILE_ENTRIES(6, 2)
#undef LATTICE_TILE_ENTRIES

}  // namespace lattice::gemm
