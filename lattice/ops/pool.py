"""Sparse pooling: local sum / max / avg over the forward relation, pool transpose
(contributor average), trilinear upsampling, and global pooling to dense rows.

Each op is declared once (``@explainable``) and returns its *plan* (validate, ask the
routing layer for the forward and backward routes, fetch the edges the route reads from
the input's coordinate manager); calling the op runs the plan (``dispatch`` of its
route), ``lattice.explain`` stops before that. Semantics
(DESIGN.md section 3, docs/pooling.md):

- local pooling: output support ``unique(floor(coords / stride))``, stride
  ``x.stride * stride``; edges ``i = o * stride + k * dilation - padding``; ``avg``
  divides by the number of contributors of the output row; an output row that the
  geometry leaves without contributors (e.g. ``kernel_size < stride``) is 0 in every
  mode. ``max`` is per channel; its gradient goes to the smallest input row among
  the tied maxima (NaN counts as the largest value).
- ``pool_transpose3d``: each fine row is the mean of the coarse rows that reach it
  through the transposed relation ``t = s * stride + k * dilation - padding``.
- ``trilinear_upsample3d``: ``sum w x / sum w`` with ``w = prod_a (1 - |t_a - s_a * c_a| / s_a)``
  over the coarse rows ``c`` present within ``|t_a - s_a * c_a| < s_a``.
- global pooling: dense ``(B, C)``; avg = sum / max(count, 1).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import mlx.core as mx
import numpy as np

from lattice.core._checks import DTypeError, Triple, dtype_name, int_triple
from lattice.core.coordinates import CoordinateMapKey
from lattice.core.kernel import KernelSpec
from lattice.core.relation import KernelRelation, RelationKind, WindowMap
from lattice.core.tensor import SparseTensor
from lattice.ops.relations import _target
from lattice.routing import Route, requested_device
from lattice.routing.explain import explainable
from lattice.routing.pool import (
    GlobalPoolRequest,
    PoolRequest,
    UpsampleRequest,
    pool_edge_facts,
    reads_windows,
    route_global_pool,
    route_pool,
    route_pool_backward,
    route_upsample,
    route_upsample_backward,
)
from lattice.routing.registry import dispatch

IntOrTriple = int | Sequence[int]


class PoolMode(StrEnum):
    """Reduction of a pooling op."""

    SUM = "sum"
    MAX = "max"
    AVG = "avg"


def pool_mode(mode, op: str) -> PoolMode:
    """Normalises a mode given as a PoolMode or its string value."""
    try:
        return PoolMode(mode)
    except ValueError:
        raise ValueError(
            f"[{op}] mode must be one of {tuple(m.value for m in PoolMode)}, got {mode!r}"
        ) from None


@dataclass(frozen=True)
class PoolPlan:
    """What a local pooling or upsampling call will do: the edges reduced over (a relation,
    or the downsample's window map on the window_reduce route), reduction, routes."""

    op: str
    route: Route
    backward: Route
    edges: KernelRelation | WindowMap
    mode: PoolMode
    x: SparseTensor
    weights: tuple[float, ...] | None = None

    def run(self) -> SparseTensor:
        feats = self.x.run_feats
        y = dispatch(
            self.route,
            feats,
            self.edges,
            self.mode.value,
            backward=self.backward.algorithm,
            weights=self.weights,
        )
        key, manager = self.edges.out_key, self.x.coord_manager
        return SparseTensor(manager.coords(key), y, key.stride, coord_key=key, coord_manager=manager)


@dataclass(frozen=True)
class GlobalPoolPlan:
    """What a global pooling call will do."""

    op: str
    route: Route
    mode: PoolMode
    batch_size: int
    x: SparseTensor

    def run(self) -> mx.array:
        x = self.x
        feats, batch = x.feats[: x.active_count], x.batch_indices  # the live rows (checked by the plan)
        counts = mx.array(x.batch_counts, dtype=mx.int32)
        return dispatch(self.route, feats, batch, self.batch_size, self.mode.value, counts)


def _features(x, op: str) -> mx.array:
    if not isinstance(x, SparseTensor):
        raise TypeError(f"[{op}] x must be a SparseTensor, got {type(x).__name__}")
    if x.dtype not in (mx.float32, mx.float16, mx.bfloat16):
        raise DTypeError(
            f"[{op}] features must be float32, float16 or bfloat16, got {dtype_name(x.dtype)} "
            "(pooling reduces float32 and float16 features, and bfloat16)"
        )
    return x.run_feats


# ---- local pooling ---------------------------------------------------------------------


def _feature_fields(x: SparseTensor) -> dict:
    """The request fields of the features pooled: dtype, channels, rows."""
    return {"dtype": dtype_name(x.dtype), "channels": x.channels, "n_in": x.run_rows}


def _geometry(
    op: str,
    *,
    kernel_size: IntOrTriple = 2,
    stride: IntOrTriple = 2,
    padding: IntOrTriple = 0,
    dilation: IntOrTriple = 1,
    device=None,
) -> tuple[KernelSpec, str]:
    """(kernel spec, device) of the local pooling ops and the pool transpose: their keyword
    parameters, declared here once."""
    return KernelSpec(kernel_size, stride, padding, dilation, op=op), requested_device(device)


def _pool_plan(op, x, mode, **geometry) -> PoolPlan:
    """The plan of the local pooling ops."""
    _features(x, op)
    mode = pool_mode(mode, op)
    spec, dev = _geometry(op, **geometry)
    manager = x.coord_manager
    req = PoolRequest(
        op=op,
        mode=mode.value,
        **_feature_fields(x),
        kernel_size=spec.size,
        stride=spec.stride,
        dilation=spec.dilation,
        device=dev,
        padding=spec.padding,
        windows=manager.has_windows(x.coord_key, spec),
    )
    route = route_pool(req)
    # the edges the route reads: the downsample's window map, or the forward relation
    edges = (
        manager.windows(x.coord_key, spec)
        if reads_windows(route)
        else manager.relation(RelationKind.FORWARD, x.coord_key, spec, op=op, device=dev)
    )
    return PoolPlan(op, route.with_facts(**pool_edge_facts(edges)), route_pool_backward(req), edges, mode, x)


def _kernel_example(x, req):
    return (x,), {"kernel_size": req.kernel_size, "stride": req.stride, "device": req.device}


@explainable(example=_kernel_example, keywords=_geometry)
def pool3d(x, *, mode: PoolMode | str = "sum", **geometry) -> PoolPlan:
    """Local sparse pooling (``mode`` sum, max or avg) over the forward relation.

    Output support ``unique(floor(coords / stride))`` at stride ``x.stride * stride``.
    """
    return _pool_plan("pool3d", x, mode, **geometry)


def _fixed_mode(
    name: str, mode: PoolMode, doc: str, plan=_pool_plan, keywords=_geometry, example=_kernel_example
):
    """The op ``name``: ``pool3d`` (``global_pool`` for ``plan=_global_plan``) with ``mode`` fixed,
    its keyword parameters those of ``keywords``."""

    def op(x, **options):
        return plan(name, x, mode, **options)

    op.__name__ = op.__qualname__ = name
    op.__doc__ = doc
    op.__annotations__["return"] = plan.__annotations__["return"]
    return explainable(example=example, keywords=keywords)(op)


sum_pool3d = _fixed_mode("sum_pool3d", PoolMode.SUM, "Local sparse sum pooling (see ``pool3d``).")
max_pool3d = _fixed_mode(
    "max_pool3d",
    PoolMode.MAX,
    "Local sparse max pooling, per channel (see ``pool3d``; gradient ties go to the smallest input row).",
)
avg_pool3d = _fixed_mode(
    "avg_pool3d",
    PoolMode.AVG,
    "Local sparse average pooling: divides by the contributors of each output row (see ``pool3d``).",
)


# ---- upsampling ------------------------------------------------------------------------


def _fine_level(op: str, x: SparseTensor, stride: Triple) -> Triple:
    if any(a % b for a, b in zip(x.stride, stride, strict=True)):
        raise ValueError(f"[{op}] x.stride {x.stride} is not divisible by stride {stride}")
    return tuple(a // b for a, b in zip(x.stride, stride, strict=True))


def _target_key(op: str, x: SparseTensor, target, level: Triple) -> CoordinateMapKey | None:
    if isinstance(target, (SparseTensor, CoordinateMapKey)) and target.stride != level:
        raise ValueError(
            f"[{op}] target stride must equal x.stride / stride = {level}, got {target.stride} "
            f"(x.stride {x.stride})"
        )
    return _target(x.coord_manager, target, level, op)


def _upsample_plan(op, x, rel: KernelRelation, method, weights, explicit_target, device: str) -> PoolPlan:
    req = UpsampleRequest(
        op=op,
        method=method,
        **_feature_fields(x),
        kernel_volume=rel.spec.volume,
        n_out=rel.n_out,
        edges=rel.known_edge_count,
        explicit_target=explicit_target,
        device=device,
    )
    return PoolPlan(op, route_upsample(req), route_upsample_backward(req), rel, PoolMode.AVG, x, weights)


@explainable(example=_kernel_example, keywords=_geometry)
def pool_transpose3d(x, target=None, **geometry) -> PoolPlan:
    """Contributor average onto generated support or ``target`` (rows and order kept).

    Each fine row is the mean of the coarse rows reaching it through the transposed
    relation ``t = s * stride + k * dilation - padding``; target rows without
    contributors are 0. A target must be at stride ``x.stride / stride``.
    """
    op = "pool_transpose3d"
    _features(x, op)
    spec, dev = _geometry(op, **geometry)
    tkey = _target_key(op, x, target, _fine_level(op, x, spec.stride))
    rel = x.coord_manager.relation(RelationKind.TRANSPOSED, x.coord_key, spec, tkey, op=op, device=dev)
    return _upsample_plan(op, x, rel, "transpose", None, tkey is not None, dev)


def _stride_example(x, req):
    return (x,), {"stride": req.stride, "device": req.device}


def trilinear_weights(stride: Triple) -> tuple[float, ...]:
    """Per kernel offset of the ``2s - 1`` kernel (z fastest): ``prod_a (1 - |k_a| / s_a)``."""
    axes = [[1.0 - abs(k) / s for k in range(-(s - 1), s)] for s in stride]
    return tuple(wx * wy * wz for wx, wy, wz in itertools.product(*axes))


@explainable(example=_stride_example)
def trilinear_upsample3d(x, target=None, *, stride: IntOrTriple = 2, device=None) -> PoolPlan:
    """Normalised separable linear interpolation onto generated support or ``target``.

    A coarse row ``c`` sits at fine index ``c * stride``; a fine row ``t`` gets
    ``sum w x / sum w`` over the coarse rows present with weight
    ``w = prod_a (1 - |t_a - c_a * s_a| / s_a) > 0`` (``2s - 1`` taps per axis), so
    generated support is every such ``t``; target rows without neighbours are 0.
    """
    op = "trilinear_upsample3d"
    _features(x, op)
    s = int_triple(stride, "stride", op, minimum=1)
    # DESIGN's kernel 2s - 1 with padding s - 1 counts taps from 0; with the library's centred
    # odd offsets that is the generative relation t = c * s + k, |k| < s, without padding.
    spec = KernelSpec(tuple(2 * a - 1 for a in s), s, 0, 1, op=op)
    tkey = _target_key(op, x, target, _fine_level(op, x, s))
    dev = requested_device(device)
    rel = x.coord_manager.relation(RelationKind.GENERATIVE, x.coord_key, spec, tkey, op=op, device=dev)
    return _upsample_plan(op, x, rel, "trilinear", trilinear_weights(s), tkey is not None, dev)


# ---- global pooling --------------------------------------------------------------------


def _global_plan(op: str, x, mode, *, batch_size: int | None = None, device=None) -> GlobalPoolPlan:
    """The plan of the global pooling ops, whose keyword parameters are declared here once."""
    _features(x, op)
    m = pool_mode(mode, op)
    size = _batch_size(op, x, batch_size, m)
    req = GlobalPoolRequest(
        op=op,
        mode=m.value,
        dtype=dtype_name(x.dtype),
        channels=x.channels,
        n_in=x.active_count,
        batch_size=size,
        device=requested_device(device),
    )
    return GlobalPoolPlan(op, route_global_pool(req), m, size, x)


def _batch_size(op: str, x: SparseTensor, batch_size, mode: PoolMode) -> int:
    counts = np.asarray(x.batch_counts, dtype=np.int64)
    if batch_size is None:
        batch_size = int(counts.size)
    elif isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 0:
        raise ValueError(f"[{op}] batch_size must be a non-negative int or None, got {batch_size!r}")
    elif batch_size < counts.size:
        raise ValueError(
            f"[{op}] batch_size {batch_size} is smaller than the largest batch index + 1 ({counts.size})"
        )
    if mode is PoolMode.MAX:
        full = np.zeros(int(batch_size), np.int64)
        full[: counts.size] = counts
        empty = np.flatnonzero(full == 0).tolist()
        if empty:
            raise ValueError(
                f"[{op}] max over an empty batch member is undefined: member(s) {empty} of batch_size "
                f"{batch_size} have no rows (max pooling rejects empty batches)"
            )
    return int(batch_size)


def _device_example(x, req):
    return (x,), {"device": req.device}


@explainable(example=_device_example, keywords=_global_plan)
def global_pool(x, *, mode: PoolMode | str = "sum", **options) -> GlobalPoolPlan:
    """Dense ``(B, C)`` pooling of each batch member's rows (``mode`` sum, max or avg).

    ``B`` is ``batch_size`` or the largest batch index + 1. Empty members give 0 for
    sum and avg (avg = sum / max(count, 1)); max over an empty member is an error.
    """
    return _global_plan("global_pool", x, mode, **options)


def _fixed_global(name: str, mode: PoolMode, doc: str):
    return _fixed_mode(name, mode, doc, _global_plan, _global_plan, _device_example)


global_sum_pool = _fixed_global(
    "global_sum_pool", PoolMode.SUM, "Dense ``(B, C)`` sum of each batch member's rows."
)
global_avg_pool = _fixed_global(
    "global_avg_pool",
    PoolMode.AVG,
    "Dense ``(B, C)`` mean of each batch member's rows; empty members give 0.",
)
global_max_pool = _fixed_global(
    "global_max_pool",
    PoolMode.MAX,
    "Dense ``(B, C)`` per-channel max of each batch member's rows; an empty member is an error.",
)
