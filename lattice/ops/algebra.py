"""Sparse tensor algebra: elementwise ops with joins on coordinates, concatenation,
alignment and reindexing, and the ``+ - *`` operators of SparseTensor.

Output rows: ``outer`` = union (lhs rows in order, then rhs-only rows in rhs order),
``inner`` = intersection in lhs order, ``left`` = lhs rows, ``right`` = rhs rows.
Which rows meet is a route (``lattice.routing.features``: ``cpu.same_support`` where the
operands hold the same coordinates — same manager and key, or equal rows: a plain
elementwise op, the result keeps the key — else ``cpu.hash_join`` in the native hash
tables); features move through MLX ops (take, where, concatenate), so autodiff works.
Importing this module attaches ``+ - *`` (and friends) to SparseTensor.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import mlx.core as mx
import numpy as np

from lattice.backends.cpu.joins import Join
from lattice.core._checks import coords_array
from lattice.core.coordsets import CoordinateSet
from lattice.core.tensor import SparseTensor
from lattice.ops.features import active_feats, with_feats
from lattice.ops.tensors import (
    check_choice,
    check_fill,
    check_tensors,
    declared_batch_size,
    new_tensor,
)
from lattice.routing import requested_device
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.features import JoinRequest, route_join
from lattice.routing.registry import dispatch

JOINS = ("inner", "left", "right", "outer")
NAMED_OPS: dict[str, Callable[[mx.array, mx.array], mx.array]] = {
    "add": mx.add,
    "sub": mx.subtract,
    "mul": mx.multiply,
    "maximum": mx.maximum,
    "minimum": mx.minimum,
}
BinaryOp = str | Callable[[mx.array, mx.array], mx.array]


# ---- the join: its route, the rows of each operand ------------------------------------------


def join_plan(
    tensors: Sequence[SparseTensor], join: str, op: str, finish: Callable[[Join], object]
) -> CallPlan:
    """The plan of a join of ``tensors``: its route (same support, or the native hash join),
    then ``finish(join)`` on the rows the route's implementation matched."""
    first = tensors[0]
    req = JoinRequest(
        op,
        join,
        len(tensors),
        tuple(t.run_rows for t in tensors),
        all(first.same_rows(t) for t in tensors[1:]),
        requested_device(None),
    )
    route = route_join(req)
    return CallPlan(route, lambda: finish(dispatch(route, tensors, join)))


def _pair_example(x, req):
    """``lattice explain`` of a join: ``x`` and a tensor on every other row of it (another
    support, so the route matches rows)."""
    n = x.active_count
    other = SparseTensor(x.coords[:n:2], x.feats[:n:2], x.stride)
    return (x, other), {}


def _binary_example(x, req):
    (a, b), _ = _pair_example(x, req)
    return (a, b, "add"), {}


def _cat_example(x, req):
    (a, b), _ = _pair_example(x, req)
    return ([a, b],), {}


def take_rows(feats: mx.array, rows: None | int | mx.array, m: int, fill) -> mx.array:
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


def _output(plan: Join, feats: mx.array, tensors: Sequence[SparseTensor], op: str) -> SparseTensor:
    if plan.keep is not None:
        return with_feats(plan.keep, feats)
    first = tensors[0]
    return new_tensor(
        plan.coords, feats, first.stride, first.coord_manager, op, declared_batch_size(tensors), plan.table
    )


# ---- binary ops ---------------------------------------------------------------------------


def _binary(op: str, lhs, rhs, fn: BinaryOp, join: str, lhs_fill, rhs_fill) -> CallPlan:
    check_tensors((lhs, rhs), ("lhs", "rhs"), op)
    check_choice(join, "join", JOINS, op)
    lhs_fill, rhs_fill = check_fill(lhs_fill, "lhs_fill", op), check_fill(rhs_fill, "rhs_fill", op)
    if isinstance(fn, str):
        check_choice(fn, "op", tuple(NAMED_OPS), op)
        if lhs.channels != rhs.channels and 1 not in (lhs.channels, rhs.channels):
            raise ValueError(f"[{op}] channels differ: lhs has {lhs.channels}, rhs has {rhs.channels}")
        fn = NAMED_OPS[fn]
    elif not callable(fn):
        raise TypeError(f"[{op}] op must be a callable or one of {tuple(NAMED_OPS)}, got {fn!r}")

    def finish(plan: Join) -> SparseTensor:
        m = int(plan.coords.shape[0])
        a = take_rows(active_feats(lhs), plan.rows[0], m, lhs_fill)
        b = take_rows(active_feats(rhs), plan.rows[1], m, rhs_fill)
        y = fn(a, b)
        if not isinstance(y, mx.array) or y.ndim != 2 or y.shape[0] != m:
            shape = tuple(y.shape) if isinstance(y, mx.array) else type(y).__name__
            raise ValueError(f"[{op}] op must return ({m}, C) features, got {shape}")
        return _output(plan, y, (lhs, rhs), op)

    return join_plan((lhs, rhs), join, op, finish)


