// Choosing and packing for lattice's GEMM kernels (gemm.h); the kernels themselves are in
// the per-ISA files.
#include "backend/cpu/gemm.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>

namespace lattice::gemm {

const char* name(Kernel k) {
  switch (k) {
    case Kernel::avx2: return "avx2";
    case Kernel::avx512: return "avx512";
    case Kernel::avx512_bf16: return "avx512_bf16";
    case Kernel::amx_bf16: return "amx_bf16";
    default: return "blas";
  }
}

const KernelInfo& info(Kernel k) {
  for (const auto& i : available())
    if (i.kernel == k) return i;
  throw std::invalid_argument("[sparse_conv] this CPU has no " + std::string(name(k)) +
                              " kernel (`lattice backend` lists the ones it has: cpu_kernels)");
}

const TileKernel& KernelInfo::for_columns(int columns) const {
  const TileKernel* best = &tiles.front();
  int64_t best_pad = -1;
  for (const auto& t : tiles) {
    const int64_t pad = static_cast<int64_t>((columns + t.panel - 1) / t.panel) * t.panel - columns;
    if (best_pad < 0 || pad < best_pad || (pad == best_pad && t.panel > best->panel)) {
      best = &t;
      best_pad = pad;
    }
  }
  return *best;
}

std::string best_name() { return available().empty() ? "blas" : available().front().name; }

uint16_t to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);  // NaN, quiet
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

void KernelInfo::pack(const TileKernel& t, const float* w, int64_t s_row, int64_t s_col, int c_in, int c_out,
                      float* out) const {
  const int panel = t.panel, panels = (c_out + panel - 1) / panel;
  if (bf16) {
    // Rows (input channels) of W are contiguous in a layer's weight as MLX stores it
    // (s_row == 1): the loops then read along them, column by column, and write the packed
    // panel (a few tens of KB, in cache) with a stride; otherwise row by row. (The float32
    // packing below measured no faster in that order: 2.2-2.4 ms either way for 27 x 256 x 256.)
    const bool by_column = s_row == 1 && s_col != 1;
    const int rows = packed_rows(c_in);
    auto* dst = reinterpret_cast<uint32_t*>(out);
    const auto word = [&](int i, int j) -> uint32_t {  // W(2i, j), W(2i + 1, j): zero past c_in / c_out
      if (j >= c_out || 2 * i >= c_in) return 0u;
      const float* src = w + static_cast<int64_t>(j) * s_col + static_cast<int64_t>(2 * i) * s_row;
      const uint32_t lo = to_bf16(src[0]);
      return 2 * i + 1 < c_in ? lo | (static_cast<uint32_t>(to_bf16(src[s_row])) << 16) : lo;
    };
    for (int p = 0; p < panels; ++p) {
      uint32_t* pp = dst + static_cast<int64_t>(p) * rows * panel;
      if (by_column) {
        for (int c = 0; c < panel; ++c)
          for (int i = 0; i < rows; ++i) pp[static_cast<int64_t>(i) * panel + c] = word(i, p * panel + c);
      } else {
        for (int i = 0; i < rows; ++i)
          for (int c = 0; c < panel; ++c) pp[static_cast<int64_t>(i) * panel + c] = word(i, p * panel + c);
      }
    }
    return;
  }
  for (int p = 0; p < panels; ++p) {
    float* dst = out + static_cast<int64_t>(p) * c_in * panel;
    const int c0 = p * panel, n = std::min(panel, c_out - c0);
    for (int k = 0; k < c_in; ++k) {
      float* row = dst + static_cast<int64_t>(k) * panel;
      const float* src = w + static_cast<int64_t>(k) * s_row + static_cast<int64_t>(c0) * s_col;
      if (s_col == 1) {
        for (int j = 0; j < n; ++j) row[j] = src[j];
      } else {
        for (int j = 0; j < n; ++j) row[j] = src[static_cast<int64_t>(j) * s_col];
      }
      for (int j = n; j < panel; ++j) row[j] = 0.0f;
    }
  }
}

}  // namespace lattice::gemm
