"""Tensors from rows: row selection (prune, mask, crop, top-k rows), feature replacement, and
tensors built from per-sample coordinates (collate, from coordinates).

Each makes its output on a new coordinate set (hashed on the route of a new set,
``lattice.routing.coords``) or keeps the input's (``replace_feature``: the row-wise route);
``topk_rows`` chooses rows (their indices, for ``prune``) with MLX's ops on the row-wise
route. Every op is explainable: ``lattice.explain`` reports that route without building the set.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from lattice import _ext
from lattice.core._checks import DTypeError, coords_array, dtype_name, int_triple
from lattice.core.buffers import arange
from lattice.core.coordinates import CoordinateManager
from lattice.core.points import SparseQuantization
from lattice.core.tensor import SparseTensor
from lattice.ops.features import active_feats, rowwise_plan
from lattice.ops.points import voxelize_features
from lattice.routing import requested_device
from lattice.routing.coords import CoordinateRequest, route_coordinates
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.features import RowwiseRequest, route_rowwise
from lattice.routing.registry import dispatch

REDUCTIONS = ("none", "mean")


def check_tensors(tensors: Sequence, names: Sequence[str], op: str) -> None:
    for t, name in zip(tensors, names, strict=True):
        if not isinstance(t, SparseTensor):
            raise TypeError(f"[{op}] {name} must be a SparseTensor, got {type(t).__name__}")
    first = tensors[0]
    for t, name in zip(tensors[1:], names[1:], strict=True):
        if t.stride != first.stride:
            raise ValueError(f"[{op}] strides differ: {names[0]} {first.stride}, {name} {t.stride}")


def check_choice(value, name: str, choices: tuple[str, ...], op: str) -> None:
    if value not in choices:
        raise ValueError(f"[{op}] {name} must be one of {choices}, got {value!r}")


def check_fill(value, name: str, op: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"[{op}] {name} must be a number, got {value!r}")
    return value


def declared_batch_size(tensors: Sequence[SparseTensor]) -> int | None:
    declared = [t.batch_size for t in tensors if t._batch_counts is not None]
    return max(declared) if declared else None


def new_tensor(
    coords, feats, stride, manager: CoordinateManager, op: str, batch_size=None, table=None
) -> SparseTensor:
    """A tensor on new coordinates inserted into ``manager`` (duplicates raise ``[op] ...``);
    a native ``table`` already built for ``coords`` by a join or dedup is adopted as it is."""
    key = manager.insert(coords, stride, op=op) if table is None else manager.adopt(table, stride)
    counts = None
    if batch_size is not None:
        counts = np.bincount(np.asarray(coords[:, 0]), minlength=batch_size)
    return SparseTensor(coords, feats, stride, coord_key=key, coord_manager=manager, batch_counts=counts)


def new_set_plan(op: str, rows: int, make) -> CallPlan:
    """The plan of an op whose output is a new coordinate set of ``rows`` rows: the route
    ``CoordinateManager.insert`` takes for it (``new_set``), ``make()`` the output."""
    route = route_coordinates(CoordinateRequest(op, rows, requested_device(None), new_set=True))
    return CallPlan(route, make)


def _tensor_example(x, req):
    """``lattice explain`` of a row-selection op: every other active row of ``x``."""
    return (x, arange(0, x.active_count, 2, dtype=mx.int32)), {}


def _mask_example(x, req):
    return (x, np.arange(x.active_count) % 2 == 0), {}


def _crop_example(x, req):
    return (x,), {"min_coord": 0, "max_coord": 8}


def _topk_example(x, req):
    return (x, [x.active_count // 2] * x.batch_size), {}


def _replace_example(x, req):
    return (x, mx.zeros_like(x.feats[: x.active_count])), {}


def _collate_example(x, req):
    coords = x.coords[: x.active_count, 1:]
    feats = x.feats[: x.active_count]
    return ([coords, coords], [feats, feats]), {}


def _from_coordinates_example(x, req):
    return (x.coords[: x.active_count], x.feats[: x.active_count]), {}


# ---- row selection --------------------------------------------------------------------------


@explainable(example=_tensor_example, returns=SparseTensor)
def prune(x: SparseTensor, rows) -> CallPlan:
    """The rows ``rows`` (int indices into the active rows, in the given order); a new key in x's manager."""
    op = "prune"
    check_tensors((x,), ("x",), op)
    return _rows_plan(x, rows, op)


