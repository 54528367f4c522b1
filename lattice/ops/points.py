"""Points <-> voxels: voxelize (with the point->voxel index), devoxelize, point-voxel maps.

Voxel index of a point: ``floor((p - origin) / voxel_size)`` (computed in float64 for
float64 points). Voxel ``i`` of a tensor at stride ``s`` covers
``[origin + i*s*voxel_size, origin + (i+1)*s*voxel_size)``; its centre is the
sampling position for devoxelize.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from lattice import _ext
from lattice.core._checks import float_triple, int_triple
from lattice.core.coordinates import CoordinateManager
from lattice.core.points import SparseQuantization, sparse_quantize
from lattice.core.tensor import SparseTensor
from lattice.routing import requested_device
from lattice.routing.points import REDUCTIONS, PointsRequest, route_points


@dataclass(frozen=True)
class PointVoxelMap:
    """For each point, up to 8 voxel rows (-1 where absent) and normalised weights (N, 8)."""

    rows: mx.array
    weights: mx.array


# Up to this many channels, per-voxel sums go through NumPy's bincount (one pass per channel):
# MLX's CPU scatter-add costs ~25 ns per index row whatever the width, bincount ~3 ns per
# element, so bincount wins by 2-10x for narrow features and loses from ~16 channels on.
_HOST_SUM_MAX_CHANNELS = 8


def _host_segment_sum(feats: mx.array, inverse: mx.array, m: int) -> mx.array:
    """float32 ``(m, C)`` sums of ``feats`` rows per ``inverse`` row, summed in float64 by NumPy.

    Differentiable (the VJP is the gather ``cotangent[inverse]``), but it evaluates its
    inputs, so it is used only by ``voxelize`` (which evaluates anyway in the native
    quantizer), never under ``mx.compile`` / ``mx.vmap``.
    """

    @mx.custom_function
    def segment_sum(x, inv):
        xs = np.asarray(x)
        iv = np.asarray(inv)
        out = np.empty((m, xs.shape[1]), np.float32)
        for k in range(xs.shape[1]):
            out[:, k] = np.bincount(iv, weights=xs[:, k], minlength=m)
        return mx.array(out)

    @segment_sum.vjp
    def segment_sum_vjp(primals, cotangent, output):
        x, inv = primals
        return cotangent[inv].astype(x.dtype), mx.zeros_like(inv)

    return segment_sum(feats, inverse)


def voxelize_features(feats: mx.array, quantization: SparseQuantization, reduction: str = "mean") -> mx.array:
    """Reduce point features onto the voxels of ``quantization`` (differentiable for mean/sum/max/first)."""
    return _voxelize_features(feats, quantization, reduction, host_sums=False)


def _voxelize_features(feats, quantization: SparseQuantization, reduction: str, *, host_sums: bool):
    op = "voxelize_features"
    if reduction not in REDUCTIONS:
        raise ValueError(f"[{op}] reduction must be one of {REDUCTIONS}, got {reduction!r}")
    m = quantization.active_rows
    inv = quantization.inverse_rows
    counts = quantization.counts
    if reduction == "count":
        return counts.astype(mx.float32)[:, None]
    if feats.ndim != 2 or feats.shape[0] != inv.shape[0]:
        raise ValueError(f"[{op}] feats must have shape ({inv.shape[0]}, C), got {tuple(feats.shape)}")
    n, c = feats.shape
    if n == 0:
        return mx.zeros((0, c), dtype=feats.dtype)
    if reduction in ("sum", "mean"):
        # accumulate in float32 (float64 stays float64); the mean of integers is float32
        acc_dtype = mx.float64 if feats.dtype == mx.float64 else mx.float32
        if host_sums and c <= _HOST_SUM_MAX_CHANNELS and feats.dtype in (mx.float32, mx.float16):
            acc = _host_segment_sum(feats, inv, m)
        else:
            acc = mx.zeros((m, c), dtype=acc_dtype).at[inv].add(feats.astype(acc_dtype))
        if reduction == "sum":
            return acc.astype(feats.dtype)
        mean = acc / mx.maximum(counts, 1).astype(acc_dtype)[:, None]
        return mean.astype(feats.dtype) if mx.issubdtype(feats.dtype, mx.floating) else mean
    rows = mx.arange(n, dtype=mx.int32)
    if reduction == "first":
        first = mx.full((m,), n, dtype=mx.int32).at[inv].minimum(rows)
        return feats[first]
    # max: the value of the first point (smallest row) holding each channel's maximum; the
    # gradient flows to that point only.
    fixed = mx.stop_gradient(feats)
    peak = mx.full((m, c), -mx.inf, dtype=feats.dtype).at[inv].maximum(fixed)
    holder = mx.where(fixed == peak[inv], rows[:, None], n)
    arg = mx.full((m, c), n, dtype=mx.int32).at[inv].minimum(holder.astype(mx.int32))
    return mx.take_along_axis(feats, arg, axis=0)


def voxelize(
    points,
    feats=None,
    voxel_size=1.0,
    *,
    batch_indices=None,
    origin=0.0,
    active_rows=None,
    reduction="mean",
    stride=1,
    return_index=False,
    device=None,
):
    """Points (N, 3) and their features (N, C) -> a SparseTensor of voxels.

    ``reduction``: mean | sum | max | first | count (count needs no features: one channel
    of point counts). With ``return_index=True`` also returns the voxel row of every
    point (int32 (N,)), to map voxel results back to the original points.
    """
    op = "voxelize"
    if reduction not in REDUCTIONS:
        raise ValueError(f"[{op}] reduction must be one of {REDUCTIONS}, got {reduction!r}")
    level = int_triple(stride, "stride", op, minimum=1)
    if feats is None and reduction != "count":
        raise ValueError(f"[{op}] feats are required for reduction {reduction!r}")
    if feats is not None and not isinstance(feats, mx.array):
        feats = mx.array(np.asarray(feats))
    channels = 1 if feats is None else (feats.shape[1] if feats.ndim == 2 else -1)
    route = route_points(
        PointsRequest(op, int(np.shape(points)[0]), channels, reduction, device=requested_device(device))
    )
    route.require("cpu.hash_quantize_segment_reduce")
    q = sparse_quantize(
        points, voxel_size, batch_indices=batch_indices, origin=origin, active_rows=active_rows
    )
    if feats is not None and active_rows is not None:
        feats = feats[: q.inverse_rows.shape[0]]
    vfeats = _voxelize_features(feats, q, reduction, host_sums=True)
    # The quantizer's hash table already holds these unique coords: register it rather than
    # letting SparseTensor hash them again (about 15 % of the call on a 200k-point scan).
    manager = CoordinateManager()
    key = manager.adopt(q.table, level)
    tensor = SparseTensor(q.coords, vfeats, level, coord_key=key, coord_manager=manager)
    return (tensor, q.inverse_rows) if return_index else tensor


def build_point_voxel_map(
    points, voxels: SparseTensor, voxel_size=1.0, *, batch_indices=None, origin=0.0, interpolation="linear"
) -> PointVoxelMap:
    """Voxel rows and weights that sample ``voxels`` at ``points``.

    ``linear``: the 8 voxels whose centres surround the point, trilinear weights, missing
    voxels weight 0, the rest renormalised to sum 1 (a point with no voxel around gets
    all-zero weights). ``nearest``: the voxel containing the point, weight 1 (or -1 / 0).
    """
    op = "devoxelize"
    if interpolation not in ("linear", "nearest"):
        raise ValueError(f"[{op}] interpolation must be 'linear' or 'nearest', got {interpolation!r}")
    pts = np.asarray(points, dtype=np.float64)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"[{op}] points must have shape (N, 3), got {pts.shape}")
    if not np.all(np.isfinite(pts)):
        raise ValueError(f"[{op}] points must be finite")
    vs = np.asarray(float_triple(voxel_size, "voxel_size", op, positive=True)) * np.asarray(voxels.stride)
    org = np.asarray(float_triple(origin, "origin", op))
    n = len(pts)
    batch = (
        np.zeros(n, np.int64) if batch_indices is None else np.asarray(batch_indices, np.int64).reshape(-1)
    )
    if batch.shape != (n,):
        raise ValueError(f"[{op}] batch_indices must have shape ({n},), got {batch.shape}")
    u = (pts - org) / vs
    table = voxels.coord_manager.table(voxels.coord_key)
    if interpolation == "nearest":
        q = np.concatenate([batch[:, None], np.floor(u)], axis=1).astype(np.int32)
        rows = np.asarray(_ext.lookup(table, mx.array(q)))[:, None]
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


def interpolate_point_features(voxel_feats: mx.array, point_voxel_map: PointVoxelMap) -> mx.array:
    """``sum_j weights[:, j] * voxel_feats[rows[:, j]]`` (N, C); differentiable in the features."""
    rows = mx.maximum(point_voxel_map.rows, 0)
    gathered = voxel_feats[rows.reshape(-1)].reshape(*rows.shape, voxel_feats.shape[-1])
    w = point_voxel_map.weights.astype(mx.float32)[..., None]
    return mx.sum(gathered.astype(mx.float32) * w, axis=1).astype(voxel_feats.dtype)


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
) -> mx.array:
    """Sample voxel features at points (trilinear over the 8 surrounding voxel centres, or nearest)."""
    op = "devoxelize"
    if not isinstance(voxels, SparseTensor):
        raise TypeError(f"[{op}] voxels must be a SparseTensor, got {type(voxels).__name__}")
    route = route_points(
        PointsRequest(
            op,
            int(np.shape(points)[0]),
            voxels.channels,
            interpolation=interpolation,
            device=requested_device(device),
        )
    )
    route.require("cpu.hash_corner_lookup")
    pvm = point_voxel_map or build_point_voxel_map(
        points, voxels, voxel_size, batch_indices=batch_indices, origin=origin, interpolation=interpolation
    )
    feats = voxels.feats[: voxels.active_count]
    return interpolate_point_features(feats, pvm)
