"""Coordinate set operations (documented ``mlx_lattice.core.coords.set_ops``).

Adapters over lattice's (``lattice.core.downsample_coords`` and friends, the native hash
tables). lattice's set functions take coordinate *sets* (a repeated live row raises); the
documented ones take any ``(N, 4)`` array and keep each row's first occurrence, so a raw
array is reduced to its first-seen unique rows (host NumPy) before lattice's function runs,
and ``lookup_coords`` reports the first row holding each query. Results are in
first-occurrence order: ``downsample_coords`` the cells as their first rows reach them,
``union_coords`` the rows of ``lhs`` then the new rows of ``rhs``, ``intersection_coords``
the rows of ``lhs`` also in ``rhs``.

They return a :class:`CoordinateSet` (lattice's, whose ``active_count`` is the documented
lazy ``(1,)`` int32 ``active_rows`` array itself); ``lookup_coords(coords, queries)`` gives
the int32 row of each query, -1 where missing; ``contains_coords`` a bool mask;
``inverse_map(source, target)`` the source row of each target row
(``lookup_coords(source, target)``).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np

import lattice.core
from lattice.core import SparseTensor, validate_coord_pair, validate_coords


class CoordinateSet(lattice.core.CoordinateSet):
    """``coords`` (N, 4) and ``active_rows``, the int32 ``(1,)`` live count (given as an
    int or a one-element array). ``active_count`` is ``active_rows`` itself (the documented
    member); ``len()`` is the int."""

    @property
    def active_count(self) -> mx.array:
        """The live count: ``active_rows`` itself (``len(s)`` is the int)."""
        return self.active_rows


def _documented(s: lattice.core.CoordinateSet) -> CoordinateSet:
    return CoordinateSet(s.coords, len(s))


def _first_seen(coords) -> tuple[mx.array, np.ndarray | None]:
    """The first-seen unique rows of ``coords`` and, where rows repeat, the input row of each
    (None: the rows are unique already). Sets and tensors are unique: they pass through."""
    if isinstance(coords, SparseTensor | lattice.core.CoordinateSet):
        return coords, None
    rows = np.asarray(coords)
    if rows.ndim != 2 or rows.shape[0] < 2:
        return coords, None
    _, first = np.unique(rows, axis=0, return_index=True)
    if len(first) == rows.shape[0]:
        return coords, None
    first = np.sort(first)
    return coords[mx.array(first.astype(np.int32))], first.astype(np.int32)


def downsample_coords(coords, stride=2) -> CoordinateSet:
    """The cells ``floor(coords / stride)`` (per batch), in first-occurrence order."""
    if isinstance(coords, mx.array):
        validate_coords(coords)
    return _documented(lattice.core.downsample_coords(_first_seen(coords)[0], stride))


def union_coords(lhs, rhs) -> CoordinateSet:
    """The unique rows of ``lhs`` in first-occurrence order, then those of ``rhs`` not in ``lhs``."""
    if isinstance(lhs, mx.array) and isinstance(rhs, mx.array):
        validate_coord_pair(lhs, rhs)
    return _documented(lattice.core.union_coords(_first_seen(lhs)[0], _first_seen(rhs)[0]))


def intersection_coords(lhs, rhs) -> CoordinateSet:
    """The unique rows of ``lhs`` (first-occurrence order) that are also in ``rhs``."""
    if isinstance(lhs, mx.array) and isinstance(rhs, mx.array):
        validate_coord_pair(lhs, rhs)
    return _documented(lattice.core.intersection_coords(_first_seen(lhs)[0], _first_seen(rhs)[0]))


def lookup_coords(coords, queries) -> mx.array:
    """The int32 row of ``coords`` holding each query (its first, where rows repeat), -1
    where none does."""
    if isinstance(coords, mx.array) and isinstance(queries, mx.array):
        validate_coord_pair(coords, queries, rhs_name="queries")
    unique, first = _first_seen(coords)
    rows = lattice.core.lookup_coords(unique, queries)
    if first is None:
        return rows
    return mx.where(rows >= 0, mx.array(first)[mx.maximum(rows, 0)], -1).astype(mx.int32)


def contains_coords(coords, queries) -> mx.array:
    """Whether each query row is in ``coords`` (bool)."""
    return lookup_coords(coords, queries) >= 0


def inverse_map(source, target) -> mx.array:
    """The row of ``source`` holding each ``target`` row, -1 where none does
    (``lookup_coords(source, target)``)."""
    return lookup_coords(source, target)


__all__ = [
    "CoordinateSet",
    "contains_coords",
    "downsample_coords",
    "intersection_coords",
    "inverse_map",
    "lookup_coords",
    "union_coords",
]
