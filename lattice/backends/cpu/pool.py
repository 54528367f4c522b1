"""CPU routes of the pooling family: wrappers that place the native pooling
primitives (``csrc/backend/cpu/pool.cpp``) on the CPU stream, registered under the
pooling routes' ids (``lattice.routing.pool``).

The relations and window maps handed over come from lattice's coordinate manager, so
the calls vouch (``distinct=True``) that within one kernel offset no input row repeats
and no output row repeats unless the edges are grouped by output row (a window map):
the native backward scatters then run in parallel without re-checking that. Row
indices are range-checked natively all the same.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx

from lattice import _ext
from lattice.core.relation import KernelRelation, WindowMap
from lattice.routing import pool as routes
from lattice.routing.registry import Vjp, implements

BACKWARD_ROUTES = (routes.INPUT_EXCLUSIVE_GATHER.algorithm, routes.SCATTER_GENERAL.algorithm)


@implements(routes.SEGMENT_REDUCE)
def segment_reduce(
    feats: mx.array,
    rel: KernelRelation,
    mode: str,
    *,
    backward: str,
    weights: Sequence[float] | None = None,
) -> mx.array:
    """``mode`` ('sum' | 'avg' | 'max') of ``feats`` over the relation's edges, per output row.

    ``weights`` (one per kernel offset) weight the sum and the average; ``backward``
    names the route the VJP takes. Differentiable (also twice).
    """
    if backward not in BACKWARD_ROUTES:
        raise ValueError(f"[segment_reduce] backward must be one of {BACKWARD_ROUTES}, got {backward!r}")
    return _ext.sparse_pool(
        feats,
        rel.grouped_edges.in_rows,
        rel.grouped_edges.out_rows,
        list(rel.edge_offsets_host),
        rel.n_out,
        mode,
        backward,
        None if weights is None else [float(w) for w in weights],
        distinct=True,
        stream=mx.cpu,
    )


@implements(routes.WINDOW_REDUCE)
def window_reduce(feats: mx.array, windows: WindowMap, mode: str, *, backward: str, weights=None) -> mx.array:
    """``mode`` of ``feats`` over the cells of a downsample, per output row.

    The window map's edges come grouped by output row, which the native kernels detect:
    no sort, and (one edge per input row) the VJP is the gather ``backward`` names.
    Differentiable (also twice); ``weights`` must be None (unit weights).
    """
    if weights is not None:
        raise ValueError("[window_reduce] a window map has unit weights")
    if backward not in BACKWARD_ROUTES:
        raise ValueError(f"[window_reduce] backward must be one of {BACKWARD_ROUTES}, got {backward!r}")
    return _ext.sparse_pool(
        feats,
        windows.in_rows,
        windows.out_rows,
        [0, windows.edge_count],
        windows.out_count,
        mode,
        backward,
        None,
        distinct=True,
        stream=mx.cpu,
    )


@implements(routes.BATCH_SEGMENT_REDUCE)
def batch_segment_reduce(
    feats: mx.array, batch: mx.array, batch_size: int, mode: str, counts=None
) -> mx.array:
    """Dense ``(batch_size, C)`` ``mode`` of the rows of each batch member (differentiable;
    ``counts``, the rows per member, are counted natively)."""
    return _ext.global_pool(feats, batch, int(batch_size), mode, stream=mx.cpu)


# the native VJP of sparse_pool takes the backward route the forward op fixed, by name
for _route in (routes.INPUT_EXCLUSIVE_GATHER, routes.SCATTER_GENERAL):
    routes.POOL_BACKWARD.register(
        _route, Vjp(f"{__name__}.segment_reduce / window_reduce", f"native backward={_route.algorithm!r}")
    )
