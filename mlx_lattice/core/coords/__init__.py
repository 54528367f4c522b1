"""Coordinate utilities (documented ``mlx_lattice.core.coords``).

Submodules: :mod:`~mlx_lattice.core.coords.builders`, ``manager``, ``set_ops``,
``ordering``, ``occupancy``, ``alignment``, ``quantization``, ``validation``. The names
documented here are re-exported from them; those lattice does not provide yet raise
``mlx_lattice._missing.NotProvidedError`` (see docs/compat.md).
"""

from __future__ import annotations

from mlx_lattice._missing import module_getattr
from mlx_lattice.core.coords import (
    alignment,
    builders,
    manager,
    occupancy,
    ordering,
    quantization,
    set_ops,
    validation,
)
from mlx_lattice.core.coords.alignment import SparseAlignment, build_sparse_alignment
from mlx_lattice.core.coords.builders import (
    build_generative_relation,
    build_kernel_relation,
    build_knn_relation,
    build_radius_relation,
    build_submanifold_kernel_relation,
    build_target_kernel_relation,
    build_target_transposed_implicit_gemm_view,
    build_transposed_kernel_relation,
    kernel_offsets,
)
from mlx_lattice.core.coords.manager import CoordinateManager, CoordinateMapKey
from mlx_lattice.core.coords.occupancy import (
    OccupancyExpansion,
    SparseOccupancy,
    child_coords_from_indices,
    occupancy_downsample,
    occupancy_expand,
)
from mlx_lattice.core.coords.ordering import (
    CoordinateOrdering,
    morton_codes,
    morton_order,
    morton_sort_coords,
)
from mlx_lattice.core.coords.quantization import (
    PointVoxelMap,
    SparseQuantization,
    build_point_voxel_map,
    interpolate_point_features,
    sparse_quantize,
)
from mlx_lattice.core.coords.set_ops import (
    CoordinateSet,
    contains_coords,
    downsample_coords,
    intersection_coords,
    inverse_map,
    lookup_coords,
    union_coords,
)
from mlx_lattice.core.coords.validation import validate_coords

__all__ = [
    "CoordinateManager",
    "CoordinateMapKey",
    "CoordinateOrdering",
    "CoordinateSet",
    "OccupancyExpansion",
    "PointVoxelMap",
    "SparseAlignment",
    "SparseOccupancy",
    "SparseQuantization",
    "alignment",
    "build_generative_relation",
    "build_kernel_relation",
    "build_knn_relation",
    "build_point_voxel_map",
    "build_radius_relation",
    "build_sparse_alignment",
    "build_submanifold_kernel_relation",
    "build_target_kernel_relation",
    "build_target_transposed_implicit_gemm_view",
    "build_transposed_kernel_relation",
    "builders",
    "child_coords_from_indices",
    "contains_coords",
    "downsample_coords",
    "interpolate_point_features",
    "intersection_coords",
    "inverse_map",
    "kernel_offsets",
    "lookup_coords",
    "manager",
    "morton_codes",
    "morton_order",
    "morton_sort_coords",
    "occupancy",
    "occupancy_downsample",
    "occupancy_expand",
    "ordering",
    "quantization",
    "set_ops",
    "sparse_quantize",
    "union_coords",
    "validate_coords",
    "validation",
]

__getattr__ = module_getattr(__name__)
