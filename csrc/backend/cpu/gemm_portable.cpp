// The kernels of gemm.h where lattice has none for the CPU (not x86-64): the convolution
// routes take the linked BLAS (Accelerate on macOS).
#include <vector>

#include "backend/cpu/gemm.h"

namespace lattice::gemm {

const std::vector<KernelInfo>& available() {
  static const std::vector<KernelInfo> none;
  return none;
}

}  // namespace lattice::gemm
