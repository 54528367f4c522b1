// The streaming voxelizer's accumulator (see voxel_accumulator.h).
#include "backend/cpu/voxel_accumulator.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <type_traits>

#include "backend/cpu/coords.h"
#include "core/checks.h"
#include "core/message.h"
#include "core/parallel.h"

namespace lattice {

static constexpr const char* kOp = "voxelize";

// fn(std::integral_constant<int64_t, C>) for the common channel counts 1..8 (the loop over
// channels unrolled), fn(integral_constant<int64_t, 0>) for any other.
template <class Fn>
void with_channels(int64_t c, Fn&& fn) {
  switch (c) {
    case 1: return fn(std::integral_constant<int64_t, 1>{});
    case 2: return fn(std::integral_constant<int64_t, 2>{});
    case 3: return fn(std::integral_constant<int64_t, 3>{});
    case 4: return fn(std::integral_constant<int64_t, 4>{});
    case 6: return fn(std::integral_constant<int64_t, 6>{});
    case 8: return fn(std::integral_constant<int64_t, 8>{});
    default: return fn(std::integral_constant<int64_t, 0>{});
  }
}

mx::array segment_sum(const mx::array& feats_in, const mx::array& inverse_in, int64_t m, const mx::array* counts_in) {
  const char* op = "voxelize";
  check_feats(feats_in, op, "feats");
  check_index_array(inverse_in, op, "inverse");
  check_count(m, op, "voxel count");
  mx::array feats = materialize(mx::astype(feats_in, mx::float32, mx::Device::cpu));
  mx::array inverse = materialize(mx::astype(inverse_in, mx::int32, mx::Device::cpu));
  const int64_t n = feats.shape(0), c = feats.shape(1);
  if (static_cast<int64_t>(inverse.size()) != n) {
    Message msg;
    msg << "[" << op << "] inverse must have one row per point (" << n << "), got " << inverse.size();
    invalid(msg);
  }
  const int32_t* inv = inverse.data<int32_t>();
  const float* f = feats.data<float>();
  check_rows(inv, n, m, op, "inverse", "the voxels");
  mx::array counts = mx::zeros({0}, mx::int32);
  if (counts_in) {
    check_index_array(*counts_in, op, "counts");
    counts = materialize(mx::astype(*counts_in, mx::int32, mx::Device::cpu));
    if (static_cast<int64_t>(counts.size()) != m) {
      Message msg;
      msg << "[" << op << "] counts must have one row per voxel (" << m << "), got " << counts.size();
      invalid(msg);
    }
  }
  const int32_t* cnt = counts_in ? counts.data<int32_t>() : nullptr;
  OutArray<float> out({static_cast<int>(m), static_cast<int>(c)}, mx::float32);
  float* o = out.data();
  const int64_t mc = m * c;
  // Per-thread buffers only when they are small next to the points; else one, in point order.
  int64_t threads = std::min<int64_t>(num_threads(), chunk_count(n, 1 << 15));
  if (threads <= 1 || mc * threads > 2 * n * c) threads = 1;
  std::vector<std::vector<double>> part(static_cast<size_t>(threads));
  parallel_chunks(n, threads, [&](int64_t t, int64_t b, int64_t e) {
    std::vector<double>& acc = part[t];
    acc.assign(static_cast<size_t>(mc), 0.0);
    with_channels(c, [&](auto width) {
      constexpr int64_t kC = decltype(width)::value;  // 0: c known at run time only
      const int64_t cc = kC ? kC : c;
      for (int64_t i = b; i < e; ++i) {
        double* a = acc.data() + int64_t{inv[i]} * cc;
        const float* x = f + i * cc;
        for (int64_t k = 0; k < cc; ++k) a[k] += x[k];
      }
    });
  });
  // The threads' sums added into the first buffer in thread order (a flat pass), then each
  // row divided by its count for the mean, the channels unrolled (paired divisions).
  std::vector<double>& sum = part[0];
  if (part.size() > 1) {
    parallel_for(mc, [&](int64_t b, int64_t e) {
      for (size_t t = 1; t < part.size(); ++t) {
        const double* x = part[t].data();
        for (int64_t j = b; j < e; ++j) sum[j] += x[j];
      }
    });
  }
  with_channels(c, [&](auto width) {
    constexpr int64_t kC = decltype(width)::value;
    const int64_t cc = kC ? kC : c;
    parallel_for(m, [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e; ++u) {
        const double* x = sum.data() + u * cc;
        float* y = o + u * cc;
        if (cnt) {
          const double count = static_cast<double>(std::max<int32_t>(cnt[u], 1));
          for (int64_t k = 0; k < cc; ++k) y[k] = static_cast<float>(x[k] / count);
        } else {
          for (int64_t k = 0; k < cc; ++k) y[k] = static_cast<float>(x[k]);
        }
      }
    });
  });
  return std::move(out).finish();
}

