"""Coordinate-set functions: downsampling, set operations, lookups, Morton order.

Every function takes (N, 4) int32 ``(batch, x, y, z)`` arrays (or a SparseTensor,
whose cached hash table is then reused) and runs in the native core: a hash table
on packed keys, memory proportional to N, never a dense grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from lattice import _ext
from lattice.core._checks import coords_array, int_triple
from lattice.core.buffers import CountedRows
from lattice.core.tensor import SparseTensor
from lattice.routing.coords import CoordinateRequest, route_coordinates
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.registry import dispatch


@dataclass(frozen=True)
class CoordinateSet(CountedRows):
    """A coordinate set: ``coords`` (N, 4) int32 and the count of live rows, ``active_rows``
    (given as an int; held as the documented int32 ``(1,)`` array; ``active_count`` and
    ``len()`` are the int)."""

    coords: mx.array
    active_rows: mx.array
    _count: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._count_rows()


def _route(op: str, x):
    """The route of a coordinate function (the CPU hash table or the Morton kernel): asking
    keeps the decision in the routing layer, where ``lattice explain`` and GPU routes find it."""
    n = x.active_count if isinstance(x, SparseTensor) else len(x) if isinstance(x, CoordinateSet) else -1
    return route_coordinates(CoordinateRequest(op, n))


def _rows(x, op: str, name: str) -> mx.array:
    if isinstance(x, SparseTensor):
        return x.coords[: x.active_count]
    if isinstance(x, CoordinateSet):
        return x.coords[: len(x)]
    return coords_array(x, op, name)


def _table(x, route, op: str, name: str = "coords"):
    """The table of a SparseTensor (its manager's, cached) or of coordinates (built by ``route``)."""
    if isinstance(x, SparseTensor):
        return x.coord_manager.table(x.coord_key)
    return dispatch(route, _rows(x, op, name), op)


def _coords(x, route, op: str, name: str = "coords") -> mx.array:
    """The rows of ``x`` in the form ``route`` reads them (the Morton functions: the rows
    themselves)."""
    return dispatch(route, _rows(x, op, name), op)


def _queries(x, op: str, name: str) -> mx.array:
    """Rows looked up in a table (not a set: they may repeat)."""
    return _rows(x, op, name)


def _set(table) -> CoordinateSet:
    return CoordinateSet(table.coords, table.size)


def _one(x, req):
    """``lattice explain`` of a coordinate function of one set: ``x``."""
    return (x,), {}


def _two(x, req):
    """... of two sets: ``x`` and every other row of it."""
    n = len(x)
    return (x, CoordinateSet(x.coords[:n:2], (n + 1) // 2)), {}


def _stride_example(x, req):
    return (x,), {"stride": req.stride}


def _plan(op: str, x, run) -> CallPlan:
    """The plan of a coordinate function of ``x``: its route, then ``run(route)`` (the route
    builds the tables of both operands of a two-set function)."""
    route = _route(op, x)
    return CallPlan(route, lambda: run(route))


@explainable(example=_stride_example, returns=CoordinateSet)
def downsample_coords(coords, stride=2) -> CallPlan:
    """``unique(floor(coords / stride))`` per batch, rows in first-occurrence order."""
    op = "downsample_coords"
    stride = int_triple(stride, "stride", op, minimum=1)
    return _plan(op, coords, lambda r: _set(_ext.downsample(_table(coords, r, op), stride)[0]))


@explainable(example=_two, returns=CoordinateSet)
def union_coords(lhs, rhs) -> CallPlan:
    """Rows of ``lhs`` in order, then the rows of ``rhs`` not in ``lhs``."""
    op = "union_coords"
    return _plan(op, lhs, lambda r: _set(_ext.union(_table(lhs, r, op, "lhs"), _table(rhs, r, op, "rhs"))))


@explainable(example=_two, returns=CoordinateSet)
def intersection_coords(lhs, rhs) -> CallPlan:
    """Rows of ``lhs`` (in order) that are also in ``rhs``."""
    op = "intersection_coords"

    def run(r) -> CoordinateSet:
        lt = _table(lhs, r, op, "lhs")
        rows = _ext.intersection_rows(lt, _table(rhs, r, op, "rhs"))
        return CoordinateSet(lt.coords[rows], int(rows.shape[0]))

    return _plan(op, lhs, run)


def _lookup(coords, queries, route, op: str) -> mx.array:
    return _ext.lookup(_table(coords, route, op), _queries(queries, op, "queries"))


@explainable(example=_two, returns=mx.array)
def lookup_coords(coords, queries) -> CallPlan:
    """Row of each query in ``coords`` (int32), -1 where absent."""
    return _plan("lookup_coords", coords, lambda r: _lookup(coords, queries, r, "lookup_coords"))


@explainable(example=_two, returns=mx.array)
def contains_coords(coords, queries) -> CallPlan:
    """Whether each query is in ``coords`` (bool)."""
    return _plan("contains_coords", coords, lambda r: _lookup(coords, queries, r, "contains_coords") >= 0)


@explainable(example=_two, returns=mx.array)
def inverse_map(source, target) -> CallPlan:
    """For each row of ``source``, the row of ``target`` covering it (-1 where none).

    When both are SparseTensors at different levels, source coordinates are
    mapped to the target's level first (``floor(c * source.stride / target.stride)``,
    the target stride a multiple of the source stride) — the map from fine rows to
    the coarse rows they were pooled into.
    """
    op = "inverse_map"
    queries = _queries(source, op, "source")
    if isinstance(source, SparseTensor) and isinstance(target, SparseTensor):
        if source.stride != target.stride:
            ratio = []
            for s, t in zip(source.stride, target.stride, strict=True):
                if t % s:
                    raise ValueError(
                        f"[{op}] target stride {target.stride} must be a multiple of source "
                        f"stride {source.stride}"
                    )
                ratio.append(t // s)
            r = mx.array([1, *ratio], dtype=mx.int32)
            queries = mx.floor_divide(queries, r)
    return _plan(op, target, lambda r: _ext.lookup(_table(target, r, op, "target"), queries))


@explainable(example=_one, returns=mx.array)
def morton_codes(coords) -> CallPlan:
    """63-bit Morton (z-order) codes of xyz, uint64 ``(N,)``; xyz must lie in [-2^20, 2^20)."""
    return _plan("morton_codes", coords, lambda r: _ext.morton_codes(_coords(coords, r, "morton_codes")))


@explainable(example=_one, returns=mx.array)
def morton_order(coords) -> CallPlan:
    """Permutation (int32) sorting rows by batch, then Morton code (stable)."""
    return _plan("morton_order", coords, lambda r: _ext.morton_order(_coords(coords, r, "morton_order")))


@explainable(example=_one, returns=tuple[mx.array, mx.array])
def morton_sort_coords(coords) -> CallPlan:
    """``(sorted_coords, order)``: rows sorted by batch then Morton code."""

    def run(r) -> tuple[mx.array, mx.array]:
        c = _coords(coords, r, "morton_sort_coords")
        order = _ext.morton_order(c)
        return c[order], order

    return _plan("morton_sort_coords", coords, run)


def batch_counts_of(coords, batch_size: int | None = None) -> mx.array:
    """Rows per batch index (int32)."""
    b = np.asarray(_queries(coords, "batch_counts", "coords")[:, 0])
    return mx.array(np.bincount(b, minlength=batch_size or 0).astype(np.int32))
