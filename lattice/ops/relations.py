"""Relation functions: kernel maps of the five kinds, point neighbourhoods, and gathering
features along a neighbourhood (``gather_neighbor_features``). The builders over raw
coordinate buffers with live-row counts are in ``lattice.ops.coord_relations``.

``x`` is a SparseTensor (its manager caches the relation) or an (N, 4) int32
coordinate array (wrapped in a fresh manager at stride 1 — or, for transposed
kinds, at the transposed stride so that the output lands at stride 1).
Targets are a SparseTensor, a CoordinateMapKey of ``x``'s manager, or a
coordinate array at the output level.
"""

from __future__ import annotations

from dataclasses import replace

import mlx.core as mx
import numpy as np

from lattice.core._checks import coords_array, dtype_name, float_triple
from lattice.core.coordinates import CoordinateManager, CoordinateMapKey
from lattice.core.kernel import KernelSpec
from lattice.core.relation import KernelRelation, NeighborRelation, RelationKind
from lattice.core.tensor import SparseTensor
from lattice.routing import requested_device
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.features import RowwiseRequest, route_rowwise
from lattice.routing.registry import dispatch
from lattice.routing.relations import NeighborRequest, route_neighbors


def _source(x, level, op: str) -> tuple[CoordinateManager, CoordinateMapKey]:
    if isinstance(x, SparseTensor):
        return x.coord_manager, x.coord_key
    manager = CoordinateManager()
    return manager, manager.insert(coords_array(x, op), level, op=op)


def _target(manager: CoordinateManager, target, level, op: str) -> CoordinateMapKey | None:
    if target is None:
        return None
    if isinstance(target, CoordinateMapKey):
        manager.check_key(target, op)
        return target
    if isinstance(target, SparseTensor):
        if target.coord_manager is manager:
            return target.coord_key
        # A target from another manager: its coordinates join this manager (once).
        return manager.intern(target.coords[: target.active_count], target.stride, op=op)
    return manager.intern(coords_array(target, op, "target"), level, op=op)


def _level(stride_in, spec: KernelSpec, transposed: bool):
    if transposed:
        return tuple(a // b for a, b in zip(stride_in, spec.stride, strict=True))
    return tuple(a * b for a, b in zip(stride_in, spec.stride, strict=True))


def _relation_plan(relation: KernelRelation, op: str) -> CallPlan:
    """The plan of a relation function: the relation (built, or found in the manager's
    cache) and the route that built it."""
    return CallPlan(replace(relation.route, op=op), lambda: relation)


def _relation_example(kind: str):
    """``lattice explain`` of a relation function: ``x`` (and ``x`` as the target of a
    target relation), the requested kernel."""

    def build(x, req):
        kwargs = {"kernel_size": req.kernel_size}
        if kind != "submanifold":
            kwargs["stride"] = req.stride
        return ((x, x) if kind == "target" else (x,)), kwargs

    return build


def _neighbor_example(kind: str):
    def build(x, req):
        return (x,), ({"k": 16} if kind == "knn" else {"radius": 2.0, "max_neighbors": 32})

    return build


@explainable(example=_relation_example("forward"), returns=KernelRelation)
def kernel_relation(x, *, kernel_size=2, stride=2, padding=0, dilation=1) -> CallPlan:
    """Forward relation onto ``unique(floor(coords / stride))``: ``i = o*s + k*d - p``."""
    op = "kernel_relation"
    spec = KernelSpec(kernel_size, stride, padding, dilation, op=op)
    manager, key = _source(x, (1, 1, 1), op)
    return _relation_plan(manager.relation(RelationKind.FORWARD, key, spec, op=op), op)


@explainable(example=_relation_example("submanifold"), returns=KernelRelation)
def submanifold_kernel_relation(x, *, kernel_size=3, dilation=1) -> CallPlan:
    """Submanifold relation: output support is the input support (odd, centred kernel)."""
    op = "submanifold_kernel_relation"
    spec = KernelSpec(kernel_size, 1, 0, dilation, op=op)
    manager, key = _source(x, (1, 1, 1), op)
    return _relation_plan(manager.relation(RelationKind.SUBMANIFOLD, key, spec, op=op), op)


@explainable(example=_relation_example("target"), returns=KernelRelation)
def target_kernel_relation(x, target, *, kernel_size=3, stride=1, padding=0, dilation=1) -> CallPlan:
    """Forward edge rule onto an explicit target support (rows and order kept)."""
    op = "target_kernel_relation"
    spec = KernelSpec(kernel_size, stride, padding, dilation, op=op)
    manager, key = _source(x, (1, 1, 1), op)
    tkey = _target(manager, target, _level(key.stride, spec, False), op)
    if tkey is None:
        raise ValueError(f"[{op}] target is required")
    return _relation_plan(manager.relation(RelationKind.TARGET, key, spec, tkey, op=op), op)


@explainable(example=_relation_example("transposed"), returns=KernelRelation)
def transposed_kernel_relation(x, target=None, *, kernel_size=2, stride=2, padding=0, dilation=1) -> CallPlan:
    """Transposed relation ``t = s*stride + k*d - p``: generated (deduplicated) or onto ``target``."""
    op = "transposed_kernel_relation"
    spec = KernelSpec(kernel_size, stride, padding, dilation, op=op)
    manager, key = _source(x, spec.stride, op)
    tkey = _target(manager, target, _level(key.stride, spec, True), op)
    return _relation_plan(manager.relation(RelationKind.TRANSPOSED, key, spec, tkey, op=op), op)


@explainable(example=_relation_example("generative"), returns=KernelRelation)
def generative_kernel_relation(x, target=None, *, kernel_size=2, stride=2) -> CallPlan:
    """Generative relation: every coordinate of each input's kernel footprint, or ``target``."""
    op = "generative_kernel_relation"
    spec = KernelSpec(kernel_size, stride, 0, 1, op=op)
    manager, key = _source(x, spec.stride, op)
    tkey = _target(manager, target, _level(key.stride, spec, True), op)
    return _relation_plan(manager.relation(RelationKind.GENERATIVE, key, spec, tkey, op=op), op)


# ---- point neighbourhoods --------------------------------------------------------


def _cloud(x, batch, op: str, name: str) -> tuple[mx.array, mx.array]:
    if isinstance(x, SparseTensor):
        c = x.coords[: x.active_count]
        return c[:, 1:].astype(mx.float32), c[:, 0]
    pts = x if isinstance(x, mx.array) else mx.array(np.asarray(x, dtype=np.float32))
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"[{op}] {name} must be a SparseTensor or (N, 3) points, got {tuple(pts.shape)}")
    if batch is None:
        b = mx.zeros((pts.shape[0],), mx.int32)
    else:
        b = batch if isinstance(batch, mx.array) else mx.array(np.asarray(batch))
        if b.shape != (pts.shape[0],):
            raise ValueError(f"[{op}] {name}_batch must have shape ({pts.shape[0]},), got {tuple(b.shape)}")
    return pts.astype(mx.float32), b.astype(mx.int32)