VoxelReduce parse_voxel_reduce(const std::string& name) {
  if (name == "count") return VoxelReduce::kCount;
  if (name == "sum") return VoxelReduce::kSum;
  if (name == "mean") return VoxelReduce::kMean;
  if (name == "max") return VoxelReduce::kMax;
  if (name == "min") return VoxelReduce::kMin;
  if (name == "first") return VoxelReduce::kFirst;
  throw std::invalid_argument("[voxelize] reduction must be one of count, sum, mean, max, min, first, got '" +
                              name + "'");
}

VoxelAccumulator::VoxelAccumulator(const std::array<double, 3>& voxel_size, const std::array<double, 3>& origin,
                                   std::vector<VoxelReduce> reduces)
    : voxel_size_(voxel_size), origin_(origin), reduces_(std::move(reduces)) {
  for (int a = 0; a < 3; ++a) {
    if (!(voxel_size[a] > 0) || !std::isfinite(voxel_size[a]) || !std::isfinite(origin[a])) {
      Message msg;
      msg << "[" << kOp << "] voxel size must be positive and finite and the origin finite, got "
          << voxel_size[a] << " and " << origin[a] << " on axis " << "xyz"[a];
      throw std::invalid_argument(msg.str());
    }
  }
}

void VoxelAccumulator::add(const PointRows& points, const double* feats) {
  const Bounds b = quantize_coords(points, voxel_size_, origin_, nullptr, q_, kOp);
  const int64_t m = points.n;
  if (!reduces_.empty() && !feats && m > 0) {
    throw std::invalid_argument("[voxelize] features are required for the feature columns");
  }
  if (m == 0) return;
  Bounds merged = b;
  if (n_ > 0) {
    for (int a = 0; a < 4; ++a) {
      merged.lo[a] = std::min(bounds_.lo[a], b.lo[a]);
      merged.hi[a] = std::max(bounds_.hi[a], b.hi[a]);
    }
  }
  Packer check(merged, kOp);  // the voxels must stay usable as a CoordTable
  (void)check;
  checked_rows(n_ + m, kOp);  // tentative rows n_ + i must fit int32
  bounds_ = merged;
  if (!table_.fits(n_ + m)) table_.rebuild(coords_.data(), n_, n_ + m);
  const int64_t added = insert_chunk(m);
  accumulate(m, feats);
  n_ += added;
}

// Finds or inserts every point's voxel; new voxels get rows n_, n_ + 1, ... in order of
// their first point. Fills rows_ (the voxel row of every point) and returns the number
// of new voxels. Per-voxel arrays are grown and new rows initialised here.
int64_t VoxelAccumulator::insert_chunk(int64_t m) {
  const int64_t n0 = n_;
  pos_.resize(m);
  rows_.resize(m);
  first_.resize(m);
  const int32_t* q = q_.data();
  const int32_t* old = coords_.data();
  auto coords_of = [&](int64_t r) { return r < n0 ? old + 4 * r : q + 4 * (r - n0); };
  const int64_t chunks = chunk_count(m);
  parallel_chunks(m, chunks, [&](int64_t, int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) pos_[i] = table_.insert_min(q + 4 * i, n0 + i, coords_of);
  });
  std::vector<int64_t> offset(chunks + 1, 0);
  parallel_chunks(m, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    int64_t u = 0;
    for (int64_t i = b; i < e; ++i) {
      first_[i] = table_.row_at(pos_[i]) == n0 + i;
      u += first_[i];
    }
    offset[ci + 1] = u;
  });
  for (int64_t ci = 0; ci < chunks; ++ci) offset[ci + 1] += offset[ci];
  const int64_t added = offset[chunks];
  const int64_t n1 = n0 + added;
  const int64_t c = channels();
  coords_.reserve(4 * n1);
  counts_.reserve(n1);
  if (c) acc_.reserve(n1 * c);
  int32_t* coords = coords_.data();
  double* acc = acc_.data();
  std::vector<double> init(c, 0.0);  // the value a new voxel's state starts from, per column
  for (int64_t k = 0; k < c; ++k) {
    if (reduces_[k] == VoxelReduce::kMax) init[k] = -std::numeric_limits<double>::infinity();
    if (reduces_[k] == VoxelReduce::kMin) init[k] = std::numeric_limits<double>::infinity();
  }
  parallel_chunks(m, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    int64_t u = n0 + offset[ci];
    for (int64_t i = b; i < e; ++i) {
      if (!first_[i]) continue;
      for (int a = 0; a < 4; ++a) coords[4 * u + a] = q[4 * i + a];
      std::copy(init.begin(), init.end(), acc + u * c);
      table_.set_row(pos_[i], u);
      ++u;
    }
  });
  parallel_for(m, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) rows_[i] = static_cast<int32_t>(table_.row_at(pos_[i]));
  });
  return added;
}

