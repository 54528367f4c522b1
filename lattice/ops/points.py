"""Points -> voxels: voxelize (with the point->voxel index), voxelize_features and
voxelize_with_quantization (the two steps of voxelize); the way back is
``lattice.ops.devoxelize``.

Voxel index of a point: ``floor((p - origin) / voxel_size)``, computed in float64 (float32
points widen exactly). Voxel ``i`` of a tensor at stride ``s`` covers
``[origin + i*s*voxel_size, origin + (i+1)*s*voxel_size)``.

Routes (``lattice.routing.points``): the native CPU core, or under the CUDA tier lattice's
kernels (``cuda/points.cu``), which give the same voxels, rows and order. ``voxelize`` is
declared once (``@explainable``) and returns its plan; calling it runs it (``dispatch`` of
the route), ``lattice.explain`` stops before that.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import mlx.core as mx
import numpy as np

from lattice import _ext
from lattice.core._checks import Triple, dtype_name, host_array, int_triple
from lattice.core.buffers import arange, checked_count
from lattice.core.coordinates import CoordinateManager
from lattice.core.points import (
    QuantizeInputs,
    SparseQuantization,
    quantize_inputs,
    sparse_quantize,
)
from lattice.core.tensor import SparseTensor
from lattice.ops.features import rowwise_plan
from lattice.routing import Route, requested_device
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.points import REDUCTIONS, PointsRequest, route_points
from lattice.routing.registry import dispatch_or_cpu


def _host_segment_sum(feats: mx.array, inverse: mx.array, m: int, counts: mx.array | None = None) -> mx.array:
    """float32 ``(m, C)`` sums of ``feats`` rows per ``inverse`` row, summed in float64 by the
    native core (``_ext.segment_sum``; MLX's CPU scatter-add costs ~25 ns per index row); with
    ``counts`` the means (sums over ``max(count, 1)``, divided in float64 in the same pass).

    Differentiable (the VJP is the gather ``cotangent[inverse]``, over the counts for the
    mean; the JVP the segment sum of the tangent). It evaluates its inputs, so it is used
    only by ``voxelize`` (which evaluates anyway in the native quantizer); under
    ``mx.compile`` / ``mx.vmap``, where evaluating is refused, it sums with MLX's scatter-add.
    """
    per_voxel = None if counts is None else mx.maximum(counts, 1).astype(mx.float32)[:, None]

    def scatter(x, inv):
        total = mx.zeros((m, x.shape[1]), mx.float32).at[inv].add(x.astype(mx.float32))
        return total if per_voxel is None else total / per_voxel

    @mx.custom_function
    def segment_sum(x, inv):
        try:
            return _ext.segment_sum(x, inv, m, counts)
        except ValueError as err:  # traced inputs (compile / vmap) cannot be evaluated
            if "function transformations" not in str(err):
                raise
            return scatter(x, inv)

    @segment_sum.vjp
    def segment_sum_vjp(primals, cotangent, output):
        x, inv = primals
        grad = cotangent if per_voxel is None else cotangent / per_voxel
        return grad[inv].astype(x.dtype), mx.zeros_like(inv)

    @segment_sum.jvp
    def segment_sum_jvp(primals, tangents):
        return scatter(tangents[0], primals[1])

    return segment_sum(feats, inverse)


def _features_example(x, req):
    """``lattice explain voxelize_features``: ``x``'s voxel centres quantized at 1, their features."""
    (points, feats), _ = _voxelize_example(x, req)
    return (feats, sparse_quantize(points, 1.0)), {}


@explainable(example=_features_example, returns=mx.array)
def voxelize_features(
    feats: mx.array, quantization: SparseQuantization, reduction="mean", *, active_rows=None
) -> CallPlan:
    """Reduce point features onto the voxels of ``quantization``.

    ``active_rows``: only the first ``active_rows`` rows of ``feats`` are live points (rows
    past it, and past the points the quantization covers, are ignored); a voxel that gets
    no live point reads 0, and ``mean`` divides by the quantization's ``counts``.

    ``reduction``: one of mean | sum | max | min | first | mode | count for every channel,
    or a sequence of them, one per channel. Differentiable for mean, sum, max, min and
    first; ``mode`` (the most frequent value, ties to the smallest) passes no gradient.
    MLX's scatter reductions on the call's device (the row-wise route).
    """
    op = "voxelize_features"
    _reductions(reduction, feats.shape[1] if feats is not None and feats.ndim == 2 else None, op)
    live = _point_rows(active_rows, feats, op)
    return rowwise_plan(
        feats, op, lambda f: _voxelize_features(f, quantization, reduction, host_sums=False, live=live)
    )


def _with_quantization_example(x, req):
    """``lattice explain voxelize_with_quantization``: as voxelize_features, arguments swapped."""
    (feats, q), _ = _features_example(x, req)
    return (q, feats), {}


@explainable(example=_with_quantization_example, returns=SparseTensor)
def voxelize_with_quantization(
    quantization: SparseQuantization,
    feats: mx.array,
    *,
    active_rows=None,
    reduction="mean",
    stride=1,
    template: SparseTensor | None = None,
) -> CallPlan:
    """``voxelize`` in two steps: the voxels of a precomputed ``sparse_quantize`` result as a
    SparseTensor at level ``stride``, with features ``voxelize_features(feats, quantization,
    reduction, active_rows=active_rows)`` — so one quantization serves several feature arrays.

    ``template``: a tensor on the quantization's coordinates (holding its ``coords`` array,
    as the tensors this function returns do); the result keeps its coordinate key and
    manager (so the relations built for one feature array serve the next), and its stride.
    """
    op = "voxelize_with_quantization"
    if not isinstance(quantization, SparseQuantization):
        raise TypeError(
            f"[{op}] quantization must be a SparseQuantization, got {type(quantization).__name__}"
        )
    level = int_triple(stride, "stride", op, minimum=1)
    if template is not None:
        if not isinstance(template, SparseTensor):
            raise TypeError(f"[{op}] template must be a SparseTensor, got {type(template).__name__}")
        if template.coords is not quantization.coords:
            raise ValueError(f"[{op}] template must use the quantization coordinate array")
        if template.lazy or template.active_count != quantization.active_count:
            raise ValueError(
                f"[{op}] template must use the quantization active_rows ({quantization.active_count} rows)"
            )
    _reductions(reduction, feats.shape[1] if isinstance(feats, mx.array) and feats.ndim == 2 else None, op)
    live = _point_rows(active_rows, feats, op)
    reduce = rowwise_plan(
        feats, op, lambda f: _voxelize_features(f, quantization, reduction, host_sums=False, live=live)
    )

    def run() -> SparseTensor:
        voxel_feats = reduce.run()
        if template is not None:
            return template.replace(feats=voxel_feats)
        manager = CoordinateManager()
        q = quantization
        key = manager.insert(q.coords, level, op=op) if q.table is None else manager.adopt(q.table, level)
        return SparseTensor(q.coords, voxel_feats, level, coord_key=key, coord_manager=manager)

    return CallPlan(reduce.route, run)


def _point_rows(active_rows, feats, op: str) -> int | None:
    """The value of a given live point-row count (an int or an integer array of one element),
    in ``[0, rows of feats]``; None where not given."""
    if active_rows is None:
        return None
    n = int(np.shape(feats)[0]) if feats is not None and np.ndim(feats) else 0
    return checked_count(active_rows, n, op)


def _reductions(reduction, channels: int | None, op: str) -> str | tuple[str, ...]:
    """``reduction`` checked: one name, or one name per channel (a sequence of ``channels``)."""
    if isinstance(reduction, str):
        if reduction not in REDUCTIONS:
            raise ValueError(f"[{op}] reduction must be one of {REDUCTIONS}, got {reduction!r}")
        return reduction
    names = tuple(reduction)
    bad = [r for r in names if r not in REDUCTIONS or r == "count"]
    if bad:
        raise ValueError(f"[{op}] per-channel reductions must be among {REDUCTIONS[:-1]}, got {bad[0]!r}")
    if channels is not None and len(names) != channels:
        raise ValueError(f"[{op}] {len(names)} reductions for {channels} feature channels")
    return names[0] if len(set(names)) == 1 else names


def _voxelize_features(feats, quantization: SparseQuantization, reduction, *, host_sums: bool, live=None):
    op = "voxelize_features"
    channels = feats.shape[1] if feats is not None and feats.ndim == 2 else None
    reduction = _reductions(reduction, channels, op)
    if not isinstance(reduction, str):  # one reduction per channel: each group once, channels in order
        parts = []
        for k, r in enumerate(reduction):
            parts.append(
                _voxelize_features(feats[:, k : k + 1], quantization, r, host_sums=host_sums, live=live)
            )
        return mx.concatenate(parts, axis=1)
    m = quantization.active_count
    inv = quantization.inverse_rows
    counts = quantization.counts
    if reduction == "count":
        return counts.astype(mx.float32)[:, None]
    if live is not None and feats is not None and feats.ndim == 2:
        k = min(live, inv.shape[0])  # the live points the quantization covers
        out = _voxelize_features(
            feats[:k], replace(quantization, inverse_rows=inv[:k]), reduction, host_sums=host_sums
        )
        if k == inv.shape[0] or reduction in ("sum", "mean"):
            return out  # sums of no point are 0 already
        reached = mx.zeros((m,), mx.int32).at[inv[:k]].add(1) > 0
        return mx.where(reached[:, None], out, mx.zeros((), dtype=out.dtype))
    if feats.ndim != 2 or feats.shape[0] != inv.shape[0]:
        raise ValueError(
            f"[{op}] feats must have shape ({inv.shape[0]}, C), got {tuple(feats.shape)}: "
            "one row per point (matching rows)"
        )
    n, c = feats.shape
    if n == 0:
        return mx.zeros((m, c), dtype=feats.dtype)
    if reduction in ("sum", "mean"):
        # accumulate in float32 (float64 stays float64); the mean of integers is float32
        acc_dtype = mx.float64 if feats.dtype == mx.float64 else mx.float32
        if host_sums and feats.dtype in (mx.float32, mx.float16, mx.bfloat16):
            out = _host_segment_sum(feats, inv, m, counts if reduction == "mean" else None)
            return out if feats.dtype == mx.float32 else out.astype(feats.dtype)
        acc = mx.zeros((m, c), dtype=acc_dtype).at[inv].add(feats.astype(acc_dtype))
        if reduction == "sum":
            return acc.astype(feats.dtype)
        mean = acc / mx.maximum(counts, 1).astype(acc_dtype)[:, None]
        return mean.astype(feats.dtype) if mx.issubdtype(feats.dtype, mx.floating) else mean
    rows = arange(n, dtype=mx.int32)
    if reduction == "first":
        first = mx.full((m,), n - 1, dtype=mx.int32).at[inv].minimum(rows)  # n - 1: a voxel of no point
        return feats[first]
    if reduction == "mode":
        return _segment_mode(feats, inv, m)
    # max / min: the value of the first point (smallest row) holding each channel's extreme;
    # the gradient flows to that point only.
    fixed = mx.stop_gradient(feats)
    if reduction == "max":
        peak = mx.full((m, c), -mx.inf, dtype=feats.dtype).at[inv].maximum(fixed)
    else:
        peak = mx.full((m, c), mx.inf, dtype=feats.dtype).at[inv].minimum(fixed)
    holder = mx.where(fixed == peak[inv], rows[:, None], n)
    arg = mx.full((m, c), n - 1, dtype=mx.int32).at[inv].minimum(holder.astype(mx.int32))
    return mx.take_along_axis(feats, arg, axis=0)


def _segment_mode(feats: mx.array, inverse: mx.array, m: int) -> mx.array:
    """Per voxel and channel the most frequent value (ties: the smallest; NaN not counted), on the host."""
    from lattice.core.modes import ModeAccumulator

    x, inv = np.asarray(mx.stop_gradient(feats)), np.asarray(inverse)
    out = np.empty((m, x.shape[1]), np.float64)
    for k in range(x.shape[1]):
        acc = ModeAccumulator(x.dtype)
        acc.add(inv, x[:, k], m)
        out[:, k] = acc.result(m)
    return mx.stop_gradient(mx.array(out.astype(np.dtype(str(feats.dtype).split(".")[-1]), copy=False)))


@dataclass(frozen=True)
class VoxelizePlan:
    """What voxelize runs: its route (and request), the checked quantisation inputs and the
    features; ``run`` quantizes and reduces on the route."""

    route: Route
    request: PointsRequest
    inputs: QuantizeInputs
    feats: mx.array | None
    reduction: str | tuple[str, ...]
    level: Triple
    truncate: bool  # active_rows given: the features past the points' rows are dropped
    return_index: bool

    def run(self):
        def reduce(q: SparseQuantization, host_sums: bool) -> mx.array:
            feats = self.feats
            if feats is not None and self.truncate:
                feats = feats[: q.inverse_rows.shape[0]]
            return _voxelize_features(feats, q, self.reduction, host_sums=host_sums)

        cpu = lambda: route_points(replace(self.request, device="cpu"))  # noqa: E731
        _, (q, vfeats) = dispatch_or_cpu(self.route, cpu, self.inputs, reduce)
        # The quantizer's hash table (native, or the GPU table) already holds these unique coords:
        # register it rather than letting SparseTensor hash them again (about 15 % of the call on
        # a 200k-point scan on the CPU).
        manager = CoordinateManager()
        key = manager.adopt(q.table, self.level)
        tensor = SparseTensor(q.coords, vfeats, self.level, coord_key=key, coord_manager=manager)
        return (tensor, q.inverse_rows) if self.return_index else tensor


def _voxelize_example(x, req):
    """``lattice explain voxelize``: the centres of ``x``'s voxels as the points (lazy arrays)."""
    coords = x.coords[: x.active_count]
    points = coords[:, 1:].astype(mx.float32) + 0.5
    feats = mx.zeros((coords.shape[0], req.channels[0]), dtype=getattr(mx, req.dtype))
    return (points, feats), {"batch_indices": coords[:, 0], "device": req.device}


@explainable(example=_voxelize_example)
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
) -> VoxelizePlan:
    """Points (N, 3) and their features (N, C) -> a SparseTensor of voxels.

    ``reduction``: mean | sum | max | min | first | mode | count (count needs no features:
    one channel of point counts), or one of the others per channel (a sequence of C names,
    e.g. ``("mean", "mean", "mode")`` for two measurements and a class id; ``mode`` is the
    most frequent value, ties to the smallest, and passes no gradient). ``lattice.io.kinds``
    says which reduction each kind of attribute gets by default in the file pipeline. With ``return_index=True`` also returns the voxel row of every
    point (int32 (N,)), to map voxel results back to the original points. On the CUDA
    route (``device`` or MLX's default a CUDA GPU) everything stays on the GPU.
    """
    op = "voxelize"
    reduction = _reductions(reduction, None, op)
    level = int_triple(stride, "stride", op, minimum=1)
    if feats is None and reduction != "count":
        raise ValueError(f"[{op}] feats are required for reduction {reduction!r}")
    if feats is not None and not isinstance(feats, mx.array):
        feats = host_array(feats)
    inputs = quantize_inputs(
        points, voxel_size, batch_indices=batch_indices, origin=origin, active_rows=active_rows
    )
    channels = 1 if feats is None else (feats.shape[1] if feats.ndim == 2 else -1)
    if not isinstance(reduction, str):
        reduction = _reductions(reduction, channels, op)
    req = PointsRequest(
        op,
        int(inputs.points.shape[0]),
        channels,
        reduction if isinstance(reduction, str) else "/".join(dict.fromkeys(reduction)),
        device=requested_device(device),
        points_dtype=dtype_name(inputs.points.dtype),
        dtype="float32" if feats is None else dtype_name(feats.dtype),
    )
    return VoxelizePlan(
        route_points(req), req, inputs, feats, reduction, level, active_rows is not None, return_index
    )
