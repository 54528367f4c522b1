"""Point / voxel conversion on sparse tensors (documented ``mlx_lattice.ops.quantization``).

``voxelize``, ``voxelize_with_quantization`` (``voxelize`` in two steps: a precomputed
``SparseQuantization`` and its features, optionally onto a ``template`` tensor's
coordinate key) and ``devoxelize`` are lattice's own (``voxelize`` adds ``return_index=``
and ``device=``, ``devoxelize`` ``device=``). ``build_point_voxel_map`` and
``interpolate_point_features`` are :mod:`mlx_lattice.core.coords.quantization`'s.
"""

from __future__ import annotations

from lattice.ops import devoxelize, voxelize, voxelize_with_quantization
from mlx_lattice.core.coords.quantization import build_point_voxel_map, interpolate_point_features

__all__ = [
    "build_point_voxel_map",
    "devoxelize",
    "interpolate_point_features",
    "voxelize",
    "voxelize_with_quantization",
]
