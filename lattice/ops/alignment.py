"""Alignment records: the rows of a join as data (``SparseAlignment``), and the ops on them.

A join of two coordinate sets (``inner`` / ``left`` / ``right`` / ``outer``, the rows and
order of ``lattice.ops.algebra``) as a fixed-capacity record: the output ``coords``,
``active_rows`` (the live count, a ``(1,)`` int32 array) and, per output row, the row of
each side it comes from (``lhs_rows`` / ``rhs_rows``, -1 where that side lacks it). The
capacity is the upper bound of the join: the lhs buffer (``inner``, ``left``), the rhs
buffer (``right``) or both (``outer``); padding rows are 0 in ``coords``, -1 in the rows.

The record is made by the joins of sparse tensor algebra themselves (``algebra.join_plan``:
the same route, ``cpu.same_support`` or ``cpu.hash_join``, and its row maps), so an
alignment, ``cat`` and ``sparse_add`` of the same operands meet the same rows.
``gather_aligned_features`` reads features along one side's rows; ``sparse_cat_aligned``
concatenates both sides' on the alignment's rows (a tensor of the alignment's capacity).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from lattice.backends.cpu.joins import Join
from lattice.core._checks import coords_array, dtype_name
from lattice.core.buffers import FixedCapacity, arange, count_array, live_count, padded, row_array
from lattice.core.coordinates import CoordinateManager
from lattice.core.tensor import SparseTensor
from lattice.ops.algebra import JOINS, join_plan, take_rows
from lattice.ops.features import active_feats, with_feats
from lattice.ops.tensors import check_choice, check_fill, check_tensors, declared_batch_size, new_tensor
from lattice.routing import requested_device
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.features import RowwiseRequest, route_rowwise
from lattice.routing.registry import dispatch


@dataclass(frozen=True)
class SparseAlignment(FixedCapacity):
    """A join's output ``coords`` (N, 4), ``active_rows`` (1,) int32, and per row the lhs and
    rhs rows it comes from (``lhs_rows`` / ``rhs_rows``, (N,) int32, -1 where missing)."""

    coords: mx.array
    active_rows: mx.array
    lhs_rows: mx.array
    rhs_rows: mx.array

    def __post_init__(self) -> None:
        self._check({"lhs_rows": mx.int32, "rhs_rows": mx.int32})


def alignment_capacity(join: str, lhs_rows: int, rhs_rows: int) -> int:
    """Rows of an alignment's buffers: the most rows ``join`` can give."""
    return {"inner": lhs_rows, "left": lhs_rows, "right": rhs_rows, "outer": lhs_rows + rhs_rows}[join]


def _source_rows(rows: None | int | mx.array, m: int) -> mx.array:
    """A join's rows of one operand as an explicit int32 array of ``m`` entries."""
    if rows is None:  # its rows are the output rows
        return arange(m, dtype=mx.int32)
    if isinstance(rows, int):  # its rows are the first ``rows`` output rows
        return mx.concatenate([arange(rows, dtype=mx.int32), mx.full((m - rows,), -1, mx.int32)])
    return rows.astype(mx.int32)


def _record(plan: Join, capacity: int, dtype: mx.Dtype) -> SparseAlignment:
    m = int(plan.coords.shape[0])
    lhs, rhs = (padded(_source_rows(r, m), capacity, -1) for r in plan.rows)
    return SparseAlignment(padded(plan.coords, capacity).astype(dtype), count_array(m), lhs, rhs)


def _pair(x):
    n = x.active_count
    return x, SparseTensor(x.coords[:n:2], x.feats[:n:2], x.stride)


def _pair_example(x, req):
    """``lattice explain`` of an alignment: ``x`` and a tensor on every other row of it."""
    return _pair(x), {}


def _coords_example(x, req):
    a, b = _pair(x)
    return (a.coords[: a.active_count], None, b.coords, None), {}


def _gather_example(x, req):
    rows = arange(-1, x.active_count, dtype=mx.int32)  # a missing row, then every row
    return (x, rows), {}


@explainable(example=_coords_example, returns=SparseAlignment)
def build_sparse_alignment(
    lhs_coords, lhs_active_rows, rhs_coords, rhs_active_rows, *, join: str = "inner"
) -> CallPlan:
    """The ``join`` of two coordinate sets (their first ``*_active_rows`` rows) as a record.

    ``*_active_rows``: None (every row), an int or a (1,) int32 array. The live rows of each
    side must be unique, with batch indices >= 0 (a coordinate set). ``coords`` come back in
    ``lhs_coords``' dtype (int32 or int64; both sides must share it).
    """
    op = "build_sparse_alignment"
    check_choice(join, "join", JOINS, op)
    dtypes = [c.dtype for c in (lhs_coords, rhs_coords) if isinstance(c, mx.array)]
    if len(dtypes) == 2 and dtypes[0] != dtypes[1]:
        raise ValueError(
            f"[{op}] lhs_coords and rhs_coords must share a dtype, got {dtypes[0]} and {dtypes[1]}"
        )
    wide = isinstance(lhs_coords, mx.array) and lhs_coords.dtype == mx.int64
    dtype = mx.int64 if wide else mx.int32
    return _sets_plan(op, (lhs_coords, rhs_coords), (lhs_active_rows, rhs_active_rows), join, dtype)


