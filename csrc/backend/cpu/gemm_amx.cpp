// The bfloat16-product kernel on AMX tiles (compiled with -mamx-tile -mamx-bf16 -mavx512f
// -mavx512bw -mavx512bf16; called only where gemm_x86.cpp found AMX-BF16 on the CPU and Linux
// granted the process the tile data state, and only where LATTICE_CPU_GEMM names it: it
// rounds). The products are those of avx512_bf16 (gemm_avx512bf16.cpp): operands rounded to
// bfloat16 (nearest, ties to even), sums in float32; TDPBF16PS takes a 16 x 32 block of
// rounded input channels against a 32 x 16 block of W in one instruction where VDPBF16PS
// takes 32 pairs. The weight gradient too: its steps of 128 edges packed as avx512_bf16
// packs them (gemm_bf16.h), A's strips transposed into tile rows.
//
// Per 16 edges of one offset: the gathered rows (already rounded, KernelInfo::round_rows:
// a pair of channels a word) are copied into a staging block of whole 16-word tile rows,
// zeros past the row; for each panel of NV x 16 output columns, NV accumulator tiles start
// at zero, take every 16-word chunk of the rows against the panel's chunk of W (packed with
// its pair rows padded to a multiple of 16, KernelInfo::pair_align, zeros past C_in), and
// are stored to a staging block whose rows are then added (or stored) into Y's scattered rows.
#include <immintrin.h>

#include <cstdint>

#include "backend/cpu/gemm_bf16.h"
#include "backend/cpu/gemm_tile.h"

namespace {

constexpr int T = 16;  // rows of a tile; 64-byte tile rows: 16 float32 or 16 words of bfloat16 pairs
static_assert(T == W, "a tile row is one register");

// The tile configuration every tile of this file uses: palette 1, all eight tiles 16 rows of
// 64 bytes (LDTILECFG's 64-byte layout).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {64, 64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {T, T, T, T, T, T, T, T};
};

// Loads the configuration on the calling thread, once (tile configuration is per thread; the
// kernel is the only code of the process that configures tiles).
inline void configure_tiles() {
  thread_local bool configured = false;
  if (configured) return;
  static const TileConfig config;
  _tile_loadconfig(&config);
  configured = true;
}

// The accumulator tiles 0..NV-1 += the A tile (4) times the chunk of W at wc (rows of nr
// words; B tiles 5, 6, 7, then 5 again for the fourth): tile numbers are immediates.
template <int NV>
inline __attribute__((always_inline)) void products(const uint32_t* wc, int64_t nr_bytes) {
  _tile_loadd(5, wc, nr_bytes);
  _tile_dpbf16ps(0, 4, 5);
  if constexpr (NV > 1) {
    _tile_loadd(6, wc + T, nr_bytes);
    _tile_dpbf16ps(1, 4, 6);
  }
  if constexpr (NV > 2) {
    _tile_loadd(7, wc + 2 * T, nr_bytes);
    _tile_dpbf16ps(2, 4, 7);
  }
  if constexpr (NV > 3) {
    _tile_loadd(5, wc + 3 * T, nr_bytes);
    _tile_dpbf16ps(3, 4, 5);
  }
}

template <int NV>
inline __attribute__((always_inline)) void store_accumulators(float* c, int64_t nr_bytes) {
  _tile_stored(0, c, nr_bytes);
  if constexpr (NV > 1) _tile_stored(1, c + T, nr_bytes);
  if constexpr (NV > 2) _tile_stored(2, c + 2 * T, nr_bytes);
  if constexpr (NV > 3) _tile_stored(3, c + 3 * T, nr_bytes);
}

template <int NV>
inline __attribute__((always_inline)) void zero_accumulators() {
  _tile_zero(0);
  if constexpr (NV > 1) _tile_zero(1);
  if constexpr (NV > 2) _tile_zero(2);
  if constexpr (NV > 3) _tile_zero(3);
}

// One row of stored accumulator sums (`cols` of its NV x 16 columns) into o: added to what
// is there where `add`, else stored.
template <int NV>
inline __attribute__((always_inline)) void write_sums(const float* sums, float* o, int cols, bool add) {
  for (int v = 0; v < NV; ++v) {
    const int n = cols - v * T;
    if (n <= 0) break;
    const __mmask16 km = first(n);
    const __m512 sum = _mm512_maskz_loadu_ps(km, sums + v * T);
    _mm512_mask_storeu_ps(o + v * T, km, add ? _mm512_add_ps(_mm512_maskz_loadu_ps(km, o + v * T), sum) : sum);
  }
}

// Words of a gathered row staged at once: rows of more than 2 x 256 input channels are taken
// in slabs of this many words (the staging block on the stack, 16 KB; no C++ library type in
// this file, see gemm_tile.h).
constexpr int kSlabWords = 256;

