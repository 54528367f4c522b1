// The bfloat16-product kernel for AVX-512 BF16 (compiled with -mavx512f -mavx512bw
// -mavx512bf16; called only where gemm_x86.cpp found the CPU and the OS support it, and only
// where LATTICE_CPU_GEMM asks for it: it rounds). Operands stay float32 in memory; each
// product's inputs are rounded to bfloat16 (round to nearest even, as VCVTNE2PS2BF16 does)
// and VDPBF16PS multiplies pairs of them into float32 sums: two multiply-adds per lane per
// instruction where an FMA does one, the same register tiles as gemm_avx512.cpp (12 x 2,
// 8 x 3 and 6 x 4 registers of 16 float32 accumulators). Pairs run along the reduction: the
// forward's input channels (W packed by KernelInfo::pack as pairs of rows, the input rounded
// once per call by round_rows, KernelInfo::round_rows), the weight gradient's edges (both
// gathered operands packed a step of edges at a time as pairs of edges).
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_tile.h"

namespace {

inline __attribute__((always_inline)) __m512 dot(__m512 acc, __m512i a, __m512i b) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh>(a), reinterpret_cast<__m512bh>(b));
}

// acc[r][v] = sum over q in [0, pairs) of the pair a_word(r, q) dotted lane by lane with the
// pairs of register v of b + q * NR (NR = NV * W words a step): the register tile of the
// forward (pairs of input channels) and of the weight gradient (pairs of edges).
template <int MR, int NV, class AWord>
inline __attribute__((always_inline)) void pair_products(__m512 (&acc)[MR][NV], int pairs, AWord a_word,
                                                         const uint32_t* b) {
  constexpr int NR = NV * W;
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = _mm512_setzero_ps();
#pragma GCC unroll 2
  for (int q = 0; q < pairs; ++q) {
    __m512i bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_si512(b + static_cast<int64_t>(q) * NR + v * W);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const __m512i s = _mm512_set1_epi32(static_cast<int>(a_word(r, q)));
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = dot(acc[r][v], s, bv[v]);
    }
  }
}

// acc[r][v] added into (accumulate) or stored to out(r) + v * W, the first `cols` columns,
// rows below `rows`; unrolled as the products are, so that acc stays in registers.
template <int MR, int NV, class Out>
inline __attribute__((always_inline)) void put(__m512 (&acc)[MR][NV], int rows, int cols, bool accumulate, Out out) {
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= rows) break;
    float* o = out(r);
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int n = cols - v * W;
      if (n <= 0) continue;
      const __mmask16 k = first(n);
      const __m512 s = accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(k, o + v * W), acc[r][v]) : acc[r][v];
      _mm512_mask_storeu_ps(o + v * W, k, s);
    }
  }
}

// n rows of c floats (row stride ld) rounded to bfloat16 into `out`, (c + 1) / 2 words a row
// (word j: elements 2j and 2j + 1, zero past c): the forward's operand, rounded once per call
// where each row is gathered by several edges, and half the bytes to gather.
void round_rows_bf16(const float* x, int64_t ld, int64_t n, int c, float* outf) {
  auto* out = reinterpret_cast<uint32_t*>(outf);
  const int kp = (c + 1) / 2;
  for (int64_t i = 0; i < n; ++i) {
    const float* src = x + i * ld;
    uint32_t* dst = out + i * kp;
    for (int j = 0; j < c; j += 2 * W) {
      const __m512i v = round_32(src + j, c - j);
      const int words = (c - j + 1) / 2;
      if (words >= W) _mm512_storeu_si512(dst + j / 2, v);
      else _mm512_mask_storeu_epi32(dst + j / 2, first(words), v);
    }
  }
}

// Y[out_rows[e]] += X[in_rows[e]] @ W over [0, m) (= where !accumulate), MR rows at a time, every panel of W (kp
// pairs of rows of NR columns, KernelInfo::pack) per row tile. X is the rows as
// round_rows_bf16 wrote them (ldx words a row): a pair of input channels per word, broadcast
// straight from the gathered row.
template <int MR, int NV>
void gather_gemm_scatter_bf16(const float* xf, int64_t ldx, const int32_t* in_rows, const int32_t* out_rows, int64_t m,
                              const float* wpf, int c_in, int c_out, float* y, int64_t ldy, bool accumulate) {
  constexpr int NR = NV * W;
  const auto* x = reinterpret_cast<const uint32_t*>(xf);
  const auto* wp = reinterpret_cast<const uint32_t*>(wpf);
  const int kp = (c_in + 1) / 2;
  const int panels = (c_out + NR - 1) / NR;
  const uint32_t* a[MR];
  float* yr[MR];
  for (int64_t e0 = 0; e0 < m; e0 += MR) {
    const int rows = tile_rows<MR>(x, ldx, kp, in_rows, out_rows, e0, m, y, ldy, c_out, a, yr);
    for (int p = 0; p < panels; ++p) {
      __m512 acc[MR][NV];
      pair_products<MR, NV>(acc, kp, [&](int r, int k) { return a[r][k]; }, wp + static_cast<int64_t>(p) * kp * NR);
      const int col = p * NR, cols = c_out - col < NR ? c_out - col : NR;
      put<MR, NV>(acc, rows, cols, accumulate, [&](int r) { return yr[r] + col; });
    }
  }
}

