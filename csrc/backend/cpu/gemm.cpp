// Choosing and packing for lattice's GEMM kernels (gemm.h); the kernels themselves are in
// the per-ISA files.
#include "backend/cpu/gemm.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace lattice::gemm {

const KernelInfo& info(Kernel k) {
  for (const auto& i : available())
    if (i.kernel == k) return i;
  throw std::invalid_argument("[sparse_conv] this CPU has no " +
                              std::string(k == Kernel::avx512 ? "avx512" : k == Kernel::avx2 ? "avx2" : "blas") +
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

void pack(const float* w, int64_t s_row, int64_t s_col, int c_in, int c_out, int panel, float* out) {
  const int panels = (c_out + panel - 1) / panel;
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
