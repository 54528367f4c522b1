// GPU evaluation of the convolution, GEMM, row-wise affine and BatchNorm primitives: CPU-only (backend/no_gpu/cpu_only.h).
#include "backend/no_gpu/cpu_only.h"
#include "primitives.h"

namespace lattice {

void SparseConv::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void SparseConvWeightGrad::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void BlasGemm::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void AffineAct::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void BatchNormAct::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void BatchNormActGrad::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }

}  // namespace lattice
