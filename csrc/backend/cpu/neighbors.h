// Point neighbourhood relations (k nearest, radius) of the CPU backend.
#pragma once

#include <optional>

#include "core/coord_table.h"

namespace lattice {

// CSR by query row: the neighbours of query q are [offsets[q], offsets[q+1]),
// sorted by distance, ties by source row.
struct NeighborArrays {
  mx::array offsets;
  mx::array source_rows;
  mx::array distances;
};

NeighborArrays radius_neighbors(const mx::array& source, const mx::array& source_batch,
                                const mx::array& query, const mx::array& query_batch, double radius,
                                int64_t max_neighbors);

NeighborArrays knn_neighbors(const mx::array& source, const mx::array& source_batch,
                             const mx::array& query, const mx::array& query_batch, int64_t k);

}  // namespace lattice
