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
    PointVoxelMap,
    SparseQuantization,
    build_point_voxel_map,
    interpolate_point_features,
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
    "coords",
    "quantized",
    "relations",
    "tensor",
    "types",
    "CoordinateManager",
    "CoordinateMapKey",
    "CoordinateOrdering",
    "CoordinateSet",
    "KernelRelation",
    "KernelSpec",
    "NeighborRelation",
    "PointVoxelMap",
    "QuantizedWeight",
    "QuantizedWeightLayout",
    "SparseQuantization",
    "SparseTensor",
    "SparseTensorComponents",
    "Triple",
    "build_point_voxel_map",
    "dequantize_weight",
    "interpolate_point_features",
    "quantize_weight",
    "triple",
]

__getattr__ = module_getattr(__name__)
