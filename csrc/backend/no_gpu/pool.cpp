// GPU evaluation of the pooling primitives: CPU-only in this build (see
// backend/no_gpu/primitives.cpp); the routing layer places them on the CPU stream.
#include <stdexcept>
#include <string>

#include "pool.h"

namespace lattice {

namespace {
[[noreturn]] void cpu_only(const char* name) {
  throw std::runtime_error(std::string("[lattice] ") + name +
                           " runs on the CPU stream only; the routing layer chooses GPU routes");
}
}  // namespace

void SparsePool::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void SparsePoolGrad::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void GlobalPool::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }
void GlobalPoolGrad::eval_gpu(const std::vector<mx::array>&, std::vector<mx::array>&) { cpu_only(name()); }

}  // namespace lattice
