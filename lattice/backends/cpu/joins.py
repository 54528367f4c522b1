"""The join routes of sparse tensor algebra: which rows of each operand meet. Operands on
one support need no matching; otherwise the native hash tables (``csrc/backend/cpu/coords``:
union, intersection, lookup) give the output support and each operand's source rows."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import mlx.core as mx

from lattice import _ext
from lattice.routing import features as routes
from lattice.routing.registry import implements


@dataclass(frozen=True)
class Join:
    """Output coordinates of a join and, per operand, where each output row comes from.

    ``rows[i]`` is None when operand i's rows are the output rows (identity), an int
    ``n`` when its rows are the first ``n`` output rows and the rest are missing (the
    first operand of an outer join), else an int32 array of source rows (-1 = missing).
    ``keep`` is the operand whose key the output keeps (its rows are the output rows).
    ``table`` is the native table of ``coords`` when the join built one (outer joins).
    """

    coords: mx.array
    rows: tuple[None | int | mx.array, ...]
    keep: object = None  # a SparseTensor
    table: object = None


def _table(x):
    return x.coord_manager.table(x.coord_key)


@implements(routes.SAME_SUPPORT)
def same_support(tensors: Sequence, join: str) -> Join:
    """Every operand on the first one's support: its rows are the output rows."""
    first = tensors[0]
    if all(t.run_rows == first.run_rows for t in tensors):
        return Join(first.run_coords, (None,) * len(tensors), first)
    n = first.active_count  # one set, lazily counted in some operands: their live rows
    return Join(first.coords[:n], (n,) * len(tensors), first)


@implements(routes.HASH_JOIN)
def hash_join(tensors: Sequence, join: str) -> Join:
    """The ``join`` of different supports through the native hash tables."""
    first, last = tensors[0], tensors[-1]
    keep = None
    table = None
    if join in ("left", "right"):
        keep = first if join == "left" else last
        coords = keep.run_coords
    elif join == "inner":
        table, coords = _table(first), first.run_coords
        for i, t in enumerate(tensors[1:]):
            coords = coords[_ext.intersection_rows(table, _table(t))]
            if i < len(tensors) - 2:
                table = _ext.build_table(coords, "intersection")
        keep = first if coords.shape[0] == first.active_count else None
    else:
        table = _table(first)
        for t in tensors[1:]:
            table = _ext.union(table, _table(t))
        coords = table.coords
        keep = first if table.size == first.active_count else None
    if keep is first:  # every row of first (a lazily counted set: its whole buffer)
        coords = first.run_coords
    rows: list[None | int | mx.array] = []
    for t in tensors:
        if t is keep:
            rows.append(None)
        elif join == "outer" and t is first:
            rows.append(first.active_count)
        else:
            rows.append(_ext.lookup(_table(t), coords))
    return Join(coords, tuple(rows), keep, table if join == "outer" else None)