@explainable(example=_binary_example, returns=SparseTensor)
def sparse_binary(
    lhs: SparseTensor,
    rhs: SparseTensor,
    op: BinaryOp,
    *,
    join: str = "outer",
    lhs_fill: float = 0.0,
    rhs_fill: float = 0.0,
) -> CallPlan:
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
    ) -> CallPlan:
        return _binary(name, lhs, rhs, op, join, lhs_fill, rhs_fill)

    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = doc
    return explainable(example=_pair_example, returns=SparseTensor)(fn)


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


@explainable(example=_cat_example, returns=SparseTensor)
def cat(tensors: Sequence[SparseTensor], *, join: str = "inner") -> CallPlan:
    """Features concatenated along channels over aligned coordinates (missing rows read 0).

    ``join``: 'inner' (common rows, first tensor's order), 'outer' (union in order of
    appearance), 'left' (the first tensor's rows), 'right' (the last tensor's rows).
    """
    op = "cat"
    if isinstance(tensors, SparseTensor) or not isinstance(tensors, Sequence) or not tensors:
        raise ValueError(f"[{op}] tensors must be a non-empty sequence of SparseTensors")
    tensors = list(tensors)
    check_tensors(tensors, [f"tensors[{i}]" for i in range(len(tensors))], op)
    check_choice(join, "join", JOINS, op)

    def finish(plan: Join) -> SparseTensor:
        m = int(plan.coords.shape[0])
        parts = [take_rows(active_feats(t), r, m, 0) for t, r in zip(tensors, plan.rows, strict=True)]
        return _output(plan, mx.concatenate(parts, axis=1), tensors, op)

    return join_plan(tensors, join, op, finish)


@explainable(example=_pair_example, returns=tuple[SparseTensor, SparseTensor])
def align_sparse(lhs: SparseTensor, rhs: SparseTensor, *, join: str = "outer", fill: float = 0.0) -> CallPlan:
    """``(lhs', rhs')`` on the coordinates chosen by ``join``, sharing one key; missing rows = fill."""
    op = "align_sparse"
    check_tensors((lhs, rhs), ("lhs", "rhs"), op)
    check_choice(join, "join", JOINS, op)
    fill = check_fill(fill, "fill", op)

    def finish(plan: Join) -> tuple[SparseTensor, SparseTensor]:
        m = int(plan.coords.shape[0])
        out_l = _output(plan, take_rows(active_feats(lhs), plan.rows[0], m, fill), (lhs, rhs), op)
        return out_l, with_feats(out_l, take_rows(active_feats(rhs), plan.rows[1], m, fill))

    return join_plan((lhs, rhs), join, op, finish)


@explainable(example=_pair_example, returns=SparseTensor)
def reindex_sparse(input: SparseTensor, target, *, fill: float = 0.0) -> CallPlan:
    """Features of ``input`` on the rows of ``target``; rows absent from ``input`` read ``fill``.

    ``target`` is a SparseTensor (the result keeps its rows, order, key and manager;
    its stride must equal input's) or an ``(M, 4)`` coordinate array / CoordinateSet
    at input's level (the result gets a new key in input's manager). The rows meet in a
    right join (``target``'s rows).
    """
    op = "reindex_sparse"
    check_tensors((input,), ("input",), op)
    fill = check_fill(fill, "fill", op)
    if isinstance(target, SparseTensor):
        check_tensors((input, target), ("input", "target"), op)
    else:
        if isinstance(target, CoordinateSet):
            target = target.coords[: len(target)]
        coords = coords_array(target, op, "target")
        empty = mx.zeros((int(coords.shape[0]), 0), dtype=input.dtype)
        target = new_tensor(
            coords, empty, input.stride, input.coord_manager, op, declared_batch_size([input])
        )

    def finish(plan: Join) -> SparseTensor:
        return with_feats(target, take_rows(active_feats(input), plan.rows[0], target.run_rows, fill))

    return join_plan((input, target), "right", op, finish)


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


def _and(self, other):
    """``x & y``: the intersection product ``sparse_mul(x, y)`` (SparseTensor operands only)."""
    return sparse_mul(self, other) if isinstance(other, SparseTensor) else NotImplemented


SparseTensor.__and__ = _and
SparseTensor.__neg__ = lambda self: with_feats(self, -active_feats(self))
SparseTensor.__array_ufunc__ = None  # NumPy defers to the reflected operators above
del _name, _sparse_fn, _fn, _reverse
