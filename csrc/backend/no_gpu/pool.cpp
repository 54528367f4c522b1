// GPU evaluation of the pooling primitives: CPU-only (backend/no_gpu/cpu_only.h).
#include "backend/no_gpu/cpu_only.h"
#include "pool.h"

namespace lattice {

void SparsePool::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void SparsePoolGrad::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void GlobalPool::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void GlobalPoolGrad::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }

}  // namespace lattice
