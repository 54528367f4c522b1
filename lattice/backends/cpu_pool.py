"""CPU routes of the pooling family: wrappers that place the native pooling
primitives on the CPU stream. Only ops, after their route functions have decided,
call into here.

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

BACKWARD_ROUTES = ("input_exclusive_gather", "scatter_general")


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
        rel.edges.in_rows,
        rel.edges.out_rows,
        list(rel.edge_offsets_host),
        rel.out_count,
        mode,
        backward,
        None if weights is None else [float(w) for w in weights],
        distinct=True,
        stream=mx.cpu,
    )


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
    return _ext.sparse_pool(feats, windows.in_rows, windows.out_rows, [0, windows.edge_count], windows.out_count,
                            mode, backward, None, distinct=True, stream=mx.cpu)


def batch_segment_reduce(feats: mx.array, batch: mx.array, batch_size: int, mode: str) -> mx.array:
    """Dense ``(batch_size, C)`` ``mode`` of the rows of each batch member (differentiable)."""
    return _ext.global_pool(feats, batch, int(batch_size), mode, stream=mx.cpu)


POOL = {"segment_reduce": segment_reduce, "window_reduce": window_reduce}
GLOBAL_POOL = {"batch_segment_reduce": batch_segment_reduce}
