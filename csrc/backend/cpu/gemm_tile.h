// The gather-GEMM-scatter kernel body, written once over a vector type and included only by
// the files that compile it for one instruction set (gemm_avx512.cpp, gemm_avx2.cpp). Those
// files are built with their ISA's flags, so everything here has internal linkage and uses
// nothing from the C++ library: no function compiled with AVX-512 may be picked by the
// linker for a call from baseline code.
//
// V (the vector type) provides: reg, W (floats per register), zero(), load(p), set1(x),
// fma(a, b, c) = a * b + c, store(p, r), add_to(p, r) (*p += r), and store_n / add_to_n
// (the first n lanes only).
#pragma once

#include <cstdint>

namespace {

// One register tile: rows a[0..MR) (rows >= `rows` repeat a[0] and are not stored) times one
// packed panel of NV registers' width, added into y[r] + col for the first `cols` columns.
template <class V, int MR, int NV>
inline __attribute__((always_inline)) void tile(const float* const* a, float* const* y, int rows, const float* wp,
                                                int c_in, int64_t col, int cols) {
  constexpr int NR = NV * V::W;
  typename V::reg acc[MR][NV];
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[r][v] = V::zero();
#pragma GCC unroll 2
  for (int k = 0; k < c_in; ++k) {
    typename V::reg b[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) b[v] = V::load(wp + static_cast<int64_t>(k) * NR + v * V::W);
#pragma GCC unroll 16
    for (int r = 0; r < MR; ++r) {
      const typename V::reg s = V::set1(a[r][k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(s, b[v], acc[r][v]);
    }
  }
  // Stores unrolled over r and v as the FMAs are, so that acc stays in registers.
#pragma GCC unroll 16
  for (int r = 0; r < MR; ++r) {
    if (r >= rows) break;
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const int n = cols - v * V::W;
      if (n >= V::W) V::add_to(y[r] + col + v * V::W, acc[r][v]);
      else if (n > 0) V::add_to_n(y[r] + col + v * V::W, acc[r][v], n);
    }
  }
}

// Y[out_rows[e]] += X[in_rows[e]] @ W over [0, m), MR rows at a time, every panel of W per
// row tile (the tile's rows stay in L1 across the panels); the next tile's rows are
// prefetched.
template <class V, int MR, int NV>
void gather_gemm_scatter(const float* x, int64_t ldx, const int32_t* in_rows, const int32_t* out_rows, int64_t m,
                         const float* wp, int c_in, int c_out, float* y, int64_t ldy) {
  constexpr int NR = NV * V::W;
  const int panels = (c_out + NR - 1) / NR;
  const float* a[MR];
  float* yr[MR];
  for (int64_t e0 = 0; e0 < m; e0 += MR) {
    const int rows = m - e0 < MR ? static_cast<int>(m - e0) : MR;
    for (int r = 0; r < MR; ++r) {
      const int64_t e = e0 + (r < rows ? r : 0);
      a[r] = x + static_cast<int64_t>(in_rows[e]) * ldx;
      yr[r] = y + static_cast<int64_t>(out_rows[e]) * ldy;
    }
    for (int r = 0; r < MR && e0 + MR + r < m; ++r) {
      __builtin_prefetch(x + static_cast<int64_t>(in_rows[e0 + MR + r]) * ldx);
      __builtin_prefetch(y + static_cast<int64_t>(out_rows[e0 + MR + r]) * ldy, 1);
    }
    for (int p = 0; p < panels; ++p) {
      const int cols = c_out - p * NR < NR ? c_out - p * NR : NR;
      tile<V, MR, NV>(a, yr, rows, wp + static_cast<int64_t>(p) * c_in * NR, c_in, static_cast<int64_t>(p) * NR,
                      cols);
    }
  }
}

// ---- the weight gradient: G = sum over edges of A[ra[e]]^T B[rb[e]] ----------------------

// Edges per step of gather_at_b: a step's packed rows of A and B stay in L2 while every
// register tile of G runs over them.
constexpr int kAtbEdges = 128;
// How many edges ahead the packing prefetches the gathered rows, and the floats per cache
// line it asks for them by (every line of a row: at 64 channels and more the rows' later
// lines missed, and the weight gradient alone took 3-6 % longer, KITTI scan, one thread).
constexpr int kAtbAhead = 8;
constexpr int kLineFloats = 16;

// Floats per edge of one packed strip of A: MR rounded up to whole registers (copied with
// vector stores, the spare lanes never read).
template <class V, int MR>
constexpr int strip_width() {
  return (MR + V::W - 1) / V::W * V::W;
}

// Floats of gather_at_b's packing buffer.
template <class V, int MR, int NR>
inline int64_t atb_scratch(int ca, int cb) {
  return static_cast<int64_t>(kAtbEdges) *
         (static_cast<int64_t>((ca + MR - 1) / MR) * strip_width<V, MR>() + ((cb + NR - 1) / NR) * NR);
}

// Copies n <= len floats of src to dst and zeros dst[n, len): len a multiple of V::W.
template <class V>
inline __attribute__((always_inline)) void copy_padded(const float* src, int n, float* dst, int len) {
  for (int j = 0; j < len; j += V::W) V::store(dst + j, V::load_n(src + j, n - j));
}

// G (ca x cb, row stride cb) = (accumulate ? G : 0) + sum over e in [0, m) of
// A[ra[e]]^T B[rb[e]]. Per step of kAtbEdges edges the gathered rows are packed into
// `scratch` (atb_scratch(ca, cb) floats): A's as strips of MR columns (e-major, strip_width
// floats per edge), B's as panels of NR columns, zeros past ca / cb; then each MR x NR tile
// runs over the step's edges and is stored into (or added to) G.
template <class V, int MR, int NV>
void gather_at_b(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb, const int32_t* rb,
                 int64_t m, int ca, int cb, float* g, bool accumulate, float* scratch) {
  constexpr int NR = NV * V::W;
  constexpr int SW = strip_width<V, MR>();
  const int strips = (ca + MR - 1) / MR, panels = (cb + NR - 1) / NR;
  float* ap = scratch;                                                  // strips x E x SW
  float* bp = scratch + static_cast<int64_t>(kAtbEdges) * strips * SW;  // panels x E x NR
  for (int64_t e0 = 0; e0 < m; e0 += kAtbEdges) {
    const int ne = m - e0 < kAtbEdges ? static_cast<int>(m - e0) : kAtbEdges;
    for (int e = 0; e < ne; ++e) {
      if (e0 + e + kAtbAhead < m) {  // the rows are random: ask for every line of those a few edges on
        const float* an = a + static_cast<int64_t>(ra[e0 + e + kAtbAhead]) * lda;
        const float* bn = b + static_cast<int64_t>(rb[e0 + e + kAtbAhead]) * ldb;
        for (int j = 0; j < ca; j += kLineFloats) __builtin_prefetch(an + j);
        for (int j = 0; j < cb; j += kLineFloats) __builtin_prefetch(bn + j);
      }
      const float* arow = a + static_cast<int64_t>(ra[e0 + e]) * lda;
      const float* brow = b + static_cast<int64_t>(rb[e0 + e]) * ldb;
      for (int s = 0; s < strips; ++s)
        copy_padded<V>(arow + s * MR, ca - s * MR < MR ? ca - s * MR : MR,
                       ap + (static_cast<int64_t>(s) * kAtbEdges + e) * SW, SW);
      for (int p = 0; p < panels; ++p)
        copy_padded<V>(brow + p * NR, cb - p * NR, bp + (static_cast<int64_t>(p) * kAtbEdges + e) * NR, NR);
    }
    const bool add = accumulate || e0 > 0;
    for (int s = 0; s < strips; ++s) {
      const float* as = ap + static_cast<int64_t>(s) * kAtbEdges * SW;
      const int rows = ca - s * MR < MR ? ca - s * MR : MR;
      for (int p = 0; p < panels; ++p) {
        const float* bs = bp + static_cast<int64_t>(p) * kAtbEdges * NR;
        typename V::reg acc[MR][NV];
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[r][v] = V::zero();
        for (int e = 0; e < ne; ++e) {
          typename V::reg bv[NV];
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) bv[v] = V::load(bs + e * NR + v * V::W);
          const float* ae = as + e * SW;
#pragma GCC unroll 16
          for (int r = 0; r < MR; ++r) {
            const typename V::reg sv = V::set1(ae[r]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; ++v) acc[r][v] = V::fma(sv, bv[v], acc[r][v]);
          }
        }
        const int cols = cb - p * NR < NR ? cb - p * NR : NR;
#pragma GCC unroll 16
        for (int r = 0; r < MR; ++r) {  // unrolled as the FMAs are: acc stays in registers
          if (r >= rows) break;
          float* out = g + static_cast<int64_t>(s * MR + r) * cb + p * NR;
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) {
            const int n = cols - v * V::W;
            if (n >= V::W) {
              if (add) V::add_to(out + v * V::W, acc[r][v]);
              else V::store(out + v * V::W, acc[r][v]);
            } else if (n > 0) {
              if (add) V::add_to_n(out + v * V::W, acc[r][v], n);
              else V::store_n(out + v * V::W, acc[r][v], n);
            }
          }
        }
      }
    }
  }
}

}  // namespace
