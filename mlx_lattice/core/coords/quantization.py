"""Point / voxel quantization (documented ``mlx_lattice.core.coords.quantization``).

``v = floor((p - origin) / voxel_size)``; a sparse row is ``(batch, v_x, v_y, v_z)``.
``PointVoxelMap`` and ``interpolate_point_features`` are lattice's own.
``sparse_quantize`` returns the documented fixed-capacity :class:`SparseQuantization` (a
subclass of lattice's): buffers of one row per input point, the unique voxels first.
``voxelize_features`` and ``build_point_voxel_map`` are adapters to the documented
signatures (lattice's ``build_point_voxel_map`` takes the voxels as a SparseTensor).

Linear sampling follows the documented corner convention: voxel ``v`` sits at the grid
point ``origin + v * voxel_size`` and a point mixes the 8 voxels at the corners of the
grid cell holding it. lattice samples between voxel centres (``v + 1/2``); the adapters
pass lattice an origin shifted by half a voxel (``corner_origin``), which is the same.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import mlx.core as mx
import numpy as np

import lattice.core
from lattice.core import SparseTensor
from lattice.core._checks import float_triple, validate_coords
from lattice.core.buffers import checked_count
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


class SparseQuantization(lattice.core.SparseQuantization):
    """The documented fixed-capacity form of a quantization: buffers of ``capacity`` rows,
    one per input point (including points past a given ``active_rows``).

    ``coords`` (capacity, 4) int32: the unique voxels in first-occurrence order, then rows
    of 0; ``active_rows`` the int32 ``(1,)`` voxel count and ``active_count`` that array
    itself (``len(q)`` is the int); ``inverse_rows`` (capacity,) int32: the voxel row of each
    point, -1 for points past the live ones; ``counts`` (capacity,) int32: points per voxel,
    0 past the voxels. ``exact`` is lattice's own ``SparseQuantization`` of the live rows
    (what lattice's functions take); the adapters of this module and
    ``mlx_lattice.ops.quantization`` accept either form.
    """

    def __post_init__(self) -> None:
        super().__post_init__()
        op = "SparseQuantization"
        validate_coords(self.coords)
        n = self.capacity
        if self.coords.dtype != mx.int32:
            raise ValueError(f"[{op}] quantized coords must be int32, got {self.coords.dtype}")
        for name in ("inverse_rows", "counts"):
            a = getattr(self, name)
            if not isinstance(a, mx.array) or a.shape != (n,) or a.dtype != mx.int32:
                got = f"{a.dtype} {tuple(a.shape)}" if isinstance(a, mx.array) else type(a).__name__
                raise ValueError(f"[{op}] {name} must have shape ({n},) and int32 dtype, got {got}")

    @property
    def active_count(self) -> mx.array:
        """The live voxel count: ``active_rows`` itself (``len(q)`` is the int)."""
        return self.active_rows

    @property
    def exact(self) -> lattice.core.SparseQuantization:
        """lattice's ``SparseQuantization`` of the live rows: the voxels, the voxel row of each
        live point, the points per voxel (made once; for a record built by hand, the live
        points are those with ``inverse_rows >= 0``, read once)."""
        hit = self.__dict__.get("_exact")
        if hit is None:
            m = len(self)
            live = int(mx.sum(self.inverse_rows >= 0).item()) if self.capacity else 0
            hit = lattice.core.SparseQuantization(
                self.coords[:m], m, self.inverse_rows[:live], self.counts[:m], self.table
            )
            object.__setattr__(self, "_exact", hit)
        return hit


def documented_quantization(q: lattice.core.SparseQuantization, capacity: int) -> SparseQuantization:
    """lattice's exact ``q`` (of ``capacity`` input points) as the documented buffer form:
    coords and counts padded with 0 to ``capacity`` rows, inverse rows with -1 (O(capacity))."""
    m, k = len(q), int(q.inverse_rows.shape[0])
    coords, inverse, counts = q.coords, q.inverse_rows.astype(mx.int32), q.counts.astype(mx.int32)
    if capacity > m:
        coords = mx.concatenate([coords, mx.zeros((capacity - m, 4), mx.int32)], axis=0)
        counts = mx.concatenate([counts, mx.zeros((capacity - m,), mx.int32)])
    if capacity > k:
        inverse = mx.concatenate([inverse, mx.full((capacity - k,), -1, mx.int32)])
    out = SparseQuantization(coords, m, inverse, counts, q.table)
    object.__setattr__(out, "_exact", q)
    return out


def exact_quantization(quantization) -> lattice.core.SparseQuantization:
    """lattice's exact form of either form (the documented buffer form's ``exact``)."""
    return quantization.exact if isinstance(quantization, SparseQuantization) else quantization


def sparse_quantize(points, voxel_size=1.0, *, batch_indices=None, origin=0.0, active_rows=None):
    """Unique voxels ``floor((p - origin) / voxel_size)`` of ``points`` per batch member, as
    the documented fixed-capacity :class:`SparseQuantization` (one buffer row per point).

    ``lattice.core.sparse_quantize`` after the documented dtype checks (MLX ``points`` must
    be floating, MLX ``batch_indices`` int32), its exact result padded to the point count
    (``documented_quantization``). ``active_rows``: only the first that many points are
    quantized; the others get inverse row -1.
    """
    documented_point_inputs(points, batch_indices, "sparse_quantize")
    q = lattice.core.sparse_quantize(
        points, voxel_size, batch_indices=batch_indices, origin=origin, active_rows=active_rows
    )
    return documented_quantization(q, int(np.shape(points)[0]))


def corner_origin(voxel_size, origin, interpolation, op: str):
    """The origin to give lattice so that its centre-based linear sampling is the documented
    corner-based one (``origin - voxel_size / 2``); ``origin`` itself for ``nearest``."""
    if interpolation != "linear":
        return origin
    vs = float_triple(voxel_size, "voxel_size", op, positive=True)
    org = float_triple(origin, "origin", op)
    return tuple(o - s / 2.0 for o, s in zip(org, vs, strict=True))


def voxelize_features(feats, quantization, *, active_rows=None, reduction="mean"):
    """Point features ``(N, C)`` reduced onto the voxels of ``quantization`` (``sum`` / ``mean``).

    For the documented :class:`SparseQuantization` (what ``sparse_quantize`` returns),
    ``feats`` has one row per buffer row (``capacity``) and the result is the documented
    ``(capacity, C)`` buffer: the voxel features, then rows of 0. For lattice's own
    ``SparseQuantization`` it is ``lattice.ops.voxelize_features(feats, quantization,
    reduction, active_rows=active_rows)`` (``reduction`` positional there): ``(M, C)``.
    ``active_rows``: only the first that many point rows are live; a voxel that gets none
    reads 0.
    """
    if not isinstance(quantization, SparseQuantization):
        return _voxelize_features(feats, quantization, reduction, active_rows=active_rows)
    op = "voxelize_features"
    if not isinstance(reduction, str) or reduction not in ("sum", "mean"):
        raise ValueError(f"[{op}] reduction must be 'sum' or 'mean', got {reduction!r}")
    n = quantization.capacity
    if not isinstance(feats, mx.array) or feats.ndim != 2:
        raise ValueError(f"[{op}] feats must be an mx.array of shape (N, C), got {feats!r:.60}")
    if feats.shape[0] != n:
        raise ValueError(
            f"[{op}] feats and quantization metadata must share rows: feats has {feats.shape[0]}, "
            f"the quantization {n}"
        )
    exact = quantization.exact
    live = int(exact.inverse_rows.shape[0])
    if active_rows is not None:
        live = min(live, checked_count(active_rows, n, op))
    out = _voxelize_features(feats, exact, reduction, active_rows=live)
    m = len(exact)
    if n > m:
        out = mx.concatenate([out, mx.zeros((n - m, out.shape[1]), out.dtype)], axis=0)
    return out


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
