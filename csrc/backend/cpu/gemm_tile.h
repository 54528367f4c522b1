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

// Floats per 64-byte cache line: the kernels prefetch gathered rows line by line.
constexpr int kLineFloats = 16;
// gather_gemm_scatter asks for every line of the rows two register tiles ahead, into L2
// (locality 1). Asking for the first line of each row one tile ahead into L1 left the kernel
// waiting on the rows' other lines: on the KITTI scan's k=3 map (one thread, all 27 offsets
// through the kernel, alternating runs) 64 -> 64 went from 42-54 to 29-31 ms and 96 -> 96
// from 75-76 to 57-59; every line into L1 was slower than into L2.
constexpr int kAheadTiles = 2;

// One register tile: rows a[0..MR) (rows >= `rows` repeat a[0] and are not stored) times one
// packed panel of NV registers' width, added into y[r] + col for the first `cols` columns.
template <class V, int MR, int NV>
inline __attribute__((always_inline)) void tile(const float* const* a, float* const* y, int rows, const float* wp,
                                                int c_in, int64_t col, int cols, bool accumulate) {
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
      float* out = y[r] + col + v * V::W;
      if (n >= V::W) accumulate ? V::add_to(out, acc[r][v]) : V::store(out, acc[r][v]);
      else if (n > 0) accumulate ? V::add_to_n(out, acc[r][v], n) : V::store_n(out, acc[r][v], n);
    }
  }
}

// The register tile of the gather-GEMM-scatter at edge e0 (of m): a[r] the gathered row and
// yr[r] the output row of edge e0 + r (rows past the last edge repeat the first: computed,
// never stored); every line of the rows kAheadTiles tiles on is prefetched into L2 (x_len
// four-byte elements a gathered row: floats, or the bfloat16 kernel's pairs). Returns the
// tile's real rows. Shared by the float32 kernels here and gemm_avx512bf16.cpp.
template <int MR, class T>
inline __attribute__((always_inline)) int tile_rows(const T* x, int64_t ldx, int x_len, const int32_t* in_rows,
                                                    const int32_t* out_rows, int64_t e0, int64_t m, float* y,
                                                    int64_t ldy, int c_out, const T* (&a)[MR], float* (&yr)[MR]) {
  static_assert(sizeof(T) == 4, "kLineFloats elements a cache line");
  const int rows = m - e0 < MR ? static_cast<int>(m - e0) : MR;
  for (int r = 0; r < MR; ++r) {
    const int64_t e = e0 + (r < rows ? r : 0);
    a[r] = x + static_cast<int64_t>(in_rows[e]) * ldx;
    yr[r] = y + static_cast<int64_t>(out_rows[e]) * ldy;
  }
  for (int r = 0; r < MR && e0 + kAheadTiles * MR + r < m; ++r) {
    const T* xn = x + static_cast<int64_t>(in_rows[e0 + kAheadTiles * MR + r]) * ldx;
    const float* yn = y + static_cast<int64_t>(out_rows[e0 + kAheadTiles * MR + r]) * ldy;
    for (int j = 0; j < x_len; j += kLineFloats) __builtin_prefetch(xn + j, 0, 1);
    for (int j = 0; j < c_out; j += kLineFloats) __builtin_prefetch(yn + j, 1, 1);
  }
  return rows;
}

// Y[out_rows[e]] += X[in_rows[e]] @ W over [0, m) (= where !accumulate), MR rows at a time,
// every panel of W per row tile (the tile's rows stay in L1 across the panels); the rows
// kAheadTiles tiles on are prefetched.
template <class V, int MR, int NV>
void gather_gemm_scatter(const float* x, int64_t ldx, const int32_t* in_rows, const int32_t* out_rows, int64_t m,
                         const float* wp, int c_in, int c_out, float* y, int64_t ldy, bool accumulate) {
  constexpr int NR = NV * V::W;
  const int panels = (c_out + NR - 1) / NR;
  const float* a[MR];
  float* yr[MR];
  for (int64_t e0 = 0; e0 < m; e0 += MR) {
    const int rows = tile_rows<MR>(x, ldx, c_in, in_rows, out_rows, e0, m, y, ldy, c_out, a, yr);
    for (int p = 0; p < panels; ++p) {
      const int cols = c_out - p * NR < NR ? c_out - p * NR : NR;
      tile<V, MR, NV>(a, yr, rows, wp + static_cast<int64_t>(p) * c_in * NR, c_in, static_cast<int64_t>(p) * NR,
                      cols, accumulate);
    }
  }
}

// ---- the weight gradient: G = sum over edges of A[ra[e]]^T B[rb[e]] ----------------------

// Edges per step of gather_at_b: a step's packed rows of A and B stay in L2 while every
// register tile of G runs over them.
constexpr int kAtbEdges = 128;
// How many edges ahead the packing prefetches every line of the gathered rows into L1 (the
// first line only: at 64 channels and more the rows' later lines missed, and the weight
// gradient alone took 3-6 % longer, KITTI scan, one thread). It also asks for the next
// step's rows into L2 while it packs this step's: the weight gradient alone 36-40 -> 32-34
// ms at 64 x 64, 71-73 -> 63-64 at 96 x 96, 91-92 -> 84 at 128 x 96 (same scan and thread).
constexpr int kAtbAhead = 8;

