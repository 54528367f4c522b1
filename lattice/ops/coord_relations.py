"""Relations from raw coordinate buffers: the ``build_*`` builders of mlx-lattice 0.6.3.

Each takes ``(N, 4)`` integer ``(batch, x, y, z)`` buffers and their live-row counts
(``active_rows``: None for every row, an int, or an int32 array of shape ``(1,)`` or
``()``), registers the live rows (which must be unique) in a fresh ``CoordinateManager``
and builds the relation there — the builders and routes of ``lattice.ops.relations``. The
relation's ``contract`` records the buffers: ``source_coords`` / ``source_active_rows``
and, where the output support is given (target, submanifold, a transposed relation onto
a target), ``target_coords`` / ``target_active_rows``. Its input views span the source
buffer's rows; where the output support is given, its output views span the target
buffer's rows (rows past the live ones hold no edges, and -1 in the implicit-GEMM map).

The kernel geometry is lattice's (``kernel_offsets``: odd sizes centred, even from 0;
z fastest), for every kind.

Neighbour relations use the xyz of the integer coordinates as positions, within a batch,
nearest first (ties by source row), and report *squared* distances (exact, as integers
give them; lattice's ``knn_relation`` / ``radius_relation`` report Euclidean ones). Their
offsets span the query buffer (queries past the live ones have no neighbours).
"""

from __future__ import annotations

import math
from dataclasses import replace

import mlx.core as mx
import numpy as np

from lattice.core._checks import coords_array
from lattice.core.coordinates import CoordinateManager
from lattice.core.kernel import KernelSpec
from lattice.core.relation import KernelRelation, NeighborRelation, RelationKind
from lattice.core.relation_views import RelationSupport, attach_support
from lattice.routing import requested_device
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.registry import dispatch
from lattice.routing.relations import NeighborRequest, route_neighbors

# ---- buffers and their live rows -----------------------------------------------------------


def live_count(active_rows, n: int, op: str, name: str = "active_rows") -> int:
    """The live rows of an ``n``-row buffer: ``active_rows`` as None, an int or an int32
    array of shape (1,) / () (read once, here)."""
    if active_rows is None:
        return n
    if isinstance(active_rows, mx.array):
        if active_rows.size != 1 or active_rows.ndim > 1 or not mx.issubdtype(active_rows.dtype, mx.integer):
            raise ValueError(
                f"[{op}] {name} must be an int or an integer array of shape (1,), got shape "
                f"{tuple(active_rows.shape)} {active_rows.dtype}"
            )
        value = int(active_rows.item())
    elif isinstance(active_rows, (int, np.integer)) and not isinstance(active_rows, bool):
        value = int(active_rows)
    else:
        raise TypeError(f"[{op}] {name} must be None, an int or an int32 array, got {active_rows!r}")
    if not 0 <= value <= n:
        raise ValueError(f"[{op}] {name} must be in [0, {n}], got {value}")
    return value


def _count(n: int) -> mx.array:
    return mx.array([n], dtype=mx.int32)


def _buffer(coords, op: str, name: str) -> mx.array:
    """The caller's buffer as an (N, 4) integer mx.array (an mx.array of int32 / int64 kept as
    given, for the contract)."""
    if isinstance(coords, mx.array) and coords.dtype in (mx.int32, mx.int64):
        coords_array(coords, op, name)  # checks the shape and that int64 values fit int32
        return coords
    return coords_array(coords, op, name)


def _insert(manager: CoordinateManager, buffer: mx.array, live: int, level, op: str):
    rows = coords_array(buffer if live == buffer.shape[0] else buffer[:live], op)
    return manager.insert(rows, level, op=op)


def _kernel_plan(kind, op, spec, coords, active_rows, target=None, target_active_rows=None) -> CallPlan:
    """Builds the relation of ``kind`` from the live rows of ``coords`` (onto the live rows of
    ``target``) in a fresh manager; its plan returns it with its contract's buffers."""
    transposed = kind in (RelationKind.TRANSPOSED, RelationKind.GENERATIVE)
    level, target_level = (spec.stride, (1, 1, 1)) if transposed else ((1, 1, 1), spec.stride)
    source = _buffer(coords, op, "coords")
    live = live_count(active_rows, source.shape[0], op)
    manager = CoordinateManager()
    key = _insert(manager, source, live, level, op)
    tkey = tlive = None
    if target is not None:
        target = _buffer(target, op, "target_coords")
        tlive = live_count(target_active_rows, target.shape[0], op, "target_active_rows")
        tkey = _insert(manager, target, tlive, target_level, op)
    elif kind is RelationKind.SUBMANIFOLD:
        target, tlive = source, live
    relation = manager.relation(kind, key, spec, tkey, op=op)
    source_count = _count(live)
    if kind is RelationKind.SUBMANIFOLD and live == source.shape[0] and source.dtype == mx.int32:
        # The output support is the caller's own buffer (same rows, same order, same dtype).
        relation = replace(relation, out_coords=source, _derived={})
    support = RelationSupport(
        source_coords=source,
        source_active_rows=source_count,
        target_coords=target,
        target_active_rows=None if target is None else (source_count if target is source else _count(tlive)),
        out_coords=target,
        n_in_capacity=int(source.shape[0]),
    )
    return CallPlan(replace(relation.route, op=op), lambda: attach_support(relation, support))


