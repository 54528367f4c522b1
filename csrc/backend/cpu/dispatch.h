// Running a CPU kernel as an MLX primitive's eval_cpu: allocate the output, register
// inputs and output with the stream's command encoder, enqueue the kernel.
//
// mlx/backend/cpu/encoder.h is MLX's extension API for CPU primitives, not a private
// header: MLX's own out-of-tree extension example (examples/extensions/axpby/axpby.cpp)
// includes it and schedules its CPU kernel with cpu::get_command_encoder(stream) and
// encoder.dispatch(...), the wheel ships it under include/, and CommandEncoder and
// get_command_encoder are exported (MLX_API). There is no other public way to run an
// eval_cpu on the stream's worker: eval_cpu is called while the inputs may still be in
// flight on that worker, so a kernel run inline would race them, and scheduler::enqueue
// alone skips the task accounting the encoder keeps (notify_new_task / _completion).
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlx/allocator.h"
#include "mlx/array.h"
#include "mlx/backend/cpu/encoder.h"
#include "mlx/primitives.h"

namespace lattice {

namespace mx = mlx::core;

// Allocates `out` (at least 4 bytes: MLX wants a buffer for empty arrays too).
inline void allocate_output(mx::array& out) {
  out.set_data(mx::allocator::malloc(std::max<size_t>(out.nbytes(), 4)));
  if (out.data<void>() == nullptr) {  // MLX's CPU allocator returns null when malloc fails
    throw std::runtime_error("[" + std::string(out.primitive().name()) + "] cannot allocate " +
                             std::to_string(out.nbytes()) + " bytes for the output");
  }
}

// f(inputs, outputs) runs on the stream's worker once the inputs are ready: a primitive
// with several outputs.
template <class F>
void dispatch_cpu_outputs(mx::Stream s, const std::vector<mx::array>& inputs, std::vector<mx::array>& outputs,
                          F&& f) {
  for (auto& o : outputs) allocate_output(o);
  auto& enc = mx::cpu::get_command_encoder(s);
  for (auto& a : inputs) enc.set_input_array(a);
  for (auto& o : outputs) enc.set_output_array(o);
  std::vector<mx::array> ins, outs;
  for (auto& a : inputs) ins.push_back(mx::array::unsafe_weak_copy(a));
  for (auto& o : outputs) outs.push_back(mx::array::unsafe_weak_copy(o));
  enc.dispatch([ins = std::move(ins), outs = std::move(outs), f = std::forward<F>(f)]() mutable { f(ins, outs); });
}

// f(inputs, out) runs on the stream's worker once the inputs are ready.
template <class F>
void dispatch_cpu(mx::Stream s, const std::vector<mx::array>& inputs, mx::array& out, F&& f) {
  allocate_output(out);
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