// Floats of gather_at_b's packing buffer: per strip of A, kAtbEdges edges of MR floats and
// one register of slack (each edge's strip is written as a whole register, its spare lanes
// overwritten by the next edge's); per panel of B, kAtbEdges edges of NR floats.
template <class V, int MR, int NV>
inline int64_t atb_scratch(int ca, int cb) {
  constexpr int NR = NV * V::W;
  return static_cast<int64_t>((ca + MR - 1) / MR) * (static_cast<int64_t>(kAtbEdges) * MR + V::W) +
         static_cast<int64_t>(kAtbEdges) * ((cb + NR - 1) / NR) * NR;
}

// Copies n <= len floats of src to dst and zeros dst[n, len): len a multiple of V::W.
template <class V>
inline __attribute__((always_inline)) void copy_padded(const float* src, int n, float* dst, int len) {
  for (int j = 0; j < len; j += V::W) V::store(dst + j, V::load_n(src + j, n - j));
}

// G (ca x cb, row stride cb) = (accumulate ? G : 0) + sum over e in [0, m) of
// A[ra[e]]^T B[rb[e]]. Per step of kAtbEdges edges the gathered rows are packed into
// `scratch` (atb_scratch(ca, cb) floats): A's as strips of MR columns (e-major, MR floats
// per edge), B's as panels of NR columns, zeros past ca / cb; then each MR x NR tile runs
// over the step's edges and is stored into (or added to) G.
template <class V, int MR, int NV>
void gather_at_b(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb, const int32_t* rb,
                 int64_t m, int ca, int cb, float* g, bool accumulate, float* scratch) {
  static_assert(MR <= V::W, "a strip of A is written as one register per edge");
  constexpr int NR = NV * V::W;
  constexpr int64_t SS = static_cast<int64_t>(kAtbEdges) * MR + V::W;  // floats per strip, slack included
  const int strips = (ca + MR - 1) / MR, panels = (cb + NR - 1) / NR;
  float* ap = scratch;                 // strips x (E x MR + W)
  float* bp = scratch + strips * SS;  // panels x E x NR
  for (int64_t e0 = 0; e0 < m; e0 += kAtbEdges) {
    const int ne = m - e0 < kAtbEdges ? static_cast<int>(m - e0) : kAtbEdges;
    for (int e = 0; e < ne; ++e) {
      if (e0 + e + kAtbAhead < m) {  // the rows are random: every line of those a few edges on, into L1
        const float* an = a + static_cast<int64_t>(ra[e0 + e + kAtbAhead]) * lda;
        const float* bn = b + static_cast<int64_t>(rb[e0 + e + kAtbAhead]) * ldb;
        for (int j = 0; j < ca; j += kLineFloats) __builtin_prefetch(an + j);
        for (int j = 0; j < cb; j += kLineFloats) __builtin_prefetch(bn + j);
      }
      if (e0 + kAtbEdges + e < m) {  // and the next step's, a step's work ahead, into L2
        const float* an = a + static_cast<int64_t>(ra[e0 + kAtbEdges + e]) * lda;
        const float* bn = b + static_cast<int64_t>(rb[e0 + kAtbEdges + e]) * ldb;
        for (int j = 0; j < ca; j += kLineFloats) __builtin_prefetch(an + j, 0, 1);
        for (int j = 0; j < cb; j += kLineFloats) __builtin_prefetch(bn + j, 0, 1);
      }
      const float* arow = a + static_cast<int64_t>(ra[e0 + e]) * lda;
      const float* brow = b + static_cast<int64_t>(rb[e0 + e]) * ldb;
      for (int s = 0; s < strips; ++s)  // lanes past MR land in the next edge's strip (or the slack)
        V::store(ap + s * SS + static_cast<int64_t>(e) * MR, V::load_n(arow + s * MR, ca - s * MR < MR ? ca - s * MR : MR));
      for (int p = 0; p < panels; ++p)
        copy_padded<V>(brow + p * NR, cb - p * NR, bp + (static_cast<int64_t>(p) * kAtbEdges + e) * NR, NR);
    }
    const bool add = accumulate || e0 > 0;
    for (int s = 0; s < strips; ++s) {
      const float* as = ap + s * SS;
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
          const float* ae = as + e * MR;
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

// The exported entry points of one register-tile shape of an ISA's kernel (V its vector
// type): written once here, expanded inside namespace lattice::gemm by each ISA's file
// (gemm_avx512.cpp, gemm_avx2.cpp) and declared by gemm_x86.cpp.
#define LATTICE_TILE_ENTRIES(isa, V, mr, nv)                                                                      \
  void gather_gemm_scatter_##isa##_##mr##x##nv(const float* x, int64_t ldx, const int32_t* in_rows,               \
                                               const int32_t* out_rows, int64_t m, const float* wp, int c_in,    \
                                               int c_out, float* y, int64_t ldy, bool accumulate) {               \
    gather_gemm_scatter<V, mr, nv>(x, ldx, in_rows, out_rows, m, wp, c_in, c_out, y, ldy, accumulate);           \
  }                                                                                                               \
  int64_t gather_at_b_scratch_##isa##_##mr##x##nv(int ca, int cb) { return atb_scratch<V, mr, nv>(ca, cb); }      \
  void gather_at_b_##isa##_##mr##x##nv(const float* a, int64_t lda, const int32_t* ra, const float* b,            \
                                       int64_t ldb, const int32_t* rb, int64_t m, int ca, int cb, float* g,      \
                                       bool accumulate, float* scratch) {                                         \
    gather_at_b<V, mr, nv>(a, lda, ra, b, ldb, rb, m, ca, cb, g, accumulate, scratch);                           \
  }
