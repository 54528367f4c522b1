// The streaming voxelizer's accumulator (see voxel_accumulator.h).
#include "backend/cpu/voxel_accumulator.h"

#include <atomic>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "backend/cpu/coords.h"
#include "core/message.h"
#include "core/parallel.h"

namespace lattice {

static constexpr const char* kOp = "voxelize";

VoxelReduce parse_voxel_reduce(const std::string& name) {
  if (name == "count") return VoxelReduce::kCount;
  if (name == "sum") return VoxelReduce::kSum;
  if (name == "mean") return VoxelReduce::kMean;
  if (name == "max") return VoxelReduce::kMax;
  if (name == "first") return VoxelReduce::kFirst;
  throw std::invalid_argument("[voxelize] reduction must be one of count, sum, mean, max, first, got '" + name +
                              "'");
}

VoxelAccumulator::VoxelAccumulator(const std::array<double, 3>& voxel_size, const std::array<double, 3>& origin,
                                   VoxelReduce reduce, int64_t channels)
    : voxel_size_(voxel_size), origin_(origin), reduce_(reduce), channels_(channels) {
  if (reduce == VoxelReduce::kCount) channels_ = 0;
  else if (channels < 1) {
    Message msg;
    msg << "[" << kOp << "] a feature reduction needs at least one channel, got " << channels;
    throw std::invalid_argument(msg.str());
  }
  for (int a = 0; a < 3; ++a) {
    if (!(voxel_size[a] > 0) || !std::isfinite(voxel_size[a]) || !std::isfinite(origin[a])) {
      Message msg;
      msg << "[" << kOp << "] voxel size must be positive and finite and the origin finite, got "
          << voxel_size[a] << " and " << origin[a] << " on axis " << "xyz"[a];
      throw std::invalid_argument(msg.str());
    }
  }
}

void VoxelAccumulator::add(const PointRows& points, const void* feats) {
  const Bounds b = quantize_coords(points, voxel_size_, origin_, nullptr, q_, kOp);
  const int64_t m = points.n;
  if (reduce_ != VoxelReduce::kCount && !feats && m > 0) {
    throw std::invalid_argument("[voxelize] features are required unless the reduction is count");
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
  coords_.reserve(4 * n1);
  counts_.reserve(n1);
  if (reduce_ == VoxelReduce::kSum || reduce_ == VoxelReduce::kMean) sums_.reserve(n1 * channels_);
  if (reduce_ == VoxelReduce::kMax || reduce_ == VoxelReduce::kFirst) acc_.reserve(n1 * channels_);
  int32_t* coords = coords_.data();
  float* acc = acc_.data();
  const int64_t c = channels_;
  const bool init_max = reduce_ == VoxelReduce::kMax;
  parallel_chunks(m, chunks, [&](int64_t ci, int64_t b, int64_t e) {
    int64_t u = n0 + offset[ci];
    for (int64_t i = b; i < e; ++i) {
      if (!first_[i]) continue;
      for (int a = 0; a < 4; ++a) coords[4 * u + a] = q[4 * i + a];
      if (init_max) std::fill(acc + u * c, acc + (u + 1) * c, -std::numeric_limits<float>::infinity());
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
void VoxelAccumulator::accumulate(int64_t m, const void* feats) {
  const int64_t parts = num_threads();
  const int32_t* rows = rows_.data();
  const int64_t c = channels_;
  uint32_t* counts = counts_.data();
  std::atomic<bool> overflow{false};
  const double* fd = static_cast<const double*>(feats);
  const float* ff = static_cast<const float*>(feats);
  double* sums = sums_.data();
  float* acc = acc_.data();
  const VoxelReduce reduce = reduce_;
  const uint8_t* first = first_.data();
  parallel_chunks(parts, parts, [&](int64_t part, int64_t, int64_t) {
    for (int64_t i = 0; i < m; ++i) {
      const int64_t r = rows[i];
      if ((r >> 10) % parts != part) continue;
      if (++counts[r] == 0) overflow.store(true, std::memory_order_relaxed);
      switch (reduce) {
        case VoxelReduce::kSum:
        case VoxelReduce::kMean:
          for (int64_t k = 0; k < c; ++k) sums[r * c + k] += fd[i * c + k];
          break;
        case VoxelReduce::kMax:
          for (int64_t k = 0; k < c; ++k) {
            const float v = ff[i * c + k];
            float& a = acc[r * c + k];
            if (v > a || std::isnan(v)) a = v;  // a NaN stays: NaN propagates as in np.maximum
          }
          break;
        case VoxelReduce::kFirst:
          if (first[i]) std::copy(ff + i * c, ff + (i + 1) * c, acc + r * c);
          break;
        case VoxelReduce::kCount:
          break;
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
  r.n = n;
  r.channels = reduce_ == VoxelReduce::kCount ? 1 : channels_;
  const int64_t c = r.channels;
  counts_.grow(n);
  coords_.grow(4 * n);
  const uint32_t* counts = counts_.data();
  switch (reduce_) {
    case VoxelReduce::kMax:
    case VoxelReduce::kFirst:
      acc_.grow(n * c);
      r.feats = std::move(acc_);
      break;
    default: {
      r.feats.grow(n * c);
      float* out = r.feats.data();
      const double* sums = sums_.data();
      const VoxelReduce reduce = reduce_;
      parallel_for(n, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          for (int64_t k = 0; k < c; ++k) {
            if (reduce == VoxelReduce::kCount) out[i] = static_cast<float>(counts[i]);
            else if (reduce == VoxelReduce::kSum) out[i * c + k] = static_cast<float>(sums[i * c + k]);
            else out[i * c + k] = static_cast<float>(sums[i * c + k] / static_cast<double>(std::max<uint32_t>(counts[i], 1)));
          }
        }
      });
      sums_.reset();
    }
  }
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