// Y[out_rows[e]] (+)= X[in_rows[e]] @ W over [0, m), 16 edges a step; X the rounded rows
// (ldx words a row, (c_in + 1) / 2 of them used), W packed in panels of NV x 16 columns of
// kpad pair rows (kpad: (c_in + 1) / 2 rounded up to 16).
template <int NV>
void gather_gemm_scatter_amx(const float* xf, int64_t ldx, const int32_t* in_rows, const int32_t* out_rows, int64_t m,
                             const float* wpf, int c_in, int c_out, float* y, int64_t ldy, bool accumulate) {
  constexpr int NR = NV * T;
  constexpr int64_t nr_bytes = NR * 4;
  configure_tiles();
  const auto* x = reinterpret_cast<const uint32_t*>(xf);
  const auto* wp = reinterpret_cast<const uint32_t*>(wpf);
  const int kp = (c_in + 1) / 2, kpad = (kp + T - 1) / T * T;
  const int slabs = (kpad + kSlabWords - 1) / kSlabWords, sw = kpad < kSlabWords ? kpad : kSlabWords;
  const int panels = (c_out + NR - 1) / NR;
  alignas(64) uint32_t a[T * kSlabWords];
  alignas(64) float c[T * NR];
  const int32_t* rows_in = nullptr;
  int rows = 0;
  // words [s * sw, s * sw + sw) of the step's gathered rows into `a` (sw words a row), zeros
  // past each row and in the rows past the last edge (computed, never stored)
  const auto stage = [&](int s) {
    const int w0 = s * sw;
    for (int r = 0; r < T; ++r) {
      const uint32_t* src = r < rows ? x + static_cast<int64_t>(rows_in[r]) * ldx + w0 : nullptr;
      uint32_t* dst = a + static_cast<int64_t>(r) * sw;
      for (int j = 0; j < sw; j += T) {
        const __m512i v = src ? _mm512_maskz_loadu_epi32(first(kp - w0 - j), src + j) : _mm512_setzero_si512();
        _mm512_storeu_si512(dst + j, v);
      }
    }
  };
  for (int64_t e0 = 0; e0 < m; e0 += T) {
    rows = m - e0 < T ? static_cast<int>(m - e0) : T;
    rows_in = in_rows + e0;
    for (int r = 0; r < T && e0 + kAheadTiles * T + r < m; ++r) {  // the rows two steps on, into L2
      const uint32_t* xn = x + static_cast<int64_t>(in_rows[e0 + kAheadTiles * T + r]) * ldx;
      const float* yn = y + static_cast<int64_t>(out_rows[e0 + kAheadTiles * T + r]) * ldy;
      for (int j = 0; j < kp; j += kLineFloats) __builtin_prefetch(xn + j, 0, 1);
      for (int j = 0; j < c_out; j += kLineFloats) __builtin_prefetch(yn + j, 1, 1);
    }
    if (slabs == 1) stage(0);
    for (int p = 0; p < panels; ++p) {
      const uint32_t* panel = wp + static_cast<int64_t>(p) * kpad * NR;
      zero_accumulators<NV>();
      for (int s = 0; s < slabs; ++s) {
        if (slabs > 1) stage(s);
        const int words = kpad - s * sw < sw ? kpad - s * sw : sw;
        for (int k = 0; k < words; k += T) {
          _tile_loadd(4, a + k, static_cast<int64_t>(sw) * 4);
          products<NV>(panel + static_cast<int64_t>(s * sw + k) * NR, nr_bytes);
        }
      }
      store_accumulators<NV>(c, nr_bytes);
      const int col = p * NR, cols = c_out - col < NR ? c_out - col : NR;
      for (int r = 0; r < rows; ++r)
        write_sums<NV>(c + r * NR, y + static_cast<int64_t>(out_rows[e0 + r]) * ldy + col, cols, accumulate);
    }
  }
}

// ---- the weight gradient: G = sum over edges of A[ra[e]]^T B[rb[e]] ----------------------

constexpr int kPairs = kAtbEdges / 2;  // pairs of edges per step

// Words of gather_at_b_amx's buffers: A's strips of 16 columns as pack_step writes them
// (pair-major) and again transposed (column-major: a tile's rows), B's panels of NR columns.
template <int NV>
inline int64_t atb_scratch_amx(int ca, int cb) {
  constexpr int NR = NV * T;
  const int64_t strips = (ca + T - 1) / T, panels = (cb + NR - 1) / NR;
  return strips * (static_cast<int64_t>(kPairs) * T + T) + panels * kPairs * NR + strips * T * kPairs;
}

