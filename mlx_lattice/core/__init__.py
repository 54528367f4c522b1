"""Core data model of the documented API (``mlx_lattice.core``), served by ``lattice.core``.

Submodules: :mod:`~mlx_lattice.core.tensor`, :mod:`~mlx_lattice.core.coords`,
:mod:`~mlx_lattice.core.relations`, :mod:`~mlx_lattice.core.quantized`,
:mod:`~mlx_lattice.core.types`. Classes are lattice's own objects
(``mlx_lattice.core.SparseTensor is lattice.SparseTensor``). Documented names lattice
does not provide yet raise ``mlx_lattice._missing.NotProvidedError`` (see docs/compat.md).
"""

from __future__ import annotations

from mlx_lattice._missing import module_getattr
from mlx_lattice.core import coords, quantized, relations, tensor, types
from mlx_lattice.core.coords import (
    CoordinateManager,
    CoordinateMapKey,
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
    interpolate_point_features,
    occupancy_downsample,
    occupancy_expand,
)
from mlx_lattice.core.quantized import (
    QuantizedWeight,
    QuantizedWeightLayout,
    dequantize_weight,
    quantize_weight,
)
from mlx_lattice.core.relations import KernelRelation, KernelSpec, NeighborRelation
from mlx_lattice.core.tensor import SparseTensor, SparseTensorComponents
from mlx_lattice.core.types import Triple, triple

__all__ = [
    "CoordinateManager",
    "CoordinateMapKey",
    "CoordinateOrdering",
    "CoordinateSet",
    "KernelRelation",
    "KernelSpec",
    "NeighborRelation",
    "OccupancyExpansion",
    "PointVoxelMap",
    "QuantizedWeight",
    "QuantizedWeightLayout",
    "SparseAlignment",
    "SparseOccupancy",
    "SparseQuantization",
    "SparseTensor",
    "SparseTensorComponents",
    "Triple",
    "build_point_voxel_map",
    "build_sparse_alignment",
    "child_coords_from_indices",
    "coords",
    "dequantize_weight",
    "interpolate_point_features",
    "occupancy_downsample",
    "occupancy_expand",
    "quantize_weight",
    "quantized",
    "relations",
    "tensor",
    "triple",
    "types",
]

__getattr__ = module_getattr(__name__)
