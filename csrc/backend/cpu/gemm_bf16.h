// What the two bfloat16-product kernels share (gemm_avx512bf16.cpp, gemm_amx.cpp): rounding
// float32 rows to bfloat16 pairs and packing a step of the weight gradient's gathered rows.
// Included only by files compiled with AVX-512 BF16 (and BW); internal linkage, no C++
// library types (see gemm_tile.h).
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm_tile.h"

namespace {

constexpr int W = 16;  // float32 lanes (and bfloat16 pairs) per register

inline __attribute__((always_inline)) __mmask16 first(int n) {
  return n >= W ? static_cast<__mmask16>(0xFFFF) : n <= 0 ? 0 : static_cast<__mmask16>((1u << n) - 1u);
}

// n floats of src (zeros past n; n <= 32) rounded to bfloat16 in order: word j holds
// elements 2j (low half) and 2j + 1.
inline __attribute__((always_inline)) __m512i round_32(const float* src, int n) {
  const __m512 lo = _mm512_maskz_loadu_ps(first(n), src);
  const __m512 hi = _mm512_maskz_loadu_ps(first(n - W), src + W);
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(hi, lo));
}

// n floats of r0 and of r1 (zeros past n; n <= 16; r1 null: zeros) rounded to bfloat16 and
// interleaved: word j holds r0[j] (low half) and r1[j].
inline __attribute__((always_inline)) __m512i round_pair(const float* r0, const float* r1, int n) {
  const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23,
                                              7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  const __m512 a = _mm512_maskz_loadu_ps(first(n), r0);
  const __m512 b = r1 ? _mm512_maskz_loadu_ps(first(n), r1) : _mm512_setzero_ps();
  return _mm512_permutexvar_epi16(interleave, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(b, a)));
}

// Packs edges [e0, e0 + ne) of a weight-gradient step (ne <= 2 P) as (ne + 1) / 2 pairs of
// edges: A's gathered rows as strips of MR columns (pair q of strip s: MR words at
// ap + s * ss + q * MR, word r holding A[ra[e0 + 2q]][s * MR + r] low and the next edge's
// high; the register written whole, its words past MR landing in the next pair's or the
// slack), B's as panels of NR columns (pair q of panel p: NR words at bp + (p * P + q) * NR);
// an odd last edge pairs with zeros, columns past ca / cb are zeros. Rows a few edges on are
// prefetched into L1, the next step's into L2.
template <int MR, int NR, int P>
inline __attribute__((always_inline)) void pack_step(const float* a, int64_t lda, const int32_t* ra,
                                                     const float* b, int64_t ldb, const int32_t* rb, int64_t e0,
                                                     int64_t m, int ne, int ca, int cb, uint32_t* ap, int64_t ss,
                                                     uint32_t* bp) {
  const int strips = (ca + MR - 1) / MR, panels = (cb + NR - 1) / NR;
  const auto rows_of = [&](int64_t e, const float*& an, const float*& bn) {
    an = a + static_cast<int64_t>(ra[e]) * lda;
    bn = b + static_cast<int64_t>(rb[e]) * ldb;
  };
  const int pairs = (ne + 1) / 2;
  for (int q = 0; q < pairs; ++q) {
    for (int h = 0; h < 2; ++h) {
      const int64_t e = e0 + 2 * q + h;
      const float *an, *bn;
      if (e + kAtbAhead < m) {  // a few edges on, into L1
        rows_of(e + kAtbAhead, an, bn);
        for (int j = 0; j < ca; j += kLineFloats) __builtin_prefetch(an + j);
        for (int j = 0; j < cb; j += kLineFloats) __builtin_prefetch(bn + j);
      }
      if (e + 2 * P < m) {  // and the next step's, into L2
        rows_of(e + 2 * P, an, bn);
        for (int j = 0; j < ca; j += kLineFloats) __builtin_prefetch(an + j, 0, 1);
        for (int j = 0; j < cb; j += kLineFloats) __builtin_prefetch(bn + j, 0, 1);
      }
    }
    const int64_t e = e0 + 2 * q;
    const bool two = 2 * q + 1 < ne;
    const float* a0 = a + static_cast<int64_t>(ra[e]) * lda;
    const float* a1 = two ? a + static_cast<int64_t>(ra[e + 1]) * lda : nullptr;
    const float* b0 = b + static_cast<int64_t>(rb[e]) * ldb;
    const float* b1 = two ? b + static_cast<int64_t>(rb[e + 1]) * ldb : nullptr;
    for (int s = 0; s < strips; ++s) {
      const int n = ca - s * MR < MR ? ca - s * MR : MR;
      _mm512_storeu_si512(ap + s * ss + static_cast<int64_t>(q) * MR,
                          round_pair(a0 + s * MR, a1 ? a1 + s * MR : nullptr, n));
    }
    for (int p = 0; p < panels; ++p)
      for (int v = 0; v < NR; v += W) {
        const int c = p * NR + v;
        _mm512_storeu_si512(bp + (static_cast<int64_t>(p) * P + q) * NR + v,
                            round_pair(b0 + c, b1 ? b1 + c : nullptr, cb - c));
      }
  }
}

}  // namespace