// Words of gather_at_b_bf16's packing buffer: per strip of A, kAtbEdges / 2 pairs of edges
// of MR words and one register of slack; per panel of B, kAtbEdges / 2 pairs of NR words.
template <int MR, int NV>
inline int64_t atb_scratch_bf16(int ca, int cb) {
  constexpr int NR = NV * W, P = kAtbEdges / 2;
  return static_cast<int64_t>((ca + MR - 1) / MR) * (static_cast<int64_t>(P) * MR + W) +
         static_cast<int64_t>(P) * ((cb + NR - 1) / NR) * NR;
}

// G (ca x cb, row stride cb) = (accumulate ? G : 0) + sum over e in [0, m) of
// A[ra[e]]^T B[rb[e]], the products of bfloat16-rounded operands: per step of kAtbEdges
// edges, the gathered rows of each pair of edges rounded and interleaved into `scratch`
// (A's as strips of MR columns, B's as panels of NR; an odd last edge pairs with zeros), then
// each MR x NR tile over the step's pairs.
template <int MR, int NV>
void gather_at_b_bf16(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb, const int32_t* rb,
                      int64_t m, int ca, int cb, float* g, bool accumulate, float* scratch) {
  static_assert(MR <= W, "a strip's pair of edges is written as one register");
  constexpr int NR = NV * W, P = kAtbEdges / 2;
  constexpr int64_t SS = static_cast<int64_t>(P) * MR + W;  // words per strip, slack included
  const int strips = (ca + MR - 1) / MR, panels = (cb + NR - 1) / NR;
  auto* ap = reinterpret_cast<uint32_t*>(scratch);  // strips x (P x MR + W)
  uint32_t* bp = ap + strips * SS;                  // panels x P x NR
  for (int64_t e0 = 0; e0 < m; e0 += kAtbEdges) {
    const int ne = m - e0 < kAtbEdges ? static_cast<int>(m - e0) : kAtbEdges;
    const int pairs = (ne + 1) / 2;
    pack_step<MR, NR, P>(a, lda, ra, b, ldb, rb, e0, m, ne, ca, cb, ap, SS, bp);
    const bool add = accumulate || e0 > 0;
    for (int s = 0; s < strips; ++s) {
      const uint32_t* as = ap + s * SS;
      const int rows = ca - s * MR < MR ? ca - s * MR : MR;
      for (int p = 0; p < panels; ++p) {
        __m512 acc[MR][NV];
        pair_products<MR, NV>(acc, pairs, [&](int r, int q) { return as[q * MR + r]; },
                              bp + static_cast<int64_t>(p) * P * NR);
        const int cols = cb - p * NR < NR ? cb - p * NR : NR;
        put<MR, NV>(acc, rows, cols, add, [&](int r) { return g + static_cast<int64_t>(s * MR + r) * cb + p * NR; });
      }
    }
  }
}

}  // namespace

namespace lattice::gemm {

#define LATTICE_BF16_ENTRIES(mr, nv)                                                                               \
  void gather_gemm_scatter_avx512_bf16_##mr##x##nv(const float* x, int64_t ldx, const int32_t* in_rows,            \
                                                   const int32_t* out_rows, int64_t m, const float* wp, int c_in, \
                                                   int c_out, float* y, int64_t ldy, bool accumulate) {            \
    gather_gemm_scatter_bf16<mr, nv>(x, ldx, in_rows, out_rows, m, wp, c_in, c_out, y, ldy, accumulate);          \
  }                                                                                                                \
  int64_t gather_at_b_scratch_avx512_bf16_##mr##x##nv(int ca, int cb) { return atb_scratch_bf16<mr, nv>(ca, cb); } \
  void gather_at_b_avx512_bf16_##mr##x##nv(const float* a, int64_t lda, const int32_t* ra, const float* b,         \
                                           int64_t ldb, const int32_t* rb, int64_t m, int ca, int cb, float* g,   \
                                           bool accumulate, float* scratch) {                                      \
    gather_at_b_bf16<mr, nv>(a, lda, ra, b, ldb, rb, m, ca, cb, g, accumulate, scratch);                          \
  }
LATTICE_BF16_ENTRIES(12, 2)
LATTICE_BF16_ENTRIES(8, 3)
LATTICE_BF16_ENTRIES(6, 4)
#undef LATTICE_BF16_ENTRIES

void round_rows_avx512_bf16(const float* x, int64_t ld, int64_t n, int c, float* out) {
  round_rows_bf16(x, ld, n, c, out);
}

}  // namespace lattice::gemm
