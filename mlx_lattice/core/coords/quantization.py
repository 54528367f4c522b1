"""Point / voxel quantization (documented ``mlx_lattice.core.coords.quantization``).

``v = floor((p - origin) / voxel_size)``; a sparse row is ``(batch, v_x, v_y, v_z)``.
``SparseQuantization``, ``PointVoxelMap``, ``sparse_quantize`` and
``interpolate_point_features`` are lattice's own. ``voxelize_features`` and
``build_point_voxel_map`` are adapters to the documented signatures (lattice's
``build_point_voxel_map`` takes the voxels as a SparseTensor).

Linear sampling follows the documented corner convention: voxel ``v`` sits at the grid
point ``origin + v * voxel_size`` and a point mixes the 8 voxels at the corners of the
grid cell holding it. lattice samples between voxel centres (``v + 1/2``); the adapters
pass lattice an origin shifted by half a voxel (``corner_origin``), which is the same.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import mlx.core as mx

import lattice.core
from lattice.core import SparseQuantization, SparseTensor
from lattice.core._checks import float_triple
from lattice.ops import PointVoxelMap, interpolate_point_features
from lattice.ops import build_point_voxel_map as _build_point_voxel_map
from lattice.ops import voxelize_features as _voxelize_features

#: How point features reduce onto a voxel.
VoxelReduction: TypeAlias = Literal["sum", "mean"]
#: How voxel features are sampled at points.
PointVoxelInterpolation: TypeAlias = Literal["nearest", "linear"]


def documented_point_inputs(points, batch_indices, op: str) -> None:
    """The documented dtype contract of point inputs: floating points (0.6.3: float32; lattice
    also keeps float16 / float64) and, given as an MLX array, int32 batch indices. lattice
    itself casts integer points and takes any integer batch indices."""
    dtype = getattr(points, "dtype", None)
    if isinstance(points, mx.array) and not mx.issubdtype(dtype, mx.floating):
        raise ValueError(f"[{op}] points must be float32 (or another floating dtype), got {dtype}")
    if isinstance(batch_indices, mx.array) and batch_indices.dtype != mx.int32:
        raise ValueError(
            f"[{op}] batch_indices must have shape (N,) and int32 dtype, got {batch_indices.dtype}"
        )


def sparse_quantize(points, voxel_size=1.0, *, batch_indices=None, origin=0.0, active_rows=None):
    """Unique voxels ``floor((p - origin) / voxel_size)`` of ``points`` per batch member.

    ``lattice.core.sparse_quantize`` after the documented dtype checks (MLX ``points`` must
    be floating, MLX ``batch_indices`` int32). The result is lattice's
    ``SparseQuantization``: its live voxels only, in first-occurrence order.
    """
    documented_point_inputs(points, batch_indices, "sparse_quantize")
    return lattice.core.sparse_quantize(
        points, voxel_size, batch_indices=batch_indices, origin=origin, active_rows=active_rows
    )


def corner_origin(voxel_size, origin, interpolation, op: str):
    """The origin to give lattice so that its centre-based linear sampling is the documented
    corner-based one (``origin - voxel_size / 2``); ``origin`` itself for ``nearest``."""
    if interpolation != "linear":
        return origin
    vs = float_triple(voxel_size, "voxel_size", op, positive=True)
    org = float_triple(origin, "origin", op)
    return tuple(o - s / 2.0 for o, s in zip(org, vs, strict=True))


def voxelize_features(feats, quantization: SparseQuantization, *, active_rows=None, reduction="mean"):
    """Point features ``(N, C)`` reduced onto the voxels of ``quantization`` (``sum`` / ``mean``).

    Maps to ``lattice.ops.voxelize_features(feats, quantization, reduction,
    active_rows=active_rows)`` (where ``reduction`` is positional). ``active_rows``: only
    the first that many point rows are live; a voxel that gets none reads 0.
    """
    return _voxelize_features(feats, quantization, reduction, active_rows=active_rows)


def build_point_voxel_map(
    points,
    voxel_coords,
    voxel_active_rows,
    voxel_size=1.0,
    *,
    batch_indices=None,
    point_active_rows=None,
    origin=0.0,
    interpolation="linear",
) -> PointVoxelMap:
    """Voxel rows and weights that sample the voxels ``voxel_coords`` at ``points``.

    ``linear``: the 8 voxels at the corners of the grid cell holding each point
    (voxel ``v`` at ``origin + v * voxel_size``), trilinear weights (missing voxels weigh
    0, the rest renormalised); ``nearest``: the voxel holding the point (row -1 where
    there is none).

    Maps to ``lattice.ops.build_point_voxel_map(points, voxels, ...)`` with ``voxels`` a
    feature-less ``SparseTensor(voxel_coords, active_rows=voxel_active_rows)`` at stride 1.
    ``point_active_rows``: only the first that many points are mapped (the others: rows -1,
    weights 0).
    """
    coords = voxel_coords if isinstance(voxel_coords, mx.array) else mx.array(voxel_coords)
    voxels = SparseTensor(coords, mx.zeros((coords.shape[0], 0), mx.float32), active_rows=voxel_active_rows)
    return _build_point_voxel_map(
        points,
        voxels,
        voxel_size,
        batch_indices=batch_indices,
        origin=corner_origin(voxel_size, origin, interpolation, "build_point_voxel_map"),
        interpolation=interpolation,
        point_active_rows=point_active_rows,
    )


__all__ = [
    "PointVoxelInterpolation",
    "PointVoxelMap",
    "SparseQuantization",
    "VoxelReduction",
    "build_point_voxel_map",
    "interpolate_point_features",
    "sparse_quantize",
    "voxelize_features",
]