// G (ca x cb, row stride cb) = (accumulate ? G : 0) + sum over e in [0, m) of
// A[ra[e]]^T B[rb[e]] of bfloat16-rounded operands, float32 sums. Per step of 128 edges the
// gathered rows are packed as avx512_bf16 packs them (pack_step: pairs of edges), the pairs
// past the step's last one zeroed up to a whole tile of 16 pairs, each strip of 16 columns of A
// transposed (a tile row is one column of A over 16 pairs of edges: one gather per row), and
// for each 16 x NR block of G its accumulator tiles take every 16 pairs of the step in one
// TDPBF16PS per 16 columns, then are added into G.
template <int NV>
void gather_at_b_amx(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb, const int32_t* rb,
                     int64_t m, int ca, int cb, float* g, bool accumulate, float* scratch) {
  constexpr int NR = NV * T;
  constexpr int64_t nr_bytes = NR * 4, SS = static_cast<int64_t>(kPairs) * T + T;
  configure_tiles();
  const int strips = (ca + T - 1) / T, panels = (cb + NR - 1) / NR;
  auto* ap = reinterpret_cast<uint32_t*>(scratch);  // strips x SS, pair-major
  uint32_t* bp = ap + strips * SS;                  // panels x kPairs x NR
  uint32_t* at = bp + static_cast<int64_t>(panels) * kPairs * NR;  // strips x 16 x kPairs, column-major
  // word offsets of one column over 16 pairs in a pair-major strip (16 words a pair)
  const __m512i column = _mm512_set_epi32(240, 224, 208, 192, 176, 160, 144, 128, 112, 96, 80, 64, 48, 32, 16, 0);
  alignas(64) float c[T * NR];
  for (int64_t e0 = 0; e0 < m; e0 += kAtbEdges) {
    const int ne = m - e0 < kAtbEdges ? static_cast<int>(m - e0) : kAtbEdges;
    const int pairs = (ne + 1) / 2, padded = (pairs + T - 1) / T * T;
    pack_step<T, NR, kPairs>(a, lda, ra, b, ldb, rb, e0, m, ne, ca, cb, ap, SS, bp);
    for (int q = pairs; q < padded; ++q) {  // whole tiles of pairs: zeros past the step's last
      for (int s = 0; s < strips; ++s)
        _mm512_storeu_si512(ap + s * SS + static_cast<int64_t>(q) * T, _mm512_setzero_si512());
      for (int p = 0; p < panels; ++p)
        for (int v = 0; v < NR; v += T)
          _mm512_storeu_si512(bp + (static_cast<int64_t>(p) * kPairs + q) * NR + v, _mm512_setzero_si512());
    }
    for (int s = 0; s < strips; ++s)  // at row r of strip s: column s * 16 + r of A over the pairs
      for (int r = 0; r < T; ++r)
        for (int q = 0; q < padded; q += T) {
          const uint32_t* src = ap + s * SS + static_cast<int64_t>(q) * T + r;
          _mm512_storeu_si512(at + (static_cast<int64_t>(s) * T + r) * kPairs + q,
                              _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0xFFFF, column, src, 4));
        }
    const bool add = accumulate || e0 > 0;
    for (int s = 0; s < strips; ++s) {
      const int rows = ca - s * T < T ? ca - s * T : T;
      for (int p = 0; p < panels; ++p) {
        zero_accumulators<NV>();
        for (int q = 0; q < padded; q += T) {
          _tile_loadd(4, at + static_cast<int64_t>(s) * T * kPairs + q, static_cast<int64_t>(kPairs) * 4);
          products<NV>(bp + (static_cast<int64_t>(p) * kPairs + q) * NR, nr_bytes);
        }
        store_accumulators<NV>(c, nr_bytes);
        const int col = p * NR, cols = cb - col < NR ? cb - col : NR;
        for (int r = 0; r < rows; ++r)
          write_sums<NV>(c + r * NR, g + static_cast<int64_t>(s * T + r) * cb + col, cols, add);
      }
    }
  }
}

}  // namespace

namespace lattice::gemm {

// The entry points gemm_x86.cpp declares with LATTICE_TILE_DECLS (names isa_MRxNV: 16 rows a
// tile, NV accumulator tiles of 16 columns).
#define LATTICE_AMX_ENTRIES(nv)                                                                                    \
  void gather_gemm_scatter_amx_bf16_16x##nv(const float* x, int64_t ldx, const int32_t* in_rows,                 \
                                            const int32_t* out_rows, int64_t m, const float* wp, int c_in,      \
                                            int c_out, float* y, int64_t ldy, bool accumulate) {                 \
    gather_gemm_scatter_amx<nv>(x, ldx, in_rows, out_rows, m, wp, c_in, c_out, y, ldy, accumulate);              \
  }                                                                                                               \
  int64_t gather_at_b_scratch_amx_bf16_16x##nv(int ca, int cb) { return atb_scratch_amx<nv>(ca, cb); }           \
  void gather_at_b_amx_bf16_16x##nv(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb,  \
                                    const int32_t* rb, int64_t m, int ca, int cb, float* g, bool accumulate,     \
                                    float* scratch) {                                                             \
    gather_at_b_amx<nv>(a, lda, ra, b, ldb, rb, m, ca, cb, g, accumulate, scratch);                              \
  }
LATTICE_AMX_ENTRIES(2)
LATTICE_AMX_ENTRIES(3)
LATTICE_AMX_ENTRIES(4)
#undef LATTICE_AMX_ENTRIES

}  // namespace lattice::gemm
