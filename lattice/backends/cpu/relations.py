"""CPU relation builders (``csrc/backend/cpu/relations.cpp``): the kernel maps of the
five kinds over the native hash tables of a coordinate manager's sets, registered under
the relation routes' ids (``lattice.routing.relations``). Each returns (out_key, edges,
None): the edges grouped by kernel offset; the identity relation (kernel_size 1, any
device) gives both forms."""

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


@implements(routes.HASH_RELATION_SYMMETRIC)
def submanifold(manager, kind, in_key, spec, target_key, op):
    """Half the offsets probed in the input's table; each hit gives an edge and its mirror."""
    return in_key, _edges(_ext.relation_submanifold(manager.table(in_key), spec.size, spec.dilation)), None


@implements(routes.IDENTITY_RELATION)
def identity(manager, kind, in_key, spec, target_key, op):
    """A kernel_size-1 submanifold relation: edge (r, r) for every row, as the edge list and
    as the dense (N, 1) map (one lazy arange; the pointwise routes read neither)."""
    n = manager.capacity(in_key)
    rows = arange(n, dtype=mx.int32)
    return in_key, RelationEdges(rows, rows, mx.array([n], dtype=mx.int32)), rows.reshape(n, 1)


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
