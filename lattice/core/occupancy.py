"""Occupancy: a voxel set one level up, each parent with an 8-bit mask of its children.

The parent of ``(b, x, y, z)`` is ``(b, floor(x / 2), floor(y / 2), floor(z / 2))``; the
voxel is child ``k = (x & 1) + 2 (y & 1) + 4 (z & 1)`` of it and sets bit ``1 << k`` of
the parent's mask. ``occupancy_downsample`` gives the parents (first-occurrence order)
and their masks, ``occupancy_expand`` the children a mask names (parent by parent, child
ids ascending), ``child_coords_from_indices`` the child ``k`` of each parent row. With
``o = occupancy_downsample(c)``, ``occupancy_expand(o.coords, o.occupancy, o.active_rows)``
gives the set ``c`` back, grouped by parent.

Results are fixed-capacity records (``lattice.core.buffers``): ``N`` parent rows, ``8 N``
expanded rows, the live count as a ``(1,)`` int32 array, padding 0. Coordinates come back
int32. The downsample dedups in the native hash table (``cpu.hash_set``: first-occurrence
order, duplicate input rows allowed); masks, expansion and child coordinates are MLX ops.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from lattice import _ext
from lattice.core._checks import coords_array
from lattice.core.buffers import FixedCapacity, arange, count_array, live_count, padded, row_array
from lattice.routing.coords import CoordinateRequest, route_coordinates
from lattice.routing.explain import CallPlan, explainable

_BITS = arange(8, dtype=mx.int32)  # child ids


@dataclass(frozen=True)
class SparseOccupancy(FixedCapacity):
    """Parents and child masks: ``coords`` (N, 4), ``active_rows`` (1,) int32, ``occupancy``
    (N,) int32 (bit ``k`` set: child ``k`` is present)."""

    coords: mx.array
    active_rows: mx.array
    occupancy: mx.array

    def __post_init__(self) -> None:
        self._check({"occupancy": mx.int32})


@dataclass(frozen=True)
class OccupancyExpansion(FixedCapacity):
    """Children of masked parents: ``coords`` (8 N, 4), ``active_rows`` (1,) int32, and per
    row its ``parent_rows`` (row of the parent) and ``child_indices`` (its id 0..7), int32."""

    coords: mx.array
    active_rows: mx.array
    parent_rows: mx.array
    child_indices: mx.array

    def __post_init__(self) -> None:
        self._check({"parent_rows": mx.int32, "child_indices": mx.int32})


def child_index(coords: mx.array) -> mx.array:
    """``(x & 1) + 2 (y & 1) + 4 (z & 1)`` of each ``(b, x, y, z)`` row (int32)."""
    odd = mx.bitwise_and(coords[:, 1:], 1)
    return odd[:, 0] + 2 * odd[:, 1] + 4 * odd[:, 2]


def _children(parents: mx.array, ids: mx.array) -> mx.array:
    """Child ``ids[i]`` of parent row ``i``: ``2 * xyz + ((k >> axis) & 1)`` (low 3 bits of k)."""
    step = mx.bitwise_and(mx.right_shift(ids[:, None], mx.array([0, 1, 2], dtype=mx.int32)), 1)
    return mx.concatenate([parents[:, :1], 2 * parents[:, 1:] + step], axis=1)


def _coords_example(x, req):
    """``lattice explain`` of a function of a voxel set: ``x``'s live coordinates."""
    return (x.coords[: x.active_count],), {}


@explainable(example=_coords_example, returns=SparseOccupancy)
def occupancy_downsample(coords, active_rows=None) -> CallPlan:
    """The parents of the first ``active_rows`` rows of ``coords`` and their child masks.

    Parents are in order of first occurrence; the buffers keep ``coords``' length (rows past
    ``active_rows`` are padding, 0). ``active_rows``: None (every row), an int or a (1,)
    int32 array.
    """
    op = "occupancy_downsample"
    coords = coords_array(coords, op)
    cap = int(coords.shape[0])
    n = live_count(active_rows, cap, op)
    route = route_coordinates(CoordinateRequest(op, n))  # cpu.hash_set: the native dedup
    return CallPlan(route, lambda: _downsample(coords[:n], cap))


def _downsample(live: mx.array, cap: int) -> SparseOccupancy:
    table, inverse, _ = _ext.unique_coords(live)  # duplicates allowed: their bits OR
    parents, cell = _ext.downsample(table, (2, 2, 2))[:2]
    m = int(parents.size)
    if m == 0:
        return SparseOccupancy(padded(parents.coords[:0], cap), count_array(0), mx.zeros((cap,), mx.int32))
    slot = cell[inverse] * 8 + child_index(live)  # (parent, child) of each row
    seen = mx.zeros((m * 8,), dtype=mx.int32).at[slot].maximum(mx.ones_like(slot))
    masks = mx.sum(mx.left_shift(seen.reshape(m, 8), _BITS), axis=1).astype(mx.int32)
    return SparseOccupancy(padded(parents.coords[:m], cap), count_array(m), padded(masks, cap))


def occupancy_expand(coords, occupancy, active_rows=None) -> OccupancyExpansion:
    """The children the masks ``occupancy`` name, for the first ``active_rows`` parent rows.

    Row order: parent by parent, child ids ascending. The buffers hold ``8 N`` rows (N the
    rows of ``coords``); rows past the count are 0. Bits above 7 are ignored.
    """
    op = "occupancy_expand"
    coords = coords_array(coords, op)
    cap = int(coords.shape[0])
    masks = row_array(occupancy, op, "occupancy", cap)
    n = live_count(active_rows, cap, op)
    present = mx.bitwise_and(mx.right_shift(masks[:n, None], _BITS), 1).reshape(-1)  # (8 n,)
    # compaction by scatter: present row j goes to its rank, the others to a spare slot 8 cap
    rank = mx.cumsum(present) - 1
    slot = mx.where(present > 0, rank, 8 * cap)
    parent = mx.repeat(arange(n, dtype=mx.int32), 8)
    ids = mx.tile(_BITS, n)

    def compact(values: mx.array) -> mx.array:
        out = mx.zeros((8 * cap + 1, *values.shape[1:]), dtype=values.dtype)
        return out[: 8 * cap] if n == 0 else out.at[slot].add(values)[: 8 * cap]

    children = _children(mx.repeat(coords[:n], 8, axis=0), ids)
    return OccupancyExpansion(compact(children), count_array(mx.sum(present)), compact(parent), compact(ids))


def child_coords_from_indices(parent_coords, child_indices) -> mx.array:
    """Child ``child_indices[i]`` of each parent row ``i`` (int32 (N, 4); the low 3 bits of
    each index are read)."""
    op = "child_coords_from_indices"
    parents = coords_array(parent_coords, op, "parent_coords")
    ids = row_array(child_indices, op, "child_indices", int(parents.shape[0]))
    return _children(parents, ids)


__all__ = [
    "OccupancyExpansion",
    "SparseOccupancy",
    "child_coords_from_indices",
    "occupancy_downsample",
    "occupancy_expand",
]
