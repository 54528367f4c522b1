"""CPU routes of coordinate sets and of points <-> voxels: the native hash tables,
Morton order and quantizer (``csrc/backend/cpu/coords.cpp``), registered under the
routes of ``lattice.routing.coords`` and ``lattice.routing.points``."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from lattice import _ext
from lattice.core.points import PointVoxelMap, QuantizeInputs, native_quantize
from lattice.routing import coords as set_routes
from lattice.routing import points as point_routes
from lattice.routing.registry import implements


@implements(set_routes.HASH_SET)
def hash_set(coords: mx.array, op: str):
    """The native table of a set of unique rows (rejects duplicates and negative batches)."""
    return _ext.build_table(coords, op)


@implements(set_routes.ON_DEMAND)
def coarse_on_demand(manager, key, stride, levels: int) -> None:
    """Nothing ahead: each downsample is built by the relation that first needs it, the same
    work then as now, and on the CPU no read to spare."""


@implements(set_routes.MORTON)
def morton_rows(coords: mx.array, op: str) -> mx.array:
    """The Morton functions read the rows themselves (no table)."""
    return coords


@implements(point_routes.HASH_QUANTIZE_SEGMENT_REDUCE)
def hash_quantize_segment_reduce(inputs: QuantizeInputs, reduce):
    """The native quantizer's voxels, then the op's reduction on the default stream (narrow
    sums through NumPy: ``host_sums``)."""
    q = native_quantize(inputs)
    return q, reduce(q, True)


@implements(point_routes.HASH_CORNER_LOOKUP)
def hash_corner_lookup(points, voxels, voxel_size, origin, batch, linear: bool, given, sample):
    """Each point's voxel corners looked up in the voxels' native table (or ``given``), then
    ``sample`` on the default stream."""
    if given is None:
        table = voxels.coord_manager.table(voxels.coord_key)
        given = host_point_voxel_map(points, table, voxel_size, origin, batch, linear, "devoxelize")
    return sample(given)


def host_point_voxel_map(points, table, vs, org, batch, linear: bool, op: str) -> PointVoxelMap:
    """Indices and weights in NumPy (float64), rows from the native table."""
    if isinstance(points, mx.array) and points.dtype == mx.bfloat16:
        points = points.astype(mx.float32)  # exact; NumPy has no bfloat16
    pts = np.asarray(points, dtype=np.float64)
    if not np.all(np.isfinite(pts)):
        raise ValueError(f"[{op}] points must be finite")
    n = len(pts)
    batch = np.zeros(n, np.int64) if batch is None else np.asarray(batch, np.int64)
    u = (pts - np.asarray(org)) / np.asarray(vs)
    if not linear:
        cell = np.floor(u)
        i32 = np.iinfo(np.int32)
        inside = np.all((cell >= i32.min) & (cell <= i32.max), axis=1)  # else in no voxel
        cell = np.where(inside[:, None], cell, 0.0)
        q = np.concatenate([batch[:, None], cell], axis=1).astype(np.int32)
        rows = np.where(inside, np.asarray(_ext.lookup(table, mx.array(q))), -1)[:, None]
        return PointVoxelMap(mx.array(rows), mx.array((rows >= 0).astype(np.float32)))
    base = np.floor(u - 0.5)
    frac = (u - 0.5 - base).astype(np.float32)
    corners = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)], np.int64)
    cells = base[:, None, :].astype(np.int64) + corners[None]  # (N, 8, 3)
    q = np.concatenate([np.repeat(batch[:, None, None], 8, axis=1), cells], axis=2).reshape(-1, 4)
    if q.size and (q[:, 1:].min() < np.iinfo(np.int32).min or q[:, 1:].max() > np.iinfo(np.int32).max):
        raise ValueError(f"[{op}] voxel indices of the points overflow int32")
    rows = np.asarray(_ext.lookup(table, mx.array(q.astype(np.int32)))).reshape(n, 8)
    w = np.prod(np.where(corners[None] == 1, frac[:, None, :], 1.0 - frac[:, None, :]), axis=2)
    w = np.where(rows >= 0, w, 0.0).astype(np.float32)
    total = w.sum(axis=1, keepdims=True)
    w = np.divide(w, total, out=np.zeros_like(w), where=total > 0)
    return PointVoxelMap(mx.array(rows), mx.array(w))
