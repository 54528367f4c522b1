"""Voxels -> points: devoxelize (voxel features sampled at points), build_point_voxel_map (the
rows and weights it samples with, reusable) and interpolate_point_features (a map applied).

A voxel's sampling position is its centre: voxel ``i`` of a tensor at stride ``s`` covers
``[origin + i*s*voxel_size, origin + (i+1)*s*voxel_size)``. Routes
(``lattice.routing.points``): the native CPU core's corner lookup, or under the CUDA tier
lattice's kernels (``cuda/points.cu``). ``devoxelize`` and ``build_point_voxel_map`` are
declared once (``@explainable``) and return their plan; calling them runs it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import mlx.core as mx
import numpy as np

from lattice.core._checks import dtype_name, float_triple
from lattice.core.points import PointVoxelMap
from lattice.core.tensor import SparseTensor
from lattice.ops.features import rowwise_plan
from lattice.ops.points import _point_rows
from lattice.routing import Route, requested_device
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.points import PointsRequest, route_points
from lattice.routing.registry import dispatch_or_cpu


def _points_dtype(points) -> str:
    return dtype_name(points.dtype) if isinstance(points, mx.array) else np.asarray(points).dtype.name


@dataclass(frozen=True)
class DevoxelizePlan:
    """What devoxelize / build_point_voxel_map run: the corner-lookup route (and request), the
    checked geometry, and ``sample`` (the op's work on the map, on the route's stream)."""

    route: Route
    request: PointsRequest
    points: object
    voxels: SparseTensor
    geometry: tuple | None  # (voxel size x stride, origin, batch) — None with a given map
    linear: bool
    given: PointVoxelMap | None
    sample: object
    spare: int = 0  # point rows past point_active_rows: rows -1 / weights 0 / features 0

    def run(self):
        cpu = lambda: route_points(replace(self.request, device="cpu"))  # noqa: E731
        vs, org, batch = self.geometry or (None, None, None)
        args = (self.points, self.voxels, vs, org, batch, self.linear, self.given, self.sample)
        return _with_spare_rows(dispatch_or_cpu(self.route, cpu, *args)[1], self.spare)


def _with_spare_rows(out, spare: int):
    """``out`` (a PointVoxelMap or point features) followed by ``spare`` rows of no voxel."""
    if spare == 0:
        return out
    if isinstance(out, PointVoxelMap):
        width = out.rows.shape[1]
        rows = mx.concatenate([out.rows, mx.full((spare, width), -1, dtype=out.rows.dtype)])
        return PointVoxelMap(rows, mx.concatenate([out.weights, mx.zeros((spare, width), out.weights.dtype)]))
    return mx.concatenate([out, mx.zeros((spare, *out.shape[1:]), dtype=out.dtype)])


def _corner_plan(
    points,
    voxels,
    voxel_size,
    batch_indices,
    origin,
    interpolation,
    device,
    given,
    sample,
    op="devoxelize",
    point_rows=None,
):
    spare = 0
    if point_rows is not None and given is None:  # only the first point_rows points are sampled
        total = int(np.shape(points)[0]) if np.ndim(points) else 0
        n = _point_rows(point_rows, points, op)
        points, spare = points[:n], total - n
        if batch_indices is not None and np.ndim(batch_indices) and np.shape(batch_indices)[0] == total:
            batch_indices = (
                batch_indices[:n] if isinstance(batch_indices, mx.array) else np.asarray(batch_indices)[:n]
            )
    if not isinstance(voxels, SparseTensor):
        raise TypeError(f"[{op}] voxels must be a SparseTensor, got {type(voxels).__name__}")
    if interpolation not in ("linear", "nearest"):
        raise ValueError(f"[{op}] interpolation must be 'linear' or 'nearest', got {interpolation!r}")
    req = PointsRequest(
        op,
        int(np.shape(points)[0]),
        voxels.channels,
        interpolation=interpolation,
        device=requested_device(device),
        points_dtype=_points_dtype(points),
        dtype=dtype_name(voxels.dtype),
    )
    route = route_points(req)
    geometry = None if given is not None else _geometry(points, voxels, voxel_size, batch_indices, origin, op)
    return DevoxelizePlan(
        route, req, points, voxels, geometry, interpolation == "linear", given, sample, spare
    )


def _geometry(points, voxels, voxel_size, batch_indices, origin, op):
    """(voxel size times the tensor stride, origin, batch indices or None), checked."""
    shape = tuple(np.shape(points))
    if len(shape) != 2 or shape[1] != 3:
        raise ValueError(f"[{op}] points must have shape (N, 3), got {shape}")
    vs = tuple(
        v * s
        for v, s in zip(float_triple(voxel_size, "voxel_size", op, positive=True), voxels.stride, strict=True)
    )
    org = float_triple(origin, "origin", op)
    n = shape[0]
    batch = None
    if batch_indices is not None:
        batch = (
            batch_indices.reshape(-1)
            if isinstance(batch_indices, mx.array)
            else np.asarray(batch_indices, np.int64).reshape(-1)
        )
        if tuple(batch.shape) != (n,):
            raise ValueError(f"[{op}] batch_indices must have shape ({n},), got {tuple(batch.shape)}")
    return vs, org, batch


def _devoxelize_example(x, req):
    """``lattice explain devoxelize``: ``x`` sampled at the centres of its voxels (lazy arrays)."""
    coords = x.coords[: x.active_count]
    points = coords[:, 1:].astype(mx.float32) + 0.5
    return (points, x), {"batch_indices": coords[:, 0], "device": req.device}


@explainable(example=_devoxelize_example, returns=PointVoxelMap)
def build_point_voxel_map(
    points,
    voxels,
    voxel_size=1.0,
    *,
    batch_indices=None,
    origin=0.0,
    interpolation="linear",
    device=None,
    point_active_rows=None,
) -> DevoxelizePlan:
    """Voxel rows and weights that sample ``voxels`` (a SparseTensor) at ``points``, as
    ``devoxelize`` does (same arguments and route). ``point_active_rows``: only the first
    that many points are sampled; the rows of the others are -1 with weight 0.

    ``linear``: the 8 voxels whose centres surround the point, trilinear weights, missing
    voxels weight 0, the rest renormalised to sum 1 (a point with no voxel around gets
    all-zero weights). ``nearest``: the voxel containing the point, weight 1 (or -1 / 0).
    """
    return _corner_plan(
        points,
        voxels,
        voxel_size,
        batch_indices,
        origin,
        interpolation,
        device,
        None,
        _the_map,
        op="build_point_voxel_map",
        point_rows=point_active_rows,
    )


def _the_map(pvm: PointVoxelMap) -> PointVoxelMap:
    return pvm


def _interpolate_example(x, req):
    (points, voxels), kwargs = _devoxelize_example(x, req)
    return (voxels.feats[: voxels.active_count], build_point_voxel_map(points, voxels, **kwargs)), {}


@explainable(example=_interpolate_example, returns=mx.array)
def interpolate_point_features(voxel_feats: mx.array, point_voxel_map: PointVoxelMap) -> CallPlan:
    """``sum_j weights[:, j] * voxel_feats[rows[:, j]]`` (N, C); differentiable in the features.
    No voxels (or no points) give zeros. MLX's gather on the call's device (the row-wise route)."""
    if not isinstance(voxel_feats, mx.array):
        raise TypeError(
            f"[interpolate_point_features] voxel_feats must be an mx.array, got {type(voxel_feats).__name__}"
        )
    return rowwise_plan(voxel_feats, "interpolate_point_features", lambda f: _interpolate(f, point_voxel_map))


def _interpolate(voxel_feats: mx.array, point_voxel_map: PointVoxelMap) -> mx.array:
    """What ``interpolate_point_features`` computes (devoxelize runs it on its own route's stream)."""
    rows = mx.maximum(point_voxel_map.rows, 0)
    c = voxel_feats.shape[-1]
    if rows.size == 0 or voxel_feats.shape[0] == 0:
        return mx.zeros((rows.shape[0], c), dtype=voxel_feats.dtype)
    gathered = voxel_feats[rows.reshape(-1)].reshape(*rows.shape, c)
    w = point_voxel_map.weights.astype(mx.float32)[..., None]
    return mx.sum(gathered.astype(mx.float32) * w, axis=1).astype(voxel_feats.dtype)


@explainable(example=_devoxelize_example)
def devoxelize(
    points,
    voxels: SparseTensor,
    voxel_size=1.0,
    *,
    batch_indices=None,
    origin=0.0,
    interpolation="linear",
    point_voxel_map=None,
    device=None,
    point_active_rows=None,
) -> DevoxelizePlan:
    """Sample voxel features at points (trilinear over the 8 surrounding voxel centres, or nearest).

    ``point_active_rows``: only the first that many points are sampled, the others read 0
    (ignored with a given ``point_voxel_map``, whose rows say it already).
    """

    def sample(pvm: PointVoxelMap) -> mx.array:
        return _interpolate(voxels.feats[: voxels.active_count], pvm)

    return _corner_plan(
        points,
        voxels,
        voxel_size,
        batch_indices,
        origin,
        interpolation,
        device,
        point_voxel_map,
        sample,
        point_rows=point_active_rows,
    )
