// Coordinate functions of the CPU backend (declarations shared with the bindings).
#pragma once

#include <array>

#include "core/coord_table.h"

namespace lattice {

mx::array to_array(const std::vector<int32_t>& v);
mx::array lookup_rows(const CoordTable& t, const mx::array& queries);
// Window downsamples group their rows by cell when the cell volume fits a slot tag.
constexpr int64_t kMaxWindowVolume = 32;
// unique(floor(coords / stride)) in first-occurrence order, with every row's cell; when
// stride[0] * stride[1] * stride[2] <= kMaxWindowVolume also the rows grouped by cell
// (group_rows / group_out), ordered within a cell by the kernel offset
// (x % s0 * s1 + y % s1) * s2 + z % s2 -- the order of the forward relation of the
// kernel == stride windows.
UniqueResult downsample(const CoordTable& t, const std::array<int32_t, 3>& stride);
// Unique rows of a coordinate array (duplicates allowed), first-occurrence order, with
// the unique row of every input row and the rows per unique coordinate.
UniqueResult unique_coords(const mx::array& coords);
UniqueResult union_coords(const CoordTable& lhs, const CoordTable& rhs);
mx::array intersection_rows(const CoordTable& lhs, const CoordTable& rhs);
mx::array morton_codes(const mx::array& coords);
mx::array morton_order(const mx::array& coords);
// Borrowed, row-contiguous points (n, 3) in float32 or float64 (one of the two pointers).
struct PointRows {
  const float* f32 = nullptr;
  const double* f64 = nullptr;
  int64_t n = 0;
  double at(int64_t j) const { return f64 ? f64[j] : static_cast<double>(f32[j]); }
};

// Voxel coordinates (batch, floor((p - origin) / voxel_size)) of every point into q
// (4 n int32, resized); batch may be null (all 0). Returns their bounds. Non-finite
// points, indices beyond int32 and negative batch indices are errors naming the point.
Bounds quantize_coords(const PointRows& points, const std::array<double, 3>& voxel_size,
                       const std::array<double, 3>& origin, const int32_t* batch, std::vector<int32_t>& q,
                       const char* op);
UniqueResult quantize_points(const mx::array& points, const std::array<double, 3>& voxel_size,
                             const std::array<double, 3>& origin, const mx::array* batch);

}  // namespace lattice
