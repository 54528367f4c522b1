// The gather-GEMM-scatter kernel for AVX-512F (compiled with -mavx512f -mfma; called only where
// gemm_x86.cpp found the CPU and the OS support it): 12 rows x 2 registers of 16 floats of
// accumulators, 24 of the 32 zmm registers.
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

void gather_gemm_scatter_avx512(const float* x, int64_t ldx, const int32_t* in_rows, const int32_t* out_rows,
                                int64_t m, const float* wp, int c_in, int c_out, float* y, int64_t ldy) {
  gather_gemm_scatter<Avx512, 12, 2>(x, ldx, in_rows, out_rows, m, wp, c_in, c_out, y, ldy);
}

int64_t gather_at_b_scratch_avx512(int ca, int cb) { return atb_scratch<Avx512, 12, 32>(ca, cb); }

void gather_at_b_avx512(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb,
                        const int32_t* rb, int64_t m, int ca, int cb, float* g, bool accumulate, float* scratch) {
  gather_at_b<Avx512, 12, 2>(a, lda, ra, b, ldb, rb, m, ca, cb, g, accumulate, scratch);
}

}  // namespace lattice::gemm
