// Voxels of a point cloud that arrives in chunks (the streaming voxelizer's state).
//
// Each chunk is quantised (quantize_coords), its voxels are found or inserted in one
// RowTable that persists across chunks (new voxels numbered by first occurrence in
// point order, as in sparse_quantize on the whole cloud), and every point is reduced in
// place onto its voxel, each feature column by its own reduction: sums (sum, mean) add in
// float64 in point order (so the result does not depend on the chunk size); max and min
// keep a running extreme (NaN propagates); first keeps the value of the point that
// created the voxel; count counts the points whose value is not NaN. Point counts add (a
// voxel of more than 2^32 - 1 points is an error). Per-voxel arrays are PageArrays that
// grow in place; memory is the voxels plus one chunk. The voxel row of every point of the
// last chunk stays readable (last_rows) until the next add, for reductions made outside
// (the mode of categorical attributes).
#pragma once

#include <array>
#include <string>
#include <vector>

#include "backend/cpu/coords.h"
#include "core/pack.h"
#include "core/page_array.h"
#include "core/row_table.h"

namespace lattice {

// Sums of the rows of feats (N, C; float32, float16 or bfloat16) per voxel row inverse[i]
// (N, in [0, m)), accumulated in float64 and returned as float32 (m, C): voxelize's sum
// and mean on the CPU route. Each thread sums its run of points into a buffer of its own
// (the buffers are then added in thread order) when the m x C buffers are small next to
// the points; else one thread sums in point order. With `counts` (m,) the sums are divided
// by max(count, 1) in float64 before the cast: voxelize's mean in the same pass.
mx::array segment_sum(const mx::array& feats, const mx::array& inverse, int64_t m,
                      const mx::array* counts = nullptr);

enum class VoxelReduce : uint8_t { kCount, kSum, kMean, kMax, kMin, kFirst };

VoxelReduce parse_voxel_reduce(const std::string& name);

struct VoxelResult {
  PageArray<int32_t> coords;  // (n, 4) (batch, x, y, z), batch 0
  PageArray<double> feats;    // (n, channels)
  PageArray<int64_t> counts;  // (n,) points per voxel
  int64_t n = 0;
  int64_t channels = 0;
};

class VoxelAccumulator {
 public:
  // One reduction per feature column; no columns: only the voxels and their point counts.
  VoxelAccumulator(const std::array<double, 3>& voxel_size, const std::array<double, 3>& origin,
                   std::vector<VoxelReduce> reduces);

  // Adds points and their features (n, C) float64 row-contiguous (ignored when C is 0;
  // the caller checks shapes). Borrowed, not copied. The chunk is checked (finite,
  // indices within int32, the total span packable into a 64-bit key as every CoordTable
  // needs, rows within int32) before anything changes.
  void add(const PointRows& points, const double* feats);

  int64_t channels() const { return static_cast<int64_t>(reduces_.size()); }
  int64_t size() const { return n_; }
  uint64_t table_capacity() const { return table_.capacity(); }
  // The voxel row of every point of the last chunk added (empty before the first).
  const std::vector<int32_t>& last_rows() const { return rows_; }

  // The voxels in first-occurrence order with their float64 features and counts; frees
  // the table first and leaves the accumulator empty.
  VoxelResult finish();

 private:
  int64_t insert_chunk(int64_t m);
  void accumulate(int64_t m, const double* feats);

  std::array<double, 3> voxel_size_, origin_;
  std::vector<VoxelReduce> reduces_;
  int64_t n_ = 0;
  Bounds bounds_;
  RowTable table_;
  PageArray<int32_t> coords_;
  PageArray<uint32_t> counts_;  // int64 only in finish(): 4 bytes less per voxel while streaming
  PageArray<double> acc_;       // (n, C): sums, counts, extremes or first values per column
  // per-chunk scratch, kept between chunks
  std::vector<int32_t> q_;
  std::vector<uint64_t> pos_;
  std::vector<int32_t> rows_;
  std::vector<uint8_t> first_;
};

}  // namespace lattice
