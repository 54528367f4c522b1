// GPU evaluation of the lattice primitives. MLX offers no public hook for a CUDA
// eval_gpu in an extension, and Metal kernels are not built yet, so these
// primitives are CPU-only: the routing layer places them on the CPU stream and
// picks MLX-native or mx.fast kernels for GPU routes.
#include <stdexcept>

#include "primitives.h"

namespace lattice {

namespace {
[[noreturn]] void cpu_only(const char* name) {
  throw std::runtime_error(std::string("[lattice] ") + name +
                           " runs on the CPU stream only; the routing layer chooses GPU routes");
}
}  // namespace

void SparseConv::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void SparseConvWeightGrad::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void BlasGemm::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }

}  // namespace lattice