def _rows_plan(x: SparseTensor, rows, op: str) -> CallPlan:
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

    def make() -> SparseTensor:
        coords = x.coords[rows]  # rows < active_count: live rows
        feats = mx.take(active_feats(x), rows, axis=0)
        return new_tensor(coords, feats, x.stride, x.coord_manager, op, declared_batch_size([x]))

    return new_set_plan(op, int(rows.size), make)


@explainable(example=_mask_example, returns=SparseTensor)
def prune_mask(x: SparseTensor, mask) -> CallPlan:
    """The rows where the boolean ``mask`` is True, in order. ``mask`` has one entry per active
    row, or one per buffer row (``capacity``) with every row past the active ones False."""
    op = "prune_mask"
    check_tensors((x,), ("x",), op)
    m = np.asarray(mask)
    n = x.active_count
    if m.dtype != np.bool_ or m.shape not in ((n,), (x.capacity,)):
        raise ValueError(f"[{op}] mask must be bool of shape ({n},), got {m.shape} {m.dtype}")
    if m[n:].any():
        raise ValueError(f"[{op}] mask selects inactive rows (rows {n} and later of {x.capacity})")
    m = m[:n]
    return _rows_plan(x, np.flatnonzero(m).astype(np.int32), op)


@explainable(example=_crop_example, returns=SparseTensor)
def crop(x: SparseTensor, *, min_coord, max_coord) -> CallPlan:
    """The rows with ``min_coord <= xyz <= max_coord`` on every axis (lattice units at x's level)."""
    op = "crop"
    check_tensors((x,), ("x",), op)
    lo, hi = int_triple(min_coord, "min_coord", op), int_triple(max_coord, "max_coord", op)
    if any(a > b for a, b in zip(lo, hi, strict=True)):
        raise ValueError(f"[{op}] min_coord must be <= max_coord on every axis, got {lo} and {hi}")
    xyz = x.coords[: x.active_count, 1:]
    inside = mx.all((xyz >= mx.array(lo, dtype=mx.int32)) & (xyz <= mx.array(hi, dtype=mx.int32)), axis=1)
    return _rows_plan(x, np.flatnonzero(np.asarray(inside)).astype(np.int32), op)


@explainable(example=_topk_example, returns=mx.array)
def topk_rows(x: SparseTensor, counts, *, rho: float = 1.0) -> CallPlan:
    """Rows of the highest scores per batch member: the score is the first feature channel.

    Member ``b`` keeps ``k = min(int(int(counts[b]) * rho), rows of b)`` rows (none where
    ``k <= 0``), in ascending score order (ties: the later rows rank higher); members follow
    in batch order. Returns int32 row indices (for ``prune``). ``counts`` has one entry per
    batch member (``x.batch_size``); ``rho > 0`` scales it.
    """
    op = "topk_rows"
    check_tensors((x,), ("x",), op)
    if isinstance(rho, bool) or not isinstance(rho, (int, float, np.integer, np.floating)):
        raise TypeError(f"[{op}] rho must be a number, got {rho!r}")
    if not rho > 0:
        raise ValueError(f"[{op}] rho must be positive, got {rho}")
    keep = np.asarray(counts).reshape(-1)
    if keep.size and keep.dtype.kind not in "iuf":
        raise DTypeError(f"[{op}] counts must be numbers, got dtype {keep.dtype}")
    if keep.size != x.batch_size:
        raise ValueError(
            f"[{op}] counts must have one entry per batch member ({x.batch_size}), got {keep.size}"
        )
    members = x.batch_rows
    ks = [min(int(int(c) * rho), int(rows.shape[0])) for c, rows in zip(keep.tolist(), members, strict=True)]
    if any(k > 0 for k in ks) and x.channels == 0:
        raise ValueError(f"[{op}] x has no feature channel to score")

    def select(feats: mx.array) -> mx.array:
        parts = []
        for rows, k in zip(members, ks, strict=True):
            if k > 0:  # a stable ascending sort: the last k are the top k
                order = mx.argsort(mx.take(feats[:, 0], rows))
                parts.append(mx.take(rows, order[-k:]))
        return mx.concatenate(parts) if parts else mx.zeros((0,), mx.int32)

    feats = active_feats(x)
    route = route_rowwise(RowwiseRequest(op, dtype_name(feats.dtype), x.channels, requested_device(None)))
    return CallPlan(route, lambda: dispatch(route, select, feats))


