// lattice's own register-tiled float32 GEMM kernels for the CPU convolution: the gathered
// rows of X go straight into the FMAs and the product is added into the scattered rows of Y
// from registers, so nothing is gathered into a buffer, no BLAS packs its operands per tile
// and no product tile is written and read back. W is packed once per call into panels of
// `panel` columns (gemm::pack). The weight gradient's kernel, whose reduction runs over the
// edges, packs the gathered rows of both operands a step of edges at a time. One kernel per
// instruction set, compiled in its own file with its own flags (gemm_avx512.cpp,
// gemm_avx2.cpp) and chosen at run time by what the CPU and the OS support (gemm_x86.cpp);
// other platforms have none (gemm_portable.cpp) and the routes take the BLAS. A kernel comes
// in register-tile shapes (TileKernel), one picked per product by its output width
// (KernelInfo::for_columns): AVX-512F 12 rows x 32 columns, 8 x 48 and 6 x 64 of
// accumulators (24 of the 32 zmm registers each), AVX2 + FMA 6 x 16. Two kernels round:
// avx512_bf16 (gemm_avx512bf16.cpp) multiplies bfloat16-rounded operands into float32 sums,
// twice the multiply-adds per instruction, and amx_bf16 (gemm_amx.cpp) takes the same
// products on AMX tiles (16 rows x 32 input channels x 16 output channels an instruction);
// they run only where LATTICE_CPU_GEMM names them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lattice::gemm {

// What runs a convolution's products: the linked BLAS (gather -> sgemm -> scatter-add) or
// one of lattice's kernels. The values travel through the Python bindings.
enum class Kernel : int { blas = 0, avx2 = 1, avx512 = 2, avx512_bf16 = 3, amx_bf16 = 4 };

// The kernel's name ("blas", "avx2", "avx512", "avx512_bf16", "amx_bf16").
const char* name(Kernel k);

// Y[out_rows[e]] (+)= X[in_rows[e]] @ W for e in [0, m) (added where accumulate, else stored:
// the first offset that writes every output row needs no zeroed Y): X rows of length c_in
// (stride ldx), Y rows of c_out (stride ldy), W packed by KernelInfo::pack for this kernel;
// where the kernel rounds (KernelInfo::bf16), X is the rows as KernelInfo::round_rows wrote
// them (ldx words). Rows of out_rows must be distinct within one call (one kernel offset),
// or the call must run alone.
using GatherGemmScatter = void (*)(const float* x, int64_t ldx, const int32_t* in_rows, const int32_t* out_rows,
                                   int64_t m, const float* wp, int c_in, int c_out, float* y, int64_t ldy,
                                   bool accumulate);

// G (ca x cb, row stride cb) = (accumulate ? G : 0) + sum over e in [0, m) of
// A[ra[e]]^T B[rb[e]] (the weight gradient of one kernel offset): the gathered rows packed a
// step of edges at a time into `scratch` (at_b_scratch(ca, cb) floats, the caller's), then
// register tiles over the step.
using GatherAtB = void (*)(const float* a, int64_t lda, const int32_t* ra, const float* b, int64_t ldb,
                           const int32_t* rb, int64_t m, int ca, int cb, float* g, bool accumulate, float* scratch);

// One register-tile shape of a kernel: `rows` rows of the gathered operand times `panel`
// columns (the packed panel of W; of G's columns in the weight gradient).
struct TileKernel {
  int panel;  // columns per packed panel of W
  int rows;   // rows per register tile
  GatherGemmScatter gather_gemm_scatter;
  GatherAtB gather_at_b;
  int64_t (*at_b_scratch)(int ca, int cb);
};

struct KernelInfo {
  Kernel kernel;
  const char* name;
  std::vector<TileKernel> tiles;  // narrowest first
  // Products of bfloat16-rounded operands (W packed as pairs of rows of bfloat16, round to
  // nearest even); false: float32 FMAs.
  bool bf16 = false;
  // Where bf16: rounds n rows of c floats (row stride ld) into out, (c + 1) / 2 four-byte
  // words a row, word j holding elements 2j (low half) and 2j + 1 (zero past c): the forward's
  // X as gather_gemm_scatter reads it.
  void (*round_rows)(const float* x, int64_t ld, int64_t n, int c, float* out) = nullptr;
  // Where bf16: the packed W's pair rows per panel, (c_in + 1) / 2 rounded up to a multiple of
  // this (zeros past c_in): 16 for the AMX kernel, whose tiles take 16 pair rows at a time.
  int pair_align = 1;

  // Rows of a packed panel: pairs of input channels (bf16, padded to pair_align) or channels.
  int packed_rows(int c_in) const {
    return bf16 ? ((c_in + 1) / 2 + pair_align - 1) / pair_align * pair_align : c_in;
  }

  // The tile for a product of `columns` output columns: the one that pads the fewest
  // columns (panels * panel - columns), the widest of those. A broadcast operand feeds
  // fewer FMAs in a narrow tile: on a Zen 4 core, 12 x 32 ran at 97-104 GFLOP/s from L1,
  // 8 x 48 and 6 x 64 at 111-116; so 64 and 128 channels take 6 x 64, 96 takes 8 x 48,
  // 32 keeps 12 x 32 (a wider tile would multiply zeros).
  const TileKernel& for_columns(int columns) const;

  // Floats of W (c_in x c_out) packed for tile t (4-byte words where bf16: a pair of rows per
  // word row).
  int64_t packed_size(const TileKernel& t, int c_in, int c_out) const {
    return static_cast<int64_t>((c_out + t.panel - 1) / t.panel) * t.panel * packed_rows(c_in);
  }

  // Packs W (c_in x c_out, element (i, j) at w + i * s_row + j * s_col) for tile t into
  // panels: panel p holds columns [p * panel, p * panel + panel), zeros past c_out, as c_in
  // rows of `panel` floats, or (bf16) as packed_rows(c_in) rows of `panel` words, word j of
  // row i holding W(2i, j) in its low half and W(2i + 1, j) in its high half (zero past c_in).
  void pack(const TileKernel& t, const float* w, int64_t s_row, int64_t s_col, int c_in, int c_out, float* out) const;
};

// The kernels this machine runs, best first (empty where only the BLAS does).
const std::vector<KernelInfo>& available();

// The kernel k (throws std::invalid_argument where this machine cannot run it).
const KernelInfo& info(Kernel k);

// The name of the best kernel here ("avx512", "avx2"), or "blas".
std::string best_name();

// x rounded to bfloat16 as VCVTNE2PS2BF16 rounds it: to nearest, ties to even, NaN kept quiet.
uint16_t to_bf16(float x);

}  // namespace lattice::gemm
