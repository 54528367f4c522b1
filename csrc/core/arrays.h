// Bridging between mlx::core::array and raw buffers for CPU kernels.
#pragma once

#include <cstdint>
#include "core/message.h"
#include <stdexcept>
#include <string>
#include <utility>

#include "mlx/mlx.h"

namespace lattice {

namespace mx = mlx::core;

// Evaluates `a` and returns a row-contiguous version of it (no copy when it already is).
inline mx::array materialize(const mx::array& a) {
  mx::array out = a;
  out.eval();
  if (!out.flags().row_contiguous) {
    out = mx::contiguous(out, false, mx::Device::cpu);
    out.eval();
  }
  return out;
}

// Checks an (N, 4) int32 coordinate array and returns it materialised.
inline mx::array as_coords(const mx::array& a, const char* op, const char* name = "coords") {
  if (a.ndim() != 2 || a.shape(1) != 4) {
    lattice::Message msg;
    msg << "[" << op << "] " << name << " must have shape (N, 4) as (batch, x, y, z), got ndim "
        << a.ndim();
    if (a.ndim() > 0) {
      msg << " shape (";
      for (int i = 0; i < static_cast<int>(a.ndim()); ++i) msg << (i ? ", " : "") << a.shape(i);
      msg << ")";
    }
    throw std::invalid_argument(msg.str());
  }
  if (a.dtype() != mx::int32) {
    throw std::invalid_argument(std::string("[") + op + "] " + name + " must be int32");
  }
  return materialize(a);
}

// A freshly allocated MLX buffer that kernels write into, then hand over as an array.
template <class T>
class OutArray {
 public:
  OutArray(mx::Shape shape, mx::Dtype dtype)
      : shape_(std::move(shape)), dtype_(dtype), data_(mx::allocator::malloc(bytes(shape_))) {
    ptr_ = static_cast<T*>(data_.buffer().raw_ptr());
  }
  T* data() { return ptr_; }
  mx::array finish() && { return mx::array(std::move(data_), std::move(shape_), dtype_); }

 private:
  static size_t bytes(const mx::Shape& s) {
    size_t n = 1;
    for (auto d : s) n *= static_cast<size_t>(d);
    return std::max<size_t>(n * sizeof(T), sizeof(T));
  }
  mx::Shape shape_;
  mx::Dtype dtype_;
  mx::allocator::Data data_;
  T* ptr_;
};

inline int32_t checked_rows(int64_t n, const char* op) {
  if (n > static_cast<int64_t>(INT32_MAX)) {
    lattice::Message msg;
    msg << "[" << op << "] " << n << " rows exceed the int32 row index range";
    throw std::overflow_error(msg.str());
  }
  return static_cast<int32_t>(n);
}

}  // namespace lattice
