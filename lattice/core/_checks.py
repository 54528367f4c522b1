"""Argument normalisation and validation shared by the semantic layer.

Errors follow the house style: ``[op] what was wrong: the values``.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import numpy as np

from lattice.errors import DTypeError

Triple = tuple[int, int, int]


def dtype_name(dtype: mx.Dtype) -> str:
    """'float32' for mx.float32: the name routes, requests and errors use."""
    return str(dtype).removeprefix("mlx.core.")


def host_array(value, dtype=None, mx_dtype: mx.Dtype | None = None) -> mx.array:
    """A NumPy-convertible value (``dtype``: a NumPy dtype to convert to first) as an
    ``mx.array`` (of ``mx_dtype`` where given: MLX makes float32 of float64 otherwise), through
    a C-contiguous copy where needed: MLX 0.32.4 refuses any NumPy array with a negative
    stride — a reversed view such as ``points[::-1]``, even one row of it, which NumPy calls
    contiguous ("Cannot convert DLPack arrays with negative strides")."""
    arr = np.ascontiguousarray(value, dtype=dtype)
    if any(s < 0 for s in arr.strides):
        arr = arr.copy()
    return mx.array(arr) if mx_dtype is None else mx.array(arr, dtype=mx_dtype)


def int_triple(value: int | Sequence[int], name: str, op: str, *, minimum: int | None = None) -> Triple:
    """Normalises an int or a length-3 sequence of ints to a triple."""
    if type(value) is tuple and len(value) == 3 and type(value[0]) is type(value[1]) is type(value[2]) is int:
        out = value  # already a triple (most calls: strides and sizes passed on)
    elif isinstance(value, bool):
        raise TypeError(f"[{op}] {name} must be an int or 3 ints, got {value!r}")
    elif isinstance(value, (int, np.integer)):
        out = (int(value),) * 3
    else:
        try:
            items = list(value)
        except TypeError:
            raise TypeError(f"[{op}] {name} must be an int or 3 ints, got {value!r}") from None
        if len(items) != 3 or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in items
        ):
            raise ValueError(f"[{op}] {name} must be an int or 3 ints, got {value!r}")
        out = tuple(int(v) for v in items)
    if minimum is not None and min(out) < minimum:
        rule = "positive" if minimum == 1 else f">= {minimum}"
        raise ValueError(f"[{op}] {name} must be {rule}, got {out}")
    return out  # type: ignore[return-value]


def float_triple(value: float | Sequence[float], name: str, op: str, *, positive: bool = False):
    """Normalises a float or a length-3 sequence of floats to a triple of finite floats."""
    arr = np.asarray(value, dtype=np.float64).reshape(-1)
    if arr.size == 1:
        arr = np.repeat(arr, 3)
    if arr.size != 3:
        raise ValueError(f"[{op}] {name} must be a number or 3 numbers, got {value!r}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"[{op}] {name} must be finite, got {tuple(arr.tolist())}")
    if positive and np.any(arr <= 0):
        raise ValueError(f"[{op}] {name} must be positive, got {tuple(arr.tolist())}")
    return tuple(float(v) for v in arr)


COORD_DTYPES = (mx.int32, mx.int64)


def validate_coords(coords: mx.array, *, name: str = "coords") -> None:
    """Checks that ``coords`` is a batched coordinate array: ``(N, 4)``, int32 or int64.

    Raises ValueError ``"[validate_coords] {name} must have shape (N, 4). ..."`` or
    ``"... {name} must be int32 or int64. ..."`` (with the shape or dtype it got), and
    TypeError when ``coords`` is not an ``mx.array``. Returns None; the array is not
    converted (``coords_array`` is the converting form the ops use).
    """
    op = "validate_coords"
    if not isinstance(coords, mx.array):
        raise TypeError(f"[{op}] {name} must be an mx.array, got {type(coords).__name__}")
    if coords.ndim != 2 or coords.shape[1] != 4:
        raise ValueError(f"[{op}] {name} must have shape (N, 4). Got {tuple(coords.shape)}.")
    if coords.dtype not in COORD_DTYPES:
        raise ValueError(f"[{op}] {name} must be int32 or int64. Got {dtype_name(coords.dtype)}.")


def validate_coord_pair(
    lhs: mx.array, rhs: mx.array, *, lhs_name: str = "lhs", rhs_name: str = "rhs"
) -> None:
    """``validate_coords`` of both arrays, which must also share a dtype (ValueError
    ``"... coordinate arrays must have matching dtype. ..."`` otherwise). Returns None."""
    validate_coords(lhs, name=lhs_name)
    validate_coords(rhs, name=rhs_name)
    if lhs.dtype != rhs.dtype:
        raise ValueError(
            f"[validate_coord_pair] coordinate arrays must have matching dtype. Got {lhs_name} "
            f"{dtype_name(lhs.dtype)} and {rhs_name} {dtype_name(rhs.dtype)}."
        )


def coords_array(coords, op: str, name: str = "coords") -> mx.array:
    """Returns coordinates as an (N, 4) int32 mx.array, checking rank, width and dtype."""
    if not isinstance(coords, mx.array):
        arr = np.asarray(coords)
        if arr.dtype.kind not in "iu" and arr.size > 0:
            raise DTypeError(f"[{op}] {name} must hold integers, got dtype {arr.dtype}")
        if arr.size == 0:
            arr = arr.reshape(0, 4) if arr.ndim != 2 else arr
        if arr.size > 0 and (arr.min() < np.iinfo(np.int32).min or arr.max() > np.iinfo(np.int32).max):
            raise ValueError(f"[{op}] {name} values must fit int32")
        coords = host_array(arr, np.int32)
    if coords.ndim != 2 or coords.shape[1] != 4:
        raise ValueError(
            f"[{op}] {name} must have shape (N, 4) as (batch, x, y, z), got {tuple(coords.shape)}"
        )
    if coords.dtype != mx.int32:
        if not mx.issubdtype(coords.dtype, mx.integer):
            raise DTypeError(f"[{op}] {name} must be int32, got {coords.dtype}")
        if coords.size > 0 and coords.dtype in (mx.int64, mx.uint32, mx.uint64):
            # a cast would wrap silently; these dtypes can hold values past int32
            lo, hi = mx.min(coords).item(), mx.max(coords).item()
            if lo < np.iinfo(np.int32).min or hi > np.iinfo(np.int32).max:
                raise ValueError(f"[{op}] {name} values must fit int32, got {lo}..{hi}")
        coords = coords.astype(mx.int32)
    return coords
