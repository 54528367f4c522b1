// Relation (kernel map) builders of the CPU backend.
#pragma once

#include <array>
#include <optional>

#include "core/coord_table.h"

namespace lattice {

using Int3 = std::array<int32_t, 3>;

// Edges grouped by kernel offset: the edges of offset k are
// [offsets[k], offsets[k] + counts[k]) in in_rows / out_rows.
struct RelationArrays {
  mx::array in_rows = mx::zeros({0}, mx::int32);
  mx::array out_rows = mx::zeros({0}, mx::int32);
  mx::array counts = mx::zeros({0}, mx::int32);
  CoordTablePtr out_table;  // set when the builder generated the output support
};

mx::array kernel_offsets(const Int3& size, const Int3& dilation);

// The submanifold relation (odd sizes), by probing the set's table for half the offsets, or
// (merge) by sorting the rows once and merging each shifted column: the same arrays either way;
// the route (lattice/routing/relations.py) chooses.
RelationArrays relation_submanifold(const CoordTable& in, const Int3& size, const Int3& dilation, bool merge);

// Forward rule i = o * stride + k * dilation - padding onto an existing output set.
RelationArrays relation_forward(const CoordTable& in, const CoordTable& out, const Int3& size,
                                const Int3& stride, const Int3& padding, const Int3& dilation);

// Transposed rule t = s * stride + k * dilation - padding; generated support when
// `out` is null (deduplicated by first occurrence over (input row, offset)).
RelationArrays relation_transposed(const CoordTable& in, const CoordTable* out, const Int3& size,
                                   const Int3& stride, const Int3& padding, const Int3& dilation);

// Non-overlapping windows (kernel == stride, padding 0, dilation 1): each input row has
// exactly one output, its downsampled row `inverse[i]`, through offset (c mod stride).
RelationArrays relation_exclusive(const CoordTable& in, const int32_t* inverse, const Int3& stride);

}  // namespace lattice