@explainable(example=_replace_example, returns=SparseTensor)
def replace_feature(x: SparseTensor, feats) -> CallPlan:
    """``x``'s coordinates (same key) with new features, one row per active (or allocated) row."""
    op = "replace_feature"
    check_tensors((x,), ("x",), op)
    feats = feats if isinstance(feats, mx.array) else mx.array(np.asarray(feats))
    if feats.ndim != 2 or feats.shape[0] not in (x.active_count, x.capacity):
        raise ValueError(f"[{op}] feats must have shape ({x.active_count}, C), got {tuple(feats.shape)}")
    return rowwise_plan(x, op, lambda _: feats)  # the given rows replace the features


# ---- building tensors from per-sample coordinates -------------------------------------------


def _build(coords: mx.array, feats: mx.array, stride, reduction: str, batch_size: int, op: str) -> CallPlan:
    """The plan of a tensor on ``coords``: a new set (``none``: duplicates raise), or the
    native first-occurrence dedup with features averaged (``mean``; the CPU core's table)."""
    stride = int_triple(stride, "stride", op, minimum=1)
    check_choice(reduction, "duplicate_reduction", REDUCTIONS, op)
    batch = np.asarray(coords[:, 0])
    if batch.size and batch.min() < 0:
        raise ValueError(f"[{op}] batch indices must be non-negative, got {int(batch.min())}")
    manager = CoordinateManager()
    n = int(coords.shape[0])
    if reduction == "none":
        return new_set_plan(op, n, lambda: new_tensor(coords, feats, stride, manager, op, batch_size))
    route = route_coordinates(CoordinateRequest(op, n, requested_device(None)))

    def dedup() -> SparseTensor:
        table, inverse, counts = _ext.unique_coords(coords)  # cpu.hash_set: the native dedup
        q = SparseQuantization(table.coords, table.size, inverse, counts, table)
        return new_tensor(
            table.coords, voxelize_features(feats, q, "mean"), stride, manager, op, batch_size, table
        )

    return CallPlan(route, dedup)


def _feature_array(feats, rows: int, op: str, name: str) -> mx.array:
    feats = feats if isinstance(feats, mx.array) else mx.array(np.asarray(feats))
    if feats.ndim != 2 or feats.shape[0] != rows:
        raise ValueError(f"[{op}] {name} must have shape ({rows}, C), got {tuple(feats.shape)}")
    return feats


@explainable(example=_collate_example, returns=SparseTensor)
def sparse_collate(
    coords_list: Sequence, feats_list: Sequence, *, stride=1, duplicate_reduction: str = "none"
) -> CallPlan:
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


@explainable(example=_from_coordinates_example, returns=SparseTensor)
def sparse_from_coordinates(
    coords, feats, *, stride=1, batch_counts=None, duplicate_reduction: str = "none"
) -> CallPlan:
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