def _kernel_example(kind: str):
    """``lattice explain`` of a builder: ``x``'s coordinates (and as the target of a target
    relation), the requested kernel."""

    def build(x, req):
        kwargs = {"kernel_size": req.kernel_size}
        if kind != "submanifold":
            kwargs["stride"] = req.stride
        return ((x.coords, x.coords) if kind == "target" else (x.coords,)), kwargs

    return build


# ---- kernel relations ------------------------------------------------------------------------


@explainable(example=_kernel_example("forward"), returns=KernelRelation)
def build_kernel_relation(
    coords, active_rows=None, kernel_size=3, stride=1, padding=0, dilation=1
) -> CallPlan:
    """Forward relation of the live rows of ``coords`` onto ``unique(floor(coords / stride))``
    (first occurrence): an edge ``(i, o, k)`` where ``i = o * stride + k * dilation - padding``."""
    op = "build_kernel_relation"
    spec = KernelSpec(kernel_size, stride, padding, dilation, op=op)
    return _kernel_plan(RelationKind.FORWARD, op, spec, coords, active_rows)


@explainable(example=_kernel_example("submanifold"), returns=KernelRelation)
def build_submanifold_kernel_relation(coords, active_rows=None, kernel_size=3, dilation=1) -> CallPlan:
    """Submanifold relation: the output support is ``coords`` itself (odd kernels), an edge
    where ``o + k * dilation`` is a live row."""
    op = "build_submanifold_kernel_relation"
    spec = KernelSpec(kernel_size, 1, 0, dilation, op=op)
    return _kernel_plan(RelationKind.SUBMANIFOLD, op, spec, coords, active_rows)


@explainable(example=_kernel_example("target"), returns=KernelRelation)
def build_target_kernel_relation(
    coords,
    target_coords,
    *,
    active_rows=None,
    target_active_rows=None,
    kernel_size=3,
    stride=1,
    padding=0,
    dilation=1,
) -> CallPlan:
    """The forward edge rule onto the live rows of ``target_coords`` (rows and order kept)."""
    op = "build_target_kernel_relation"
    spec = KernelSpec(kernel_size, stride, padding, dilation, op=op)
    return _kernel_plan(RelationKind.TARGET, op, spec, coords, active_rows, target_coords, target_active_rows)


@explainable(example=_kernel_example("transposed"), returns=KernelRelation)
def build_transposed_kernel_relation(
    coords,
    active_rows=None,
    kernel_size=2,
    stride=2,
    padding=0,
    dilation=1,
    *,
    target_coords=None,
    target_active_rows=None,
) -> CallPlan:
    """Transposed relation: ``o = i * stride + k * dilation - padding`` for every live input
    ``i`` and offset ``k``; the output support is every such ``o`` (first occurrence over
    (input row, offset) pairs), or the live rows of ``target_coords``."""
    op = "build_transposed_kernel_relation"
    spec = KernelSpec(kernel_size, stride, padding, dilation, op=op)
    return _kernel_plan(
        RelationKind.TRANSPOSED, op, spec, coords, active_rows, target_coords, target_active_rows
    )


@explainable(example=_kernel_example("generative"), returns=KernelRelation)
def build_generative_relation(
    coords, active_rows=None, kernel_size=2, stride=2, *, target_coords=None, target_active_rows=None
) -> CallPlan:
    """Generative relation: every coordinate ``i * stride + k`` of each live input's kernel
    footprint (or the live rows of ``target_coords`` it reaches)."""
    op = "build_generative_relation"
    spec = KernelSpec(kernel_size, stride, 0, 1, op=op)
    return _kernel_plan(
        RelationKind.GENERATIVE, op, spec, coords, active_rows, target_coords, target_active_rows
    )


# ---- neighbour relations ---------------------------------------------------------------------


