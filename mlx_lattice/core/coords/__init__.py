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
from mlx_lattice.core.coords.builders import kernel_offsets
from mlx_lattice.core.coords.manager import CoordinateManager, CoordinateMapKey
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
    "alignment",
    "builders",
    "manager",
    "occupancy",
    "ordering",
    "quantization",
    "set_ops",
    "validation",
    "CoordinateManager",
    "CoordinateMapKey",
    "CoordinateOrdering",
    "CoordinateSet",
    "PointVoxelMap",
    "SparseQuantization",
    "build_point_voxel_map",
    "contains_coords",
    "downsample_coords",
    "interpolate_point_features",
    "intersection_coords",
    "inverse_map",
    "kernel_offsets",
    "lookup_coords",
    "morton_codes",
    "morton_order",
    "morton_sort_coords",
    "sparse_quantize",
    "union_coords",
    "validate_coords",
]

__getattr__ = module_getattr(__name__)
