"""Sparse tensor algebra: elementwise ops with joins on coordinates, concatenation,
alignment, reindexing, pruning, cropping and batch collation.

Output rows: ``outer`` = union (lhs rows in order, then rhs-only rows in rhs order),
``inner`` = intersection in lhs order, ``left`` = lhs rows, ``right`` = rhs rows.
Operands that hold the same coordinates (same manager and key, or equal rows) take
an identity fast path: a plain elementwise op, and the result keeps the key. Row
matching runs in the native hash table (union / intersection / lookup); features
move through MLX ops (take, where, concatenate, scatter-add), so autodiff works.
Importing this module attaches ``+ - *`` (and friends) to SparseTensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from lattice import _ext
from lattice.core._checks import coords_array, int_triple
from lattice.core.coordinates import CoordinateManager
from lattice.core.coordsets import CoordinateSet
from lattice.core.points import SparseQuantization
from lattice.core.tensor import SparseTensor
from lattice.ops.features import active_feats, with_feats
from lattice.ops.points import voxelize_features

JOINS = ("inner", "left", "right", "outer")
REDUCTIONS = ("none", "mean")
NAMED_OPS: dict[str, Callable[[mx.array, mx.array], mx.array]] = {
    "add": mx.add,
    "sub": mx.subtract,
    "mul": mx.multiply,
    "maximum": mx.maximum,
    "minimum": mx.minimum,
}
BinaryOp = str | Callable[[mx.array, mx.array], mx.array]


# ---- planning: output coordinates and the source row of every output row ------------------


@dataclass(frozen=True)
class _Plan:
    """Output coordinates of a join and, per operand, where each output row comes from.

    ``rows[i]`` is None when operand i's rows are the output rows (identity), an int
    ``n`` when its rows are the first ``n`` output rows and the rest are missing (the
    first operand of an outer join), else an int32 array of source rows (-1 = missing).
    ``keep`` is the operand whose key the output keeps (its rows are the output rows).
    ``table`` is the native table of ``coords`` when the join built one (outer joins).
    """

    coords: mx.array
    rows: tuple[None | int | mx.array, ...]
    keep: SparseTensor | None
    table: object = None


def _run_coords(x: SparseTensor) -> mx.array:
    """The coordinates of ``x.run_rows`` (a lazily counted set's whole buffer: its spare rows
    hold batch index -1, so a lookup never finds them and a join gives them the fill)."""
    n = x.run_rows
    return x.coords if n == x.capacity else x.coords[:n]


def _table(x: SparseTensor):
    return x.coord_manager.table(x.coord_key)


def _check_tensors(tensors: Sequence, names: Sequence[str], op: str) -> None:
    for t, name in zip(tensors, names, strict=True):
        if not isinstance(t, SparseTensor):
            raise TypeError(f"[{op}] {name} must be a SparseTensor, got {type(t).__name__}")
    first = tensors[0]
    for t, name in zip(tensors[1:], names[1:], strict=True):
        if t.stride != first.stride:
            raise ValueError(f"[{op}] strides differ: {names[0]} {first.stride}, {name} {t.stride}")


def _check_choice(value, name: str, choices: tuple[str, ...], op: str) -> None:
    if value not in choices:
        raise ValueError(f"[{op}] {name} must be one of {choices}, got {value!r}")


def _check_fill(value, name: str, op: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"[{op}] {name} must be a number, got {value!r}")
    return value


def _plan(tensors: Sequence[SparseTensor], join: str) -> _Plan:
    first, last = tensors[0], tensors[-1]
    if all(first.same_coords(t) for t in tensors[1:]):
        if all(t.run_rows == first.run_rows for t in tensors):
            return _Plan(_run_coords(first), (None,) * len(tensors), first)
        n = first.active_count  # one set, lazily counted in some operands: their live rows
        return _Plan(first.coords[:n], (n,) * len(tensors), first)
    keep: SparseTensor | None = None
    if join in ("left", "right"):
        keep = first if join == "left" else last
        coords = _run_coords(keep)
    elif join == "inner":
        table, coords = _table(first), _run_coords(first)
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
        coords = _run_coords(first)
    rows: list[None | int | mx.array] = []
    for t in tensors:
        if t is keep:
            rows.append(None)
        elif join == "outer" and t is first:
            rows.append(first.active_count)
        else:
            rows.append(_ext.lookup(_table(t), coords))
    return _Plan(coords, tuple(rows), keep, table if join == "outer" else None)


def _take(feats: mx.array, rows: None | int | mx.array, m: int, fill) -> mx.array:
    """Features of each output row: a source row, or ``fill`` where the row is missing."""
    if rows is None:
        return feats
    c = feats.shape[1]
    if isinstance(rows, int):
        return mx.concatenate([feats[:rows], mx.full((m - rows, c), fill, dtype=feats.dtype)], axis=0)
    if feats.shape[0] == 0:
        return mx.full((m, c), fill, dtype=feats.dtype)
    gathered = mx.take(feats, mx.maximum(rows, 0), axis=0)
    return mx.where((rows >= 0)[:, None], gathered, mx.array(fill, dtype=feats.dtype))


def _declared_batch_size(tensors: Sequence[SparseTensor]) -> int | None:
    declared = [t.batch_size for t in tensors if t._batch_counts is not None]
    return max(declared) if declared else None


def _new_tensor(
    coords, feats, stride, manager: CoordinateManager, op: str, batch_size=None, table=None
) -> SparseTensor:
    """A tensor on new coordinates inserted into ``manager`` (duplicates raise ``[op] ...``);
    a native ``table`` already built for ``coords`` by a join or dedup is adopted as it is."""
    key = manager.insert(coords, stride, op=op) if table is None else manager.adopt(table, stride)
    counts = None
    if batch_size is not None:
        counts = np.bincount(np.asarray(coords[:, 0]), minlength=batch_size)
    return SparseTensor(coords, feats, stride, coord_key=key, coord_manager=manager, batch_counts=counts)


def _output(plan: _Plan, feats: mx.array, tensors: Sequence[SparseTensor], op: str) -> SparseTensor:
    if plan.keep is not None:
        return with_feats(plan.keep, feats)
    first = tensors[0]
    return _new_tensor(
        plan.coords, feats, first.stride, first.coord_manager, op, _declared_batch_size(tensors), plan.table
    )


# ---- binary ops ---------------------------------------------------------------------------


def _binary(op: str, lhs, rhs, fn: BinaryOp, join: str, lhs_fill, rhs_fill) -> SparseTensor:
    _check_tensors((lhs, rhs), ("lhs", "rhs"), op)
    _check_choice(join, "join", JOINS, op)
    lhs_fill, rhs_fill = _check_fill(lhs_fill, "lhs_fill", op), _check_fill(rhs_fill, "rhs_fill", op)
    if isinstance(fn, str):
        _check_choice(fn, "op", tuple(NAMED_OPS), op)
        if lhs.channels != rhs.channels and 1 not in (lhs.channels, rhs.channels):
            raise ValueError(f"[{op}] channels differ: lhs has {lhs.channels}, rhs has {rhs.channels}")
        fn = NAMED_OPS[fn]
    elif not callable(fn):
        raise TypeError(f"[{op}] op must be a callable or one of {tuple(NAMED_OPS)}, got {fn!r}")
    plan = _plan((lhs, rhs), join)
    m = int(plan.coords.shape[0])
    a = _take(active_feats(lhs), plan.rows[0], m, lhs_fill)
    b = _take(active_feats(rhs), plan.rows[1], m, rhs_fill)
    y = fn(a, b)
    if not isinstance(y, mx.array) or y.ndim != 2 or y.shape[0] != m:
        shape = tuple(y.shape) if isinstance(y, mx.array) else type(y).__name__
        raise ValueError(f"[{op}] op must return ({m}, C) features, got {shape}")
    return _output(plan, y, (lhs, rhs), op)


def sparse_binary(
    lhs: SparseTensor,
    rhs: SparseTensor,
    op: BinaryOp,
    *,
    join: str = "outer",
    lhs_fill: float = 0.0,
    rhs_fill: float = 0.0,
) -> SparseTensor:
    """``op(lhs, rhs)`` on the rows chosen by ``join``; a missing side reads its fill value.

    ``op`` is one of 'add', 'sub', 'mul', 'maximum', 'minimum' or a callable on two
    ``(M, C)`` arrays returning ``(M, C')``. Strides must match; operands may come
    from different managers (the result lives in lhs's manager, or rhs's for 'right').
    """
    return _binary("sparse_binary", lhs, rhs, op, join, lhs_fill, rhs_fill)


def _binary_op(name: str, op: str, join: str, doc: str):
    """The named elementwise op ``name`` (``_binary`` with ``op`` and a default ``join``)."""

    def fn(
        lhs: SparseTensor,
        rhs: SparseTensor,
        *,
        join: str = join,
        lhs_fill: float = 0.0,
        rhs_fill: float = 0.0,
    ) -> SparseTensor:
        return _binary(name, lhs, rhs, op, join, lhs_fill, rhs_fill)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return fn


sparse_add = _binary_op(
    "sparse_add", "add", "outer", "``lhs + rhs`` (outer join by default: the union, missing rows read 0)."
)
sparse_sub = _binary_op("sparse_sub", "sub", "outer", "``lhs - rhs`` (outer join by default).")
sparse_mul = _binary_op(
    "sparse_mul", "mul", "inner", "``lhs * rhs`` (inner join by default: the intersection in lhs order)."
)
sparse_maximum = _binary_op(
    "sparse_maximum", "maximum", "inner", "Elementwise maximum (inner join by default)."
)
sparse_minimum = _binary_op(
    "sparse_minimum", "minimum", "inner", "Elementwise minimum (inner join by default)."
)


# ---- concatenation, alignment, reindexing --------------------------------------------------


def cat(tensors: Sequence[SparseTensor], *, join: str = "inner") -> SparseTensor:
    """Features concatenated along channels over aligned coordinates (missing rows read 0).

    ``join``: 'inner' (common rows, first tensor's order), 'outer' (union in order of
    appearance), 'left' (the first tensor's rows), 'right' (the last tensor's rows).
    """
    op = "cat"
    if isinstance(tensors, SparseTensor) or not isinstance(tensors, Sequence) or not tensors:
        raise ValueError(f"[{op}] tensors must be a non-empty sequence of SparseTensors")
    tensors = list(tensors)
    _check_tensors(tensors, [f"tensors[{i}]" for i in range(len(tensors))], op)
    _check_choice(join, "join", JOINS, op)
    plan = _plan(tensors, join)
    m = int(plan.coords.shape[0])
    parts = [_take(active_feats(t), r, m, 0) for t, r in zip(tensors, plan.rows, strict=True)]
    return _output(plan, mx.concatenate(parts, axis=1), tensors, op)


def align_sparse(
    lhs: SparseTensor, rhs: SparseTensor, *, join: str = "outer", fill: float = 0.0
) -> tuple[SparseTensor, SparseTensor]:
    """``(lhs', rhs')`` on the coordinates chosen by ``join``, sharing one key; missing rows = fill."""
    op = "align_sparse"
    _check_tensors((lhs, rhs), ("lhs", "rhs"), op)
    _check_choice(join, "join", JOINS, op)
    fill = _check_fill(fill, "fill", op)
    plan = _plan((lhs, rhs), join)
    m = int(plan.coords.shape[0])
    out_l = _output(plan, _take(active_feats(lhs), plan.rows[0], m, fill), (lhs, rhs), op)
    return out_l, with_feats(out_l, _take(active_feats(rhs), plan.rows[1], m, fill))


def reindex_sparse(input: SparseTensor, target, *, fill: float = 0.0) -> SparseTensor:
    """Features of ``input`` on the rows of ``target``; rows absent from ``input`` read ``fill``.

    ``target`` is a SparseTensor (the result keeps its rows, order, key and manager;
    its stride must equal input's) or an ``(M, 4)`` coordinate array / CoordinateSet
    at input's level (the result gets a new key in input's manager).
    """
    op = "reindex_sparse"
    _check_tensors((input,), ("input",), op)
    fill = _check_fill(fill, "fill", op)
    feats = active_feats(input)
    if isinstance(target, SparseTensor):
        _check_tensors((input, target), ("input", "target"), op)
        if input.same_coords(target):
            return with_feats(target, feats[: target.run_rows])
        rows = _ext.lookup(_table(input), _run_coords(target))
        return with_feats(target, _take(feats, rows, target.run_rows, fill))
    if isinstance(target, CoordinateSet):
        target = target.coords[: target.active_rows]
    coords = coords_array(target, op, "target")
    rows = _ext.lookup(_table(input), coords)
    out = _take(feats, rows, int(coords.shape[0]), fill)
    return _new_tensor(coords, out, input.stride, input.coord_manager, op, _declared_batch_size([input]))


# ---- row selection --------------------------------------------------------------------------


def prune(x: SparseTensor, rows) -> SparseTensor:
    """The rows ``rows`` (int indices into the active rows, in the given order); a new key in x's manager."""
    op = "prune"
    _check_tensors((x,), ("x",), op)
    if not isinstance(rows, mx.array):
        arr = np.asarray(rows)
        rows = mx.array(arr.astype(np.int32) if arr.size == 0 else arr)
    if rows.ndim != 1 or not mx.issubdtype(rows.dtype, mx.integer):
        raise ValueError(
            f"[{op}] rows must be a 1-D integer array, got shape {tuple(rows.shape)} {rows.dtype}"
        )
    n = x.active_count
    if rows.size:
        lo, hi = int(mx.min(rows).item()), int(mx.max(rows).item())
        if lo < 0 or hi >= n:
            raise ValueError(f"[{op}] rows must be in [0, {n}), got values from {lo} to {hi}")
    rows = rows.astype(mx.int32)
    coords = _run_coords(x)[rows]
    feats = mx.take(active_feats(x), rows, axis=0)
    return _new_tensor(coords, feats, x.stride, x.coord_manager, op, _declared_batch_size([x]))


def prune_mask(x: SparseTensor, mask) -> SparseTensor:
    """The rows where the boolean ``mask`` (one entry per active row) is True, in order."""
    op = "prune_mask"
    _check_tensors((x,), ("x",), op)
    m = np.asarray(mask)
    if m.dtype != np.bool_ or m.shape != (x.active_count,):
        raise ValueError(f"[{op}] mask must be bool of shape ({x.active_count},), got {m.shape} {m.dtype}")
    return prune(x, np.flatnonzero(m).astype(np.int32))


def crop(x: SparseTensor, *, min_coord, max_coord) -> SparseTensor:
    """The rows with ``min_coord <= xyz <= max_coord`` on every axis (lattice units at x's level)."""
    op = "crop"
    _check_tensors((x,), ("x",), op)
    lo, hi = int_triple(min_coord, "min_coord", op), int_triple(max_coord, "max_coord", op)
    if any(a > b for a, b in zip(lo, hi, strict=True)):
        raise ValueError(f"[{op}] min_coord must be <= max_coord on every axis, got {lo} and {hi}")
    xyz = x.coords[: x.active_count, 1:]
    inside = mx.all((xyz >= mx.array(lo, dtype=mx.int32)) & (xyz <= mx.array(hi, dtype=mx.int32)), axis=1)
    return prune_mask(x, np.asarray(inside))


def replace_feature(x: SparseTensor, feats) -> SparseTensor:
    """``x``'s coordinates (same key) with new features, one row per active (or allocated) row."""
    op = "replace_feature"
    _check_tensors((x,), ("x",), op)
    feats = feats if isinstance(feats, mx.array) else mx.array(np.asarray(feats))
    if feats.ndim != 2 or feats.shape[0] not in (x.active_count, x.capacity):
        raise ValueError(f"[{op}] feats must have shape ({x.active_count}, C), got {tuple(feats.shape)}")
    return x.replace(feats=feats) if feats.shape[0] == x.capacity else with_feats(x, feats)


# ---- building tensors from per-sample coordinates -------------------------------------------


def _build(
    coords: mx.array, feats: mx.array, stride, reduction: str, batch_size: int, op: str
) -> SparseTensor:
    stride = int_triple(stride, "stride", op, minimum=1)
    _check_choice(reduction, "duplicate_reduction", REDUCTIONS, op)
    batch = np.asarray(coords[:, 0])
    if batch.size and batch.min() < 0:
        raise ValueError(f"[{op}] batch indices must be non-negative, got {int(batch.min())}")
    manager = CoordinateManager()
    if reduction == "none":
        return _new_tensor(coords, feats, stride, manager, op, batch_size)
    table, inverse, counts = _ext.unique_coords(coords)
    q = SparseQuantization(table.coords, table.size, inverse, counts, table)
    return _new_tensor(
        table.coords, voxelize_features(feats, q, "mean"), stride, manager, op, batch_size, table
    )


def _feature_array(feats, rows: int, op: str, name: str) -> mx.array:
    feats = feats if isinstance(feats, mx.array) else mx.array(np.asarray(feats))
    if feats.ndim != 2 or feats.shape[0] != rows:
        raise ValueError(f"[{op}] {name} must have shape ({rows}, C), got {tuple(feats.shape)}")
    return feats


def sparse_collate(
    coords_list: Sequence, feats_list: Sequence, *, stride=1, duplicate_reduction: str = "none"
) -> SparseTensor:
    """One batched SparseTensor from per-sample ``(n_i, 3)`` integer coords and ``(n_i, C)`` feats.

    Sample ``i`` gets batch index ``i`` (empty samples count as members). Duplicate
    coordinates within a sample are an error with 'none' and averaged with 'mean'.
    """
    op = "sparse_collate"
    if len(coords_list) != len(feats_list) or not coords_list:
        raise ValueError(
            f"[{op}] coords_list and feats_list must be non-empty and of equal length, got "
            f"{len(coords_list)} and {len(feats_list)}"
        )
    parts, fparts = [], []
    for i, (c, f) in enumerate(zip(coords_list, feats_list, strict=True)):
        if not isinstance(c, mx.array):
            arr = np.asarray(c)
            c = mx.array(arr.reshape(-1, 3).astype(np.int32) if arr.size == 0 else arr)
        if c.ndim != 2 or c.shape[1] != 3 or not mx.issubdtype(c.dtype, mx.integer):
            raise ValueError(
                f"[{op}] coords_list[{i}] must be integer (n, 3), got {tuple(c.shape)} {c.dtype}"
            )
        f = _feature_array(f, int(c.shape[0]), op, f"feats_list[{i}]")
        if fparts and f.shape[1] != fparts[0].shape[1]:
            raise ValueError(
                f"[{op}] feats_list[{i}] has {f.shape[1]} channels, feats_list[0] has {fparts[0].shape[1]}"
            )
        parts.append(
            mx.concatenate([mx.full((c.shape[0], 1), i, dtype=mx.int32), c.astype(mx.int32)], axis=1)
        )
        fparts.append(f)
    coords = mx.concatenate(parts, axis=0)
    return _build(coords, mx.concatenate(fparts, axis=0), stride, duplicate_reduction, len(parts), op)


def sparse_from_coordinates(
    coords, feats, *, stride=1, batch_counts=None, duplicate_reduction: str = "none"
) -> SparseTensor:
    """A SparseTensor from ``(N, 4)`` (batch, x, y, z) coords and ``(N, C)`` feats.

    ``batch_counts`` (rows per member of the input, optional) is checked and fixes
    the batch size (trailing empty members). Duplicates: error ('none') or mean.
    """
    op = "sparse_from_coordinates"
    coords = coords_array(coords, op)
    feats = _feature_array(feats, int(coords.shape[0]), op, "feats")
    batch_size = None
    if batch_counts is not None:
        given = np.asarray(batch_counts, dtype=np.int64).reshape(-1)
        actual = np.bincount(np.maximum(np.asarray(coords[:, 0]), 0), minlength=given.size)
        if actual.size != given.size or not np.array_equal(actual, given):
            raise ValueError(
                f"[{op}] batch_counts {given.tolist()} do not match the rows per batch {actual.tolist()}"
            )
        batch_size = int(given.size)
    return _build(coords, feats, stride, duplicate_reduction, batch_size, op)


# ---- operators on SparseTensor ----------------------------------------------------------------


def _feature_op(name: str, fn: Callable, x: SparseTensor, other, reverse: bool = False):
    if isinstance(other, np.ndarray):
        other = mx.array(other)
    if isinstance(other, bool) or not isinstance(other, (int, float, mx.array)):
        return NotImplemented
    feats = active_feats(x)
    shape = tuple(other.shape) if isinstance(other, mx.array) else ()
    error = ValueError(
        f"[SparseTensor.{name}] operand of shape {shape} does not broadcast to the "
        f"features {tuple(feats.shape)}"
    )
    try:
        y = fn(other, feats) if reverse else fn(feats, other)
    except ValueError as e:
        raise error from e
    if y.ndim != 2 or y.shape[0] != feats.shape[0]:
        raise error
    return with_feats(x, y)


def _operator(name: str, sparse_fn: Callable | None, fn: Callable, reverse: bool = False) -> Callable:
    def method(self, other):
        if sparse_fn is not None and isinstance(other, SparseTensor):
            return sparse_fn(self, other)
        return _feature_op(name, fn, self, other, reverse)

    method.__name__ = name
    method.__doc__ = (
        f"``{name}``: a SparseTensor operand joins on coordinates, a number or array acts on feats."
    )
    return method


for _name, _sparse_fn, _fn, _reverse in (
    ("__add__", sparse_add, mx.add, False),
    ("__sub__", sparse_sub, mx.subtract, False),
    ("__mul__", sparse_mul, mx.multiply, False),
    ("__truediv__", None, mx.divide, False),
    ("__radd__", None, mx.add, True),
    ("__rsub__", None, mx.subtract, True),
    ("__rmul__", None, mx.multiply, True),
):
    setattr(SparseTensor, _name, _operator(_name, _sparse_fn, _fn, _reverse))
SparseTensor.__neg__ = lambda self: with_feats(self, -active_feats(self))
SparseTensor.__array_ufunc__ = None  # NumPy defers to the reflected operators above
del _name, _sparse_fn, _fn, _reverse