def radius_capacity(radius: float) -> int:
    """Integer offsets within ``radius`` of a point (at least 1): the most neighbours a query
    of a radius relation over unique integer coordinates can have."""
    reach = math.ceil(radius)
    r2 = radius * radius
    axis = np.arange(-reach, reach + 1, dtype=np.float64)
    total = 0
    for dx in axis:
        rest = r2 - dx * dx - axis * axis  # room left for dz, per dy
        rest = rest[rest >= 0]
        dz = np.floor(np.sqrt(rest))
        dz += (dz + 1) ** 2 <= rest  # sqrt rounding, both ways
        dz -= dz**2 > rest
        total += int(np.sum(2 * dz + 1))
    return max(total, 1)


def _neighbor_plan(kind: str, op: str, source, query, source_active_rows, query_active_rows, bound, cap):
    source_buf = _buffer(source, op, "source_coords")
    ls = live_count(source_active_rows, source_buf.shape[0], op, "source_active_rows")
    same = query is None or query is source
    query_buf = source_buf if query is None else _buffer(query, op, "query_coords")
    if query_active_rows is None and same:
        lq = ls
    else:
        lq = live_count(query_active_rows, query_buf.shape[0], op, "query_active_rows")
    s = coords_array(source_buf[:ls], op)
    q = coords_array(query_buf[:lq], op)
    route = route_neighbors(NeighborRequest(kind, ls, lq, requested_device(None)))

    def run() -> NeighborRelation:
        sp, sb, qp, qb = s[:, 1:].astype(mx.float32), s[:, 0], q[:, 1:].astype(mx.float32), q[:, 0]
        offsets, rows, _ = dispatch(route, sp, sb, qp, qb, bound)
        exact = NeighborRelation(offsets, rows, mx.zeros(rows.shape, mx.float32))
        d = (q[exact.query_rows, 1:] - s[rows, 1:]).astype(mx.float32)
        pad = int(query_buf.shape[0]) - lq
        if pad:
            offsets = mx.concatenate([offsets, mx.full((pad,), int(rows.shape[0]), dtype=mx.int32)])
        return NeighborRelation(
            offsets,
            rows,
            mx.sum(d * d, axis=1),
            n_source_capacity=int(source_buf.shape[0]),
            max_neighbors=cap,
            active_queries=lq,
        )

    return CallPlan(replace(route, op=op), run)


def _positive_int(value, name: str, op: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"[{op}] {name} must be a positive int, got {value!r}")
    return int(value)


@explainable(example=lambda x, req: ((x.coords,), {"k": 16}), returns=NeighborRelation)
def build_knn_relation(
    source_coords, query_coords=None, *, source_active_rows=None, query_active_rows=None, k
) -> CallPlan:
    """The ``k`` nearest live source rows of every live query row (same batch, by the xyz
    lattice indices), nearest first, ties by source row; squared distances. Queries default
    to the sources (each row is then its own first neighbour). ``max_neighbors`` is ``k``."""
    op = "build_knn_relation"
    k = _positive_int(k, "k", op)
    return _neighbor_plan(
        "knn_relation", op, source_coords, query_coords, source_active_rows, query_active_rows, k, k
    )


@explainable(
    example=lambda x, req: ((x.coords,), {"radius": 2.0, "max_neighbors": 32}), returns=NeighborRelation
)
def build_radius_relation(
    source_coords,
    query_coords=None,
    *,
    source_active_rows=None,
    query_active_rows=None,
    radius,
    max_neighbors=None,
) -> CallPlan:
    """The live source rows within ``radius`` (squared distance <= radius²) of every live
    query row (same batch), nearest first, at most ``max_neighbors`` of them; squared
    distances. ``max_neighbors=None`` caps at the integer offsets within the radius
    (``radius_capacity``), which ``max_neighbors`` then reports."""
    op = "build_radius_relation"
    if np.ndim(radius) != 0 or isinstance(radius, bool):
        raise ValueError(f"[{op}] radius must be a single number, got {radius!r}")
    r = float(radius)
    if not math.isfinite(r) or r < 0:
        raise ValueError(f"[{op}] radius must be finite and non-negative, got {radius!r}")
    cap = radius_capacity(r) if max_neighbors is None else _positive_int(max_neighbors, "max_neighbors", op)
    # integer points within r < 0.5 coincide, as within 0.5 (the grid needs a positive radius)
    bound = (max(r, 0.5), cap)
    args = (source_coords, query_coords, source_active_rows, query_active_rows)
    return _neighbor_plan("radius_relation", op, *args, bound, cap)


__all__ = [
    "build_generative_relation",
    "build_kernel_relation",
    "build_knn_relation",
    "build_radius_relation",
    "build_submanifold_kernel_relation",
    "build_target_kernel_relation",
    "build_transposed_kernel_relation",
    "live_count",
    "radius_capacity",
]
