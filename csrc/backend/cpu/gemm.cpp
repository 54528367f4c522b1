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
    default: return "blas";
  }
}

const KernelInfo& info(Kernel k) {
  for (const auto& i : available())
    if (i.kernel == k) return i;
  throw std::invalid_argument("[sparse_conv] this CPU has no " + std::string(name(k)) +
                              " kernel (lattice.backends.info() lists what it has)");
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
  const auto at = [&](int i, int j) { return w[static_cast<int64_t>(i) * s_row + static_cast<int64_t>(j) * s_col]; };
  if (bf16) {
    const int rows = (c_in + 1) / 2;
    auto* dst = reinterpret_cast<uint32_t*>(out);
    for (int p = 0; p < panels; ++p)
      for (int i = 0; i < rows; ++i) {
        uint32_t* row = dst + (static_cast<int64_t>(p) * rows + i) * panel;
        for (int c = 0; c < panel; ++c) {
          const int j = p * panel + c;
          const uint32_t lo = j < c_out ? to_bf16(at(2 * i, j)) : 0u;
          const uint32_t hi = j < c_out && 2 * i + 1 < c_in ? to_bf16(at(2 * i + 1, j)) : 0u;
          row[c] = lo | (hi << 16);
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
