// eval_gpu of lattice's native primitives: they run on the CPU stream only. MLX offers no
// public hook for a CUDA eval_gpu in an extension; lattice's GPU routes are its own
// kernels run through mx.fast.cuda_kernel / metal_kernel (lattice/backends/cuda.py), and
// the routing layer places these primitives on the CPU stream.
#pragma once

#include <stdexcept>
#include <string>

namespace lattice {

[[noreturn]] inline void cpu_only(const char* name) {
  throw std::runtime_error(std::string("[lattice] ") + name +
                           " runs on the CPU stream only; the routing layer chooses GPU routes");
}

}  // namespace lattice
