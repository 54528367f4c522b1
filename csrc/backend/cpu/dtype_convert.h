// float16 / bfloat16 <-> float32 conversion for the CPU kernels (compute is float32).
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/parallel.h"
#include "mlx/array.h"

namespace lattice {

namespace mx = mlx::core;

// Returns a float32 pointer to a's data, converting into `scratch` when a is not float32.
inline const float* as_f32(const mx::array& a, std::vector<float>& scratch) {
  if (a.dtype() == mx::float32) return a.data<float>();
  const int64_t n = static_cast<int64_t>(a.size());
  scratch.resize(n);
  float* dst = scratch.data();
  if (a.dtype() == mx::float16) {
    const auto* src = a.data<mx::float16_t>();
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = static_cast<float>(src[i]);
    }, 1 << 16);
  } else {
    const auto* src = a.data<mx::bfloat16_t>();
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = static_cast<float>(src[i]);
    }, 1 << 16);
  }
  return dst;
}

// a's elements (any float dtype, any strides: a view MLX did not copy) as row-major float32
// in `scratch`: rows of the last axis, each read through its stride.
template <class T>
void strided_rows_to_f32(const mx::array& a, const T* src, float* dst) {
  const int nd = static_cast<int>(a.ndim());
  const int64_t cols = nd ? a.shape(nd - 1) : 1, step = nd ? a.strides()[nd - 1] : 1;
  const int64_t rows = cols ? static_cast<int64_t>(a.size()) / cols : 0;
  std::vector<int64_t> idx(std::max(nd - 1, 0), 0);
  int64_t off = 0;  // the row's first element, kept as idx counts up
  for (int64_t r = 0; r < rows; ++r, dst += cols) {
    for (int64_t j = 0; j < cols; ++j) dst[j] = static_cast<float>(src[off + j * step]);
    for (int d = nd - 2; d >= 0; --d) {
      off += a.strides()[d];
      if (++idx[d] < a.shape(d)) break;
      off -= a.strides()[d] * a.shape(d);
      idx[d] = 0;
    }
  }
}

inline const float* dense_f32(const mx::array& a, std::vector<float>& scratch) {
  scratch.resize(a.size());
  if (a.dtype() == mx::float32) strided_rows_to_f32(a, a.data<float>(), scratch.data());
  else if (a.dtype() == mx::float16) strided_rows_to_f32(a, a.data<mx::float16_t>(), scratch.data());
  else strided_rows_to_f32(a, a.data<mx::bfloat16_t>(), scratch.data());
  return scratch.data();
}

// A matrix operand of a BLAS call as its memory holds it: a row-contiguous float32 matrix is
// read as it is, a column-contiguous one (a transposed view) as the transpose with the other
// leading dimension; anything else is copied to row-major float32 first.
struct BlasOperand {
  const float* data;
  bool trans;
  int ld;
};

inline BlasOperand blas_operand(const mx::array& m, bool trans, std::vector<float>& scratch) {
  const int rows = m.shape(0), cols = m.shape(1);
  if (m.dtype() == mx::float32 && m.flags().row_contiguous) return {m.data<float>(), trans, std::max(cols, 1)};
  if (m.dtype() == mx::float32 && m.flags().col_contiguous) return {m.data<float>(), !trans, std::max(rows, 1)};
  if (m.flags().row_contiguous) return {as_f32(m, scratch), trans, std::max(cols, 1)};
  return {dense_f32(m, scratch), trans, std::max(cols, 1)};
}

// Writes float32 values into `out` (of any float dtype).
inline void store_from_f32(const float* src, mx::array& out) {
  const int64_t n = static_cast<int64_t>(out.size());
  if (out.dtype() == mx::float16) {
    auto* dst = out.data<mx::float16_t>();
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = static_cast<mx::float16_t>(src[i]);
    }, 1 << 16);
  } else if (out.dtype() == mx::bfloat16) {
    auto* dst = out.data<mx::bfloat16_t>();
    parallel_for(n, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dst[i] = static_cast<mx::bfloat16_t>(src[i]);
    }, 1 << 16);
  }
}

}  // namespace lattice