def _sets_plan(op: str, coords, active, join: str, dtype: mx.Dtype) -> CallPlan:
    """The join plan of the live rows of two coordinate buffers, as two tensors of one new
    manager (a duplicate live row raises ``[op] ...``); the record has the buffers' capacity."""
    manager = CoordinateManager()
    sides, caps = [], []
    for c, n, name in zip(coords, active, ("lhs", "rhs"), strict=True):
        c = coords_array(c, op, f"{name}_coords")
        n = live_count(n, int(c.shape[0]), op, f"{name}_active_rows")
        sides.append(new_tensor(c[:n], mx.zeros((n, 0), mx.float32), 1, manager, op))
        caps.append(int(c.shape[0]))
    capacity = alignment_capacity(join, *caps)
    return join_plan(sides, join, op, lambda plan: _record(plan, capacity, dtype))


@explainable(example=_pair_example, returns=SparseAlignment)
def sparse_alignment(lhs: SparseTensor, rhs: SparseTensor, *, join: str = "inner") -> CallPlan:
    """The ``join`` of two tensors' coordinates as a ``SparseAlignment`` (their tables reused).

    ``lattice.ops.align_sparse`` gives the two aligned tensors instead; this gives the rows.
    """
    op = "sparse_alignment"
    check_tensors((lhs, rhs), ("lhs", "rhs"), op)
    check_choice(join, "join", JOINS, op)
    if lhs.lazy or rhs.lazy:  # a lazily counted buffer: the join of the live rows (counts read)
        counts = (lhs.active_count, rhs.active_count)
        return _sets_plan(op, (lhs.coords, rhs.coords), counts, join, mx.int32)
    capacity = alignment_capacity(join, lhs.capacity, rhs.capacity)
    return join_plan((lhs, rhs), join, op, lambda plan: _record(plan, capacity, mx.int32))


@explainable(example=_gather_example, returns=mx.array)
def gather_aligned_features(x, rows, *, fill: float = 0.0) -> CallPlan:
    """``x.feats[rows]`` with every channel of a row ``< 0`` set to ``fill``.

    ``x`` is a SparseTensor (its feature buffer) or an ``(N, C)`` array; ``rows`` a 1-D
    integer array (an alignment's ``lhs_rows`` / ``rhs_rows``), each below N.
    """
    op = "gather_aligned_features"
    if isinstance(x, SparseTensor):
        feats = x.feats
    elif isinstance(x, mx.array) and x.ndim == 2:
        feats = x
    else:
        raise TypeError(f"[{op}] x must be a SparseTensor or an (N, C) mx.array, got {type(x).__name__}")
    rows = row_array(rows, op, "rows")
    fill = check_fill(fill, "fill", op)
    if rows.size and int(mx.max(rows).item()) >= feats.shape[0]:
        raise ValueError(
            f"[{op}] rows must be below {feats.shape[0]} (x's rows), got {int(mx.max(rows).item())}"
        )
    m = int(rows.shape[0])
    route = route_rowwise(
        RowwiseRequest(op, dtype_name(feats.dtype), int(feats.shape[1]), requested_device(None))
    )
    return CallPlan(route, lambda: dispatch(route, lambda f: take_rows(f, rows, m, fill), feats))


def _aligned_tensor(plan: Join, feats: mx.array, capacity: int, tensors, op: str) -> SparseTensor:
    """A tensor on the join's rows with the alignment's capacity (rows past them padding)."""
    keep, first = plan.keep, tensors[0]
    if keep is not None and keep.lazy:  # a lazily counted set's buffer: keep its own layout
        return with_feats(keep, feats)
    m = int(plan.coords.shape[0])
    if keep is not None:
        manager, key = keep.coord_manager, keep.coord_key
    elif plan.table is not None:
        manager, key = first.coord_manager, first.coord_manager.adopt(plan.table, first.stride)
    else:
        manager, key = first.coord_manager, first.coord_manager.insert(plan.coords, first.stride, op=op)
    batch = declared_batch_size(tensors)
    counts = None if batch is None else np.bincount(np.asarray(plan.coords[:, 0]), minlength=batch)
    return SparseTensor(
        padded(plan.coords, capacity),
        padded(feats, capacity),
        first.stride,
        coord_key=key,
        coord_manager=manager,
        batch_counts=counts,
        active_rows=m,
    )


@explainable(example=_pair_example, returns=SparseTensor)
def sparse_cat_aligned(lhs: SparseTensor, rhs: SparseTensor, *, join: str = "inner") -> CallPlan:
    """lhs's then rhs's features on the rows ``join`` aligns (a missing side reads 0).

    Operands on one support give lhs's tensor with both features. Otherwise the result
    has the alignment's capacity (``alignment_capacity``; rows past its count are padding,
    ignored by every op) — ``cat([lhs, rhs], join=join)`` is the compact form.
    """
    op = "sparse_cat_aligned"
    check_tensors((lhs, rhs), ("lhs", "rhs"), op)
    check_choice(join, "join", JOINS, op)
    capacity = alignment_capacity(join, lhs.capacity, rhs.capacity)

    def finish(plan: Join) -> SparseTensor:
        m = int(plan.coords.shape[0])
        parts = [take_rows(active_feats(t), r, m, 0) for t, r in zip((lhs, rhs), plan.rows, strict=True)]
        feats = mx.concatenate(parts, axis=1)
        if all(r is None or isinstance(r, int) for r in plan.rows):  # one support: lhs's rows
            return with_feats(plan.keep, feats)
        return _aligned_tensor(plan, feats, capacity, (lhs, rhs), op)

    return join_plan((lhs, rhs), join, op, finish)


__all__ = [
    "SparseAlignment",
    "alignment_capacity",
    "build_sparse_alignment",
    "gather_aligned_features",
    "sparse_alignment",
    "sparse_cat_aligned",
]
