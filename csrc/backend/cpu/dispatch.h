// Running a CPU kernel as an MLX primitive's eval_cpu: allocate the output, register
// inputs and output with the stream's command encoder, enqueue the kernel.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/backend/cpu/encoder.h"
#include "mlx/mlx.h"
#include "mlx/primitives.h"

namespace lattice {

namespace mx = mlx::core;

// f(inputs, out) runs on the stream's worker once the inputs are ready.
template <class F>
void dispatch_cpu(mx::Stream s, const std::vector<mx::array>& inputs, mx::array& out, F&& f) {
  out.set_data(mx::allocator::malloc(std::max<size_t>(out.nbytes(), 4)));
  if (out.data<void>() == nullptr) {  // MLX's CPU allocator returns null when malloc fails
    throw std::runtime_error("[" + std::string(out.primitive().name()) + "] cannot allocate " +
                             std::to_string(out.nbytes()) + " bytes for the output");
  }
  auto& enc = mx::cpu::get_command_encoder(s);
  for (auto& a : inputs) enc.set_input_array(a);
  enc.set_output_array(out);
  std::vector<mx::array> ins;
  for (auto& a : inputs) ins.push_back(mx::array::unsafe_weak_copy(a));
  enc.dispatch([ins = std::move(ins), out = mx::array::unsafe_weak_copy(out), f = std::forward<F>(f)]() mutable {
    f(ins, out);
  });
}

}  // namespace lattice
