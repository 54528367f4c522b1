// Voxels of a point cloud that arrives in chunks (the streaming voxelizer's state).
//
// Each chunk is quantised (quantize_coords), its voxels are found or inserted in one
// RowTable that persists across chunks (new voxels numbered by first occurrence in
// point order, as in sparse_quantize on the whole cloud), and every point is reduced in
// place onto its voxel: counts add (a voxel of more than 2^32 - 1 points is an error); sums add in float64 in point order (so the result
// does not depend on the chunk size); max keeps a running maximum (NaN propagates);
// first keeps the value of the point that created the voxel. Per-voxel arrays are
// PageArrays that grow in place; memory is the voxels plus one chunk.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "backend/cpu/coords.h"
#include "core/pack.h"
#include "core/page_array.h"
#include "core/row_table.h"

namespace lattice {

enum class VoxelReduce { kCount, kSum, kMean, kMax, kFirst };

VoxelReduce parse_voxel_reduce(const std::string& name);

struct VoxelResult {
  PageArray<int32_t> coords;  // (n, 4) (batch, x, y, z), batch 0
  PageArray<float> feats;     // (n, channels); count: (n, 1) point counts
  PageArray<int64_t> counts;  // (n,) points per voxel
  int64_t n = 0;
  int64_t channels = 0;
};

class VoxelAccumulator {
 public:
  VoxelAccumulator(const std::array<double, 3>& voxel_size, const std::array<double, 3>& origin,
                   VoxelReduce reduce, int64_t channels);

  // Adds points and, unless the reduction is count, their features (n, C) row-contiguous:
  // double for sum and mean, float for max and first (wide_feats() says which; the
  // caller checks shapes). Borrowed, not copied. The chunk is checked (finite, indices
  // within int32, the total span packable into a 64-bit key as every CoordTable needs,
  // rows within int32) before anything changes.
  void add(const PointRows& points, const void* feats);

  // The feature type add() reads: float64 for sum and mean, float32 for max and first.
  bool wide_feats() const { return reduce_ == VoxelReduce::kSum || reduce_ == VoxelReduce::kMean; }
  int64_t channels() const { return channels_; }

  int64_t size() const { return n_; }
  uint64_t table_capacity() const { return table_.capacity(); }

  // The voxels in first-occurrence order with their float32 features and counts; frees
  // the table first and leaves the accumulator empty.
  VoxelResult finish();

 private:
  int64_t insert_chunk(int64_t m);
  void accumulate(int64_t m, const void* feats);

  std::array<double, 3> voxel_size_, origin_;
  VoxelReduce reduce_;
  int64_t channels_;
  int64_t n_ = 0;
  Bounds bounds_;
  RowTable table_;
  PageArray<int32_t> coords_;
  PageArray<uint32_t> counts_;  // int64 only in finish(): 4 bytes less per voxel while streaming
  PageArray<double> sums_;  // sum, mean
  PageArray<float> acc_;    // max, first
  // per-chunk scratch, kept between chunks
  std::vector<int32_t> q_;
  std::vector<uint64_t> pos_;
  std::vector<int32_t> rows_;
  std::vector<uint8_t> first_;
};

}  // namespace lattice
