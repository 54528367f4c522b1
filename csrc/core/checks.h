// Checks of what the native entry points are given: row indices, edge lists, edge
// offsets and row counts. The Python ops validate their arguments, but every `_ext`
// function is reachable from Python, so whatever a kernel uses as an index is checked
// here first, and a bad value is a std::invalid_argument (ValueError in Python) that
// names the op and the values, never an out-of-bounds read or write.
//
// Two places run them. Graph-building ops (csrc/ops.cpp, csrc/pool.cpp) check what is on
// the host when the graph is built: shapes, dtypes, the edge offsets, row counts. Index
// arrays are MLX arrays that may not be computed yet, so their values are checked by the
// primitive's CPU task (check_rows below, a min / max pass over both cores) before the
// kernel reads through them; MLX hands an exception thrown there to whoever evaluates
// the result.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/message.h"
#include "core/parallel.h"
#include "mlx/array.h"
#include "mlx/ops.h"  // astype, contiguous

namespace lattice {

namespace mx = mlx::core;

[[noreturn]] inline void invalid(const Message& msg) { throw std::invalid_argument(msg.str()); }

inline void require(bool ok, const std::string& msg) {
  if (!ok) throw std::invalid_argument(msg);
}

// Smallest and largest of n int32 values (lo > hi when n == 0), over both cores.
struct IndexRange {
  int32_t lo = std::numeric_limits<int32_t>::max();
  int32_t hi = std::numeric_limits<int32_t>::min();
};

inline IndexRange index_range(const int32_t* v, int64_t n) {
  const int64_t chunks = chunk_count(n, 1 << 16, 16);
  std::vector<IndexRange> part(static_cast<size_t>(chunks));
  parallel_chunks(n, chunks, [&](int64_t c, int64_t b, int64_t e) {
    int32_t lo = std::numeric_limits<int32_t>::max(), hi = std::numeric_limits<int32_t>::min();
    for (int64_t j = b; j < e; ++j) {  // branch-free: vectorises
      lo = std::min(lo, v[j]);
      hi = std::max(hi, v[j]);
    }
    part[c] = {lo, hi};
  });
  IndexRange r;
  for (const auto& p : part) {
    r.lo = std::min(r.lo, p.lo);
    r.hi = std::max(r.hi, p.hi);
  }
  return r;
}

// Every one of rows[0..n) lies in [0, limit): "[op] in_rows must lie in [0, 4) (the rows
// of the features), got values in [0, 100000000]".
inline void check_rows(const int32_t* rows, int64_t n, int64_t limit, const char* op, const char* name,
                       const char* of_what) {
  if (n == 0) return;
  const IndexRange r = index_range(rows, n);
  if (r.lo < 0 || r.hi >= limit) {
    Message msg;
    msg << "[" << op << "] " << name << " must lie in [0, " << limit << ") (the rows of " << of_what
        << "), got values in [" << r.lo << ", " << r.hi << "]";
    invalid(msg);
  }
}

// check_rows on an index array when its values are computed already (and row-contiguous
// int32), so that an error reaches the caller of the op, as a ValueError; returns whether
// it checked. Otherwise the primitive's CPU task checks them once they are computed (an
// error thrown there reaches whoever evaluates the result; MLX raises it as a RuntimeError
// with the same message).
inline bool check_rows_now(const mx::array& r, int64_t limit, const char* op, const char* name,
                           const char* of_what) {
  if (r.dtype() != mx::int32 || r.ndim() != 1 || !r.is_available() || !r.flags().row_contiguous) return false;
  check_rows(r.data<int32_t>(), static_cast<int64_t>(r.size()), limit, op, name, of_what);
  return true;
}

// A row count of an output or of an operand: non-negative and an int32.
inline void check_count(int64_t n, const char* op, const char* name) {
  if (n < 0 || n > std::numeric_limits<int32_t>::max()) {
    Message msg;
    msg << "[" << op << "] " << name << " must be in [0, 2^31), got " << n;
    invalid(msg);
  }
}

// Every entry of a per-axis triple (stride, dilation) at least 1 and at most `most`.
inline void check_axes(const std::array<int32_t, 3>& v, int64_t most, const char* op, const char* name) {
  for (int32_t a : v) {
    if (a < 1 || a > most) {
      Message msg;
      msg << "[" << op << "] " << name << " must be in 1.." << most << " on every axis, got (" << v[0] << ", "
          << v[1] << ", " << v[2] << ")";
      invalid(msg);
    }
  }
}

// Edge offsets of a relation: K + 1 entries (when k >= 0), starting at 0, never
// decreasing, ending at the edge count.
inline void check_edge_offsets(const std::vector<int64_t>* bounds, int64_t k, int64_t edges, const char* op) {
  Message msg;
  msg << "[" << op << "] ";
  if (!bounds || bounds->empty()) {
    msg << "relation offsets must have at least one entry (0), got none";
    invalid(msg);
  }
  const auto& b = *bounds;
  if (k >= 0 && static_cast<int64_t>(b.size()) != k + 1) {
    msg << "relation offsets must have K + 1 = " << k + 1 << " entries for the K = " << k
        << " kernel offsets of the weight, got " << b.size();
    invalid(msg);
  }
  if (b.front() != 0) {
    msg << "relation offsets must start at 0, got " << b.front();
    invalid(msg);
  }
  for (size_t i = 1; i < b.size(); ++i) {
    if (b[i] < b[i - 1]) {
      msg << "relation offsets must never decrease, got " << b[i - 1] << " then " << b[i] << " at entries "
          << i - 1 << " and " << i;
      invalid(msg);
    }
  }
  if (b.back() != edges) {
    msg << "relation offsets end at " << b.back() << " but the edge arrays hold " << edges << " edges";
    invalid(msg);
  }
}

inline std::string dtype_name(mx::Dtype t) {
  if (t == mx::bool_) return "bool";
  if (t == mx::uint8) return "uint8";
  if (t == mx::uint16) return "uint16";
  if (t == mx::uint32) return "uint32";
  if (t == mx::uint64) return "uint64";
  if (t == mx::int8) return "int8";
  if (t == mx::int16) return "int16";
  if (t == mx::int32) return "int32";
  if (t == mx::int64) return "int64";
  if (t == mx::float16) return "float16";
  if (t == mx::bfloat16) return "bfloat16";
  if (t == mx::float32) return "float32";
  if (t == mx::float64) return "float64";
  return "complex64";
}

// Row-index arrays: 1-D, of an integer type that converts to int32 without wrapping.
inline void check_index_array(const mx::array& r, const char* op, const char* name) {
  if (r.ndim() != 1) {
    Message msg;
    msg << "[" << op << "] " << name << " must be 1-D, got ndim " << static_cast<int64_t>(r.ndim());
    invalid(msg);
  }
  const mx::Dtype t = r.dtype();
  if (!(t == mx::int32 || t == mx::int16 || t == mx::int8 || t == mx::uint16 || t == mx::uint8)) {
    Message msg;
    msg << "[" << op << "] " << name << " must be int32 (or a narrower integer type), got " << dtype_name(t);
    invalid(msg);
  }
}


// True when within each offset's range [bounds[k], bounds[k+1]) no two of `rows` (all in
// [0, limit), checked before) are equal: the property the parallel scatter of one offset
// relies on. One pass over the edges: the offsets are split over the cores by edge count,
// and each core marks the rows it has seen in one array of its own, with a stamp that is
// new for every offset (no clearing between offsets).
inline bool rows_distinct_per_offset(const int32_t* rows, const std::vector<int64_t>& bounds, int64_t limit) {
  const int64_t K = static_cast<int64_t>(bounds.size()) - 1;
  const int64_t E = K > 0 ? bounds.back() : 0;
  if (E == 0) return true;
  std::atomic<bool> distinct{true};
  const int64_t parts = std::min<int64_t>(num_threads(), (E + 32767) / 32768);
  parallel_chunks(E, parts, [&](int64_t, int64_t b, int64_t e) {
    // the offsets whose first edge lies in [b, e)
    int64_t k = std::lower_bound(bounds.begin(), bounds.end() - 1, b) - bounds.begin();
    std::vector<uint32_t> seen(static_cast<size_t>(limit), 0);
    uint32_t stamp = 0;
    for (; k < K && bounds[k] < e; ++k) {
      ++stamp;
      for (int64_t j = bounds[k]; j < bounds[k + 1]; ++j) {
        uint32_t& s = seen[static_cast<size_t>(rows[j])];
        if (s == stamp) {
          distinct.store(false, std::memory_order_relaxed);
          return;
        }
        s = stamp;
      }
      if (!distinct.load(std::memory_order_relaxed)) return;
    }
  });
  return distinct.load();
}

inline bool is_float(mx::Dtype t) { return t == mx::float32 || t == mx::float16 || t == mx::bfloat16; }

// An index array as contiguous int32 (checked to be int32 or narrower: int64 could wrap).
inline mx::array rows_i32(const mx::array& r, const char* op, const char* name, mx::StreamOrDevice s) {
  check_index_array(r, op, name);
  return mx::contiguous(mx::astype(r, mx::int32, s), false, s);
}

// A feature matrix: (N, C) of float32, float16 or bfloat16.
inline void check_feats(const mx::array& x, const char* op, const char* name) {
  if (x.ndim() != 2) {
    Message msg;
    msg << "[" << op << "] " << name << " must be (N, C), got ndim " << static_cast<int64_t>(x.ndim());
    invalid(msg);
  }
  if (!is_float(x.dtype())) {
    Message msg;
    msg << "[" << op << "] " << name << " must be float32, float16 or bfloat16, got " << dtype_name(x.dtype());
    invalid(msg);
  }
}

}  // namespace lattice
