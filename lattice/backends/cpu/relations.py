"""CPU relation builders (``csrc/backend/cpu/relations.cpp``): the kernel maps of the
five kinds over the native hash tables of a coordinate manager's sets, registered under
the relation routes' ids (``lattice.routing.relations``). Each returns (out_key, edges,
None): the edges grouped by kernel offset; the identity relation (kernel_size 1, any
device) gives both forms, and a submanifold relation restricted from a larger cached one the
forms that one has."""

from __future__ import annotations

import mlx.core as mx

from lattice import _ext
from lattice.core.buffers import arange
from lattice.core.coordinates import transposed_level
from lattice.core.relation import RelationEdges, RelationKind
from lattice.routing import relations as routes
from lattice.routing.registry import implements


def _edges(arrays) -> RelationEdges:
    return RelationEdges(*arrays[:3])


def _submanifold(manager, in_key, spec, merge: bool):
    arrays = _ext.relation_submanifold(manager.table(in_key), spec.size, spec.dilation, merge=merge)
    return in_key, _edges(arrays), None


@implements(routes.HASH_RELATION_SYMMETRIC)
def submanifold(manager, kind, in_key, spec, target_key, op):
    """Half the offsets probed in the input's table; each hit gives an edge and its mirror."""
    return _submanifold(manager, in_key, spec, merge=False)


@implements(routes.MERGE_RELATION_SUBMANIFOLD)
def submanifold_merged(manager, kind, in_key, spec, target_key, op):
    """The input's rows sorted once and each shifted column merged: the same edges, in the same
    order, as ``submanifold``, without probing a table."""
    return _submanifold(manager, in_key, spec, merge=True)


@implements(routes.IDENTITY_RELATION)
def identity(manager, kind, in_key, spec, target_key, op):
    """A kernel_size-1 submanifold relation: edge (r, r) for every row, as the edge list and
    as the dense (N, 1) map (one lazy arange; the pointwise routes read neither)."""
    n = manager.capacity(in_key)
    rows = arange(n, dtype=mx.int32)
    return in_key, RelationEdges(rows, rows, mx.array([n], dtype=mx.int32)), rows.reshape(n, 1)


@implements(routes.RESTRICTED_RELATION)
def restricted(manager, kind, in_key, spec, target_key, op):
    """A submanifold relation from the smallest larger one of the same set and dilation the
    manager holds: per offset of ``spec``, the edges of the same offset there (one
    concatenation) and, where that relation was built as a dense map, the same map's columns
    (one gather). The forms it was built in are the forms given, so a map made on the GPU
    stays a map."""
    source = manager.covering_relation(in_key, spec)
    at = source.spec.positions_of(spec)
    edges = nmap = None
    if source.built_edges is not None:
        bounds, e = source.edge_offsets_host, source.built_edges
        counts = [bounds[j + 1] - bounds[j] for j in at]
        if sum(counts) == 0:
            in_rows = out_rows = mx.zeros((0,), dtype=mx.int32)
        else:
            in_rows = mx.concatenate([e.in_rows[bounds[j] : bounds[j + 1]] for j in at])
            out_rows = mx.concatenate([e.out_rows[bounds[j] : bounds[j + 1]] for j in at])
        edges = RelationEdges(in_rows, out_rows, mx.array(counts, dtype=mx.int32))
    if source.built_map is not None:
        m = source.built_map
        if m.shape[0] == 0:
            nmap = mx.zeros((0, len(at)), dtype=mx.int32)
        else:
            nmap = _columns(m, source.spec, spec)
    return in_key, edges, nmap


def _columns(m: mx.array, big, small) -> mx.array:
    """The columns of ``small``'s offsets in the dense map ``m`` of kernel ``big``: both odd
    and centred with one dilation (``big.covers(small)``), they are a centred box of ``big``'s
    offsets, so one strided slice of the map seen as (N, *big.size), copied (an MLX gather of
    those columns from a 484,637 x 125 map took 0.45 ms on an H100)."""
    lo = [(b - s) // 2 for b, s in zip(big.size, small.size, strict=True)]
    window = tuple(slice(a, a + s) for a, s in zip(lo, small.size, strict=True))
    view = m.reshape(m.shape[0], *big.size)[(slice(None), *window)]
    return mx.contiguous(view.reshape(m.shape[0], small.volume))


@implements(routes.HASH_RELATION_INPUT_DRIVEN)
def input_driven(manager, kind, in_key, spec, target_key, op):
    """Forward onto the downsample (or target onto a given set): per input row only the
    offsets the stride divides are probed in the output's table."""
    out_key = manager.downsample(in_key, spec.stride) if kind is RelationKind.FORWARD else target_key
    arrays = _ext.relation_forward(
        manager.table(in_key), manager.table(out_key), spec.size, spec.stride, spec.padding, spec.dilation
    )
    return out_key, _edges(arrays), None


@implements(routes.HASH_RELATION_EXCLUSIVE)
def exclusive(manager, kind, in_key, spec, target_key, op):
    """Non-overlapping windows between a set and its downsample: forward, the downsample's
    point -> row map; transposed back onto the parent set, that set's forward relation
    with its edges reversed (same offsets)."""
    if kind is RelationKind.FORWARD:
        table = manager.table(in_key)
        out_key = manager.downsample(in_key, spec.stride)
        if spec.stride == (1, 1, 1):
            inverse = arange(table.size, dtype=mx.int32)
        else:
            # (a downsample made on the GPU from a lazily counted set has -1 past its count)
            inverse = manager.downsample_inverse(in_key, spec.stride)[: table.size]
        return out_key, _edges(_ext.relation_exclusive(table, inverse, spec.stride)), None
    fwd = manager.relation(RelationKind.FORWARD, target_key, spec, op=op, device="cpu")
    return (
        target_key,
        RelationEdges(fwd.grouped_edges.out_rows, fwd.grouped_edges.in_rows, fwd.offset_counts),
        None,
    )


@implements(routes.HASH_RELATION_SCATTER)
def scatter(manager, kind, in_key, spec, target_key, op):
    """Transposed / generative: (input, offset) pairs walked; the generated support
    deduplicated by first occurrence (or a given target's table probed)."""
    level = transposed_level(in_key.stride, spec.stride, op)
    target_table = None if target_key is None else manager.table(target_key)
    arrays = _ext.relation_transposed(
        manager.table(in_key), target_table, spec.size, spec.stride, spec.padding, spec.dilation
    )
    out_key = target_key if target_key is not None else manager.adopt(arrays[3], level)
    return out_key, _edges(arrays), None


@implements(routes.GRID_KNN)
def knn(source, source_batch, query, query_batch, k: int):
    """The k nearest sources of every query (same batch), nearest first."""
    return _ext.knn_neighbors(source, source_batch, query, query_batch, k)


@implements(routes.GRID_RADIUS)
def radius(source, source_batch, query, query_batch, bound: tuple[float, int]):
    """The sources within ``bound[0]`` of every query (same batch), at most ``bound[1]``."""
    return _ext.radius_neighbors(source, source_batch, query, query_batch, *bound)
