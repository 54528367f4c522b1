// Bridging between mlx::core::array and raw buffers for CPU kernels.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include "core/message.h"
#include <stdexcept>
#include <string>
#include <utility>

#include "mlx/array.h"
#include "mlx/ops.h"  // contiguous, zeros

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
// Not zero-filled. Default-constructed: an empty 1-D buffer.
template <class T>
class OutArray {
 public:
  OutArray() : OutArray(mx::Shape{0}, mx::TypeToDtype<T>()) {}
  OutArray(mx::Shape shape, mx::Dtype dtype)
      : shape_(std::move(shape)), dtype_(dtype),
        data_(std::make_unique<mx::allocator::Data>(mx::allocator::malloc(bytes(shape_)))) {
    ptr_ = static_cast<T*>(data_->buffer().raw_ptr());
  }
  OutArray(OutArray&&) = default;
  OutArray& operator=(OutArray&&) = default;

  T* data() { return ptr_; }
  const T* data() const { return ptr_; }
  T& operator[](int64_t i) { return ptr_[i]; }
  const T& operator[](int64_t i) const { return ptr_[i]; }
  mx::array finish() && { return mx::array(std::move(*data_), std::move(shape_), dtype_); }

 private:
  static size_t bytes(const mx::Shape& s) {
    size_t n = 1;
    for (auto d : s) n *= static_cast<size_t>(d);
    return std::max<size_t>(n * sizeof(T), sizeof(T));
  }
  mx::Shape shape_;
  mx::Dtype dtype_;
  std::unique_ptr<mx::allocator::Data> data_;
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