@explainable(example=_neighbor_example("knn"), returns=NeighborRelation)
def knn_relation(source, query=None, *, k, source_batch=None, query_batch=None) -> CallPlan:
    """The ``k`` nearest source points of every query (same batch), by Euclidean distance.

    SparseTensors use their xyz lattice indices as positions. Queries default to
    the sources (each point is then its own first neighbour).
    """
    op = "knn_relation"
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"[{op}] k must be a positive int, got {k!r}")
    s, sb = _cloud(source, source_batch, op, "source")
    q, qb = (s, sb) if query is None else _cloud(query, query_batch, op, "query")
    route = route_neighbors(NeighborRequest(op, int(s.shape[0]), int(q.shape[0]), requested_device(None)))
    return CallPlan(route, lambda: _neighbors(dispatch(route, s, sb, q, qb, int(k)), s, int(k)))


@explainable(example=_neighbor_example("radius"), returns=NeighborRelation)
def radius_relation(
    source, query=None, *, radius, max_neighbors=None, source_batch=None, query_batch=None
) -> CallPlan:
    """Source points within ``radius`` of every query (same batch), nearest first."""
    op = "radius_relation"
    if np.ndim(radius) != 0:
        raise ValueError(f"[{op}] radius must be a single number, got {radius!r}")
    r = float_triple(radius, "radius", op, positive=True)[0]
    if max_neighbors is not None and (
        isinstance(max_neighbors, bool)
        or not isinstance(max_neighbors, (int, np.integer))
        or max_neighbors < 1
    ):
        raise ValueError(f"[{op}] max_neighbors must be a positive int or None, got {max_neighbors!r}")
    s, sb = _cloud(source, source_batch, op, "source")
    q, qb = (s, sb) if query is None else _cloud(query, query_batch, op, "query")
    cap = -1 if max_neighbors is None else int(max_neighbors)
    route = route_neighbors(NeighborRequest(op, int(s.shape[0]), int(q.shape[0]), requested_device(None)))
    return CallPlan(route, lambda: _neighbors(dispatch(route, s, sb, q, qb, (r, cap)), s, max_neighbors))


def _neighbors(arrays, source: mx.array, cap) -> NeighborRelation:
    """The relation of a route's (offsets, source rows, distances), with its source count and cap."""
    return NeighborRelation(
        *arrays, n_source_capacity=int(source.shape[0]), max_neighbors=None if cap is None else int(cap)
    )


def _gather_example(x, req):
    return (x, knn_relation(x, k=4)), {}


@explainable(example=_gather_example, returns=mx.array)
def gather_neighbor_features(source, relation) -> CallPlan:
    """The features of ``source`` (a SparseTensor, or (N, C) features) along the edges of a
    ``NeighborRelation``: (edge_count, C), row ``e`` the features of source row
    ``relation.source_rows[e]`` (edges by query, nearest first). A row-wise gather (MLX's
    ``take``) on the call's device; differentiable in the features."""
    op = "gather_neighbor_features"
    if not isinstance(relation, NeighborRelation):
        raise TypeError(f"[{op}] relation must be a NeighborRelation, got {type(relation).__name__}")
    if isinstance(source, SparseTensor):
        feats = source.feats
    elif isinstance(source, mx.array) and source.ndim == 2:
        feats = source
    else:
        raise TypeError(
            f"[{op}] source must be a SparseTensor or (N, C) features, got {type(source).__name__}"
        )
    n = relation.n_source_capacity
    if n is not None and n > feats.shape[0]:
        raise ValueError(f"[{op}] the relation was built over {n} source rows, source has {feats.shape[0]}")
    route = route_rowwise(
        RowwiseRequest(op, dtype_name(feats.dtype), int(feats.shape[1]), requested_device(None))
    )
    rows = relation.source_rows

    def gather(f: mx.array) -> mx.array:
        # no edges: an empty slice (MLX's take has no gradient over an empty source)
        return mx.take(f, rows, axis=0) if rows.shape[0] else f[:0]

    return CallPlan(route, lambda: dispatch(route, gather, feats))
