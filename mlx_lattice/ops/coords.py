"""Coordinate helpers for operation-style imports (documented ``mlx_lattice.ops.coords``).

A re-export of :mod:`mlx_lattice.core.coords` (the same objects), so that
``from mlx_lattice.ops import downsample_coords`` works.
"""

from __future__ import annotations

from mlx_lattice._missing import module_getattr
from mlx_lattice.core.coords import (
    CoordinateOrdering,
    CoordinateSet,
    OccupancyExpansion,
    PointVoxelMap,
    SparseAlignment,
    SparseOccupancy,
    SparseQuantization,
    build_point_voxel_map,
    build_sparse_alignment,
    child_coords_from_indices,
    contains_coords,
    downsample_coords,
    interpolate_point_features,
    intersection_coords,
    inverse_map,
    lookup_coords,
    morton_codes,
    morton_order,
    morton_sort_coords,
    occupancy_downsample,
    occupancy_expand,
    sparse_quantize,
    union_coords,
)

__all__ = [
    "CoordinateOrdering",
    "CoordinateSet",
    "OccupancyExpansion",
    "PointVoxelMap",
    "SparseAlignment",
    "SparseOccupancy",
    "SparseQuantization",
    "build_point_voxel_map",
    "build_sparse_alignment",
    "child_coords_from_indices",
    "contains_coords",
    "downsample_coords",
    "interpolate_point_features",
    "intersection_coords",
    "inverse_map",
    "lookup_coords",
    "morton_codes",
    "morton_order",
    "morton_sort_coords",
    "occupancy_downsample",
    "occupancy_expand",
    "sparse_quantize",
    "union_coords",
]

__getattr__ = module_getattr(__name__)
