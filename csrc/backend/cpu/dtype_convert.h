// float16 / bfloat16 <-> float32 conversion for the CPU kernels (compute is float32).
#pragma once

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