// Reduces every point onto its voxel. Voxel rows are split between threads in blocks of
// 1024, and each thread walks the points in order: every voxel sees its points in point
// order whatever the thread count, so float sums are reproducible.
void VoxelAccumulator::accumulate(int64_t m, const double* feats) {
  const int64_t parts = num_threads();
  const int32_t* rows = rows_.data();
  const int64_t c = channels();
  uint32_t* counts = counts_.data();
  std::atomic<bool> overflow{false};
  double* acc = acc_.data();
  const VoxelReduce* reduces = reduces_.data();
  const uint8_t* first = first_.data();
  parallel_chunks(parts, parts, [&](int64_t part, int64_t, int64_t) {
    for (int64_t i = 0; i < m; ++i) {
      const int64_t r = rows[i];
      if ((r >> 10) % parts != part) continue;
      if (++counts[r] == 0) overflow.store(true, std::memory_order_relaxed);
      const double* f = feats + i * c;
      double* a = acc + r * c;
      for (int64_t k = 0; k < c; ++k) {
        const double v = f[k];
        switch (reduces[k]) {
          case VoxelReduce::kSum:
          case VoxelReduce::kMean:
            a[k] += v;
            break;
          case VoxelReduce::kMax:
            if (v > a[k] || std::isnan(v)) a[k] = v;  // a NaN stays: NaN propagates as in np.maximum
            break;
          case VoxelReduce::kMin:
            if (v < a[k] || std::isnan(v)) a[k] = v;
            break;
          case VoxelReduce::kFirst:
            if (first[i]) a[k] = v;
            break;
          case VoxelReduce::kCount:
            a[k] += std::isnan(v) ? 0.0 : 1.0;
            break;
        }
      }
    }
  });
  if (overflow.load()) {
    throw std::overflow_error("[voxelize] a voxel holds more than 4294967295 points; use a smaller voxel size");
  }
}

VoxelResult VoxelAccumulator::finish() {
  table_.reset();
  std::vector<int32_t>().swap(q_);
  std::vector<uint64_t>().swap(pos_);
  std::vector<int32_t>().swap(rows_);
  std::vector<uint8_t>().swap(first_);
  VoxelResult r;
  const int64_t n = n_;
  const int64_t c = channels();
  r.n = n;
  r.channels = c;
  counts_.grow(n);
  coords_.grow(4 * n);
  acc_.grow(n * c);
  const uint32_t* counts = counts_.data();
  double* acc = acc_.data();
  const VoxelReduce* reduces = reduces_.data();
  parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      for (int64_t k = 0; k < c; ++k) {
        if (reduces[k] == VoxelReduce::kMean) acc[i * c + k] /= static_cast<double>(std::max<uint32_t>(counts[i], 1));
      }
    }
  });
  r.feats = std::move(acc_);
  r.coords = std::move(coords_);
  r.counts.grow(n);
  int64_t* wide = r.counts.data();
  parallel_for(n, [&](int64_t b, int64_t e) { std::copy(counts + b, counts + e, wide + b); });
  counts_.reset();
  n_ = 0;
  bounds_ = Bounds();
  return r;
}

}  // namespace lattice
