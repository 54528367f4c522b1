"""Fixed-capacity results: a buffer of ``capacity`` rows whose first rows are live.

The occupancy and alignment records (``lattice.core.occupancy``,
``lattice.ops.alignment``) return, as the documented mlx-lattice API does, buffers whose
length is an upper bound known before the work runs (``8 N`` children, ``N_lhs + N_rhs``
rows of an outer join) and the live count as an int32 ``mx.array`` of shape ``(1,)``,
``active_rows``. Rows past the count are padding: 0 in coordinates, masks, parent rows
and child indices, -1 in gather rows. Counts and buffers stay lazy MLX arrays until
something reads them.
"""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np

from lattice.core._checks import DTypeError


def live_count(active_rows, capacity: int, op: str, name: str = "active_rows") -> int:
    """The live rows ``active_rows`` names in a buffer of ``capacity`` rows.

    None means every row; otherwise an int or a one-element integer array (shape ``(1,)``
    or ``()``, read once here). A count outside ``[0, capacity]`` is clamped to it, as the
    documented API reads ``min(active_rows, capacity)`` rows.
    """
    if active_rows is None:
        return capacity
    if isinstance(active_rows, bool):
        raise TypeError(f"[{op}] {name} must be an int or a (1,) int32 array, got {active_rows!r}")
    if isinstance(active_rows, (mx.array, np.ndarray)):
        arr = np.asarray(active_rows)
        if arr.size != 1 or arr.ndim > 1:
            raise ValueError(f"[{op}] {name} must have shape (1,) or (), got {tuple(arr.shape)}")
        if arr.dtype.kind not in "iu":
            raise DTypeError(f"[{op}] {name} must be an integer array, got {active_rows.dtype}")
        value = int(arr.reshape(()))
    elif isinstance(active_rows, (int, np.integer)):
        value = int(active_rows)
    else:
        raise TypeError(
            f"[{op}] {name} must be an int or a (1,) int32 array, got {type(active_rows).__name__}"
        )
    return min(max(value, 0), capacity)


def checked_count(active_rows, n: int, op: str) -> int:
    """The value of a caller's live-row count (an int, or an integer array of one element,
    read once here), which must lie in ``[0, n]`` (``live_count`` clamps instead, as the
    documented fixed-capacity builders do)."""
    if isinstance(active_rows, mx.array):
        if active_rows.size != 1 or not mx.issubdtype(active_rows.dtype, mx.integer):
            raise ValueError(
                f"[{op}] active_rows must be an int32 array of shape (1,), got "
                f"{active_rows.dtype} {tuple(active_rows.shape)}"
            )
        active_rows = active_rows.item()
    if isinstance(active_rows, bool) or not isinstance(active_rows, (int, np.integer)):
        raise TypeError(f"[{op}] active_rows must be an int or an int32 array, got {active_rows!r}")
    if not 0 <= active_rows <= n:
        raise ValueError(f"[{op}] active_rows must be in [0, {n}], got {active_rows}")
    return int(active_rows)


def count_array(n) -> mx.array:
    """A live count as the documented ``active_rows``: int32, shape ``(1,)`` (``n`` an int or a
    lazy scalar array)."""
    if isinstance(n, mx.array):
        return n.astype(mx.int32).reshape(1)
    return mx.array([n], dtype=mx.int32)


def arange(start: int, stop: int | None = None, step: int = 1, dtype: mx.Dtype = mx.int32) -> mx.array:
    """``mx.arange`` over ints, safe to read back when empty. MLX 0.32.4's CUDA backend gives an
    evaluated empty ``arange`` no buffer, and reading it (``np.asarray``, the native core)
    crashes the process (seen on the H200: ``np.asarray(mx.arange(0))`` is a segmentation
    fault); an empty range is ``mx.zeros((0,), dtype)`` here. lattice makes its index ranges
    with this function only (``tests/test_empty_ranges.py`` checks the sources)."""
    if stop is None:
        start, stop = 0, start
    if len(range(int(start), int(stop), int(step))) == 0:
        return mx.zeros((0,), dtype=dtype)
    return mx.arange(start, stop, step, dtype=dtype)


def padded(a: mx.array, capacity: int, fill: int = 0) -> mx.array:
    """``a`` (rows first) extended with ``fill`` rows to ``capacity`` rows."""
    short = capacity - int(a.shape[0])
    if short <= 0:
        return a
    return mx.concatenate([a, mx.full((short, *a.shape[1:]), fill, dtype=a.dtype)], axis=0)


def row_array(value, op: str, name: str, rows: int | None = None) -> mx.array:
    """A one-dimensional integer array (of ``rows`` entries where given) as int32."""
    if not isinstance(value, mx.array):
        arr = np.asarray(value)
        value = mx.array(arr.astype(np.int32) if arr.size == 0 else arr)
    if value.ndim != 1 or not mx.issubdtype(value.dtype, mx.integer):
        raise ValueError(
            f"[{op}] {name} must be a 1-D integer array, got shape {tuple(value.shape)} {value.dtype}"
        )
    if rows is not None and value.shape[0] != rows:
        raise ValueError(f"[{op}] {name} must have {rows} entries (one per row), got {value.shape[0]}")
    return value.astype(mx.int32)


class FixedCapacity:
    """Members of a fixed-capacity record (a dataclass with ``coords`` and ``active_rows``):
    ``capacity``, the buffer rows, and ``active_count``, the live count."""

    coords: mx.array
    active_rows: mx.array

    @property
    def capacity(self) -> int:
        """Rows of the buffers (live rows and padding)."""
        return int(self.coords.shape[0])

    @property
    def active_count(self) -> mx.array:
        """The live count: ``active_rows`` itself, the lazy ``(1,)`` int32 array (the documented
        API's member; ``int(record.active_count)`` reads it)."""
        return self.active_rows

    def _check(self, rows: dict[str, mx.Dtype]) -> None:
        """Validates the record: ``coords`` (N, 4) int32 / int64, ``active_rows`` (1,) int32,
        and each field of ``rows`` of shape (N,) and its dtype."""
        op = type(self).__name__
        c = self.coords
        if (
            not isinstance(c, mx.array)
            or c.ndim != 2
            or c.shape[1] != 4
            or c.dtype not in (mx.int32, mx.int64)
        ):
            got = f"{tuple(c.shape)} {c.dtype}" if isinstance(c, mx.array) else type(c).__name__
            raise ValueError(f"[{op}] coords must be an (N, 4) int32 or int64 mx.array, got {got}")
        a = self.active_rows
        if not isinstance(a, mx.array) or a.shape != (1,) or a.dtype != mx.int32:
            got = f"{tuple(a.shape)} {a.dtype}" if isinstance(a, mx.array) else type(a).__name__
            raise ValueError(f"[{op}] active_rows must be a (1,) int32 mx.array, got {got}")
        n = c.shape[0]
        for field in dataclasses.fields(self):
            if field.name not in rows:
                continue
            v = getattr(self, field.name)
            if not isinstance(v, mx.array) or v.shape != (n,) or v.dtype != rows[field.name]:
                got = f"{tuple(v.shape)} {v.dtype}" if isinstance(v, mx.array) else type(v).__name__
                raise ValueError(
                    f"[{op}] {field.name} must be a ({n},) {rows[field.name]} mx.array, got {got}"
                )


class CountedRows:
    """Mixin of the frozen result records whose rows are all live when they are made
    (``CoordinateSet``, ``SparseQuantization``): built with the count as an int (or a
    one-element array), they hold it as the documented int32 ``(1,)`` ``active_rows`` and
    keep the int as ``active_count``, so no op reads the array back."""

    def _count_rows(self) -> None:
        n = live_count(self.active_rows, int(self.coords.shape[0]), type(self).__name__)
        object.__setattr__(self, "_count", n)
        object.__setattr__(self, "active_rows", count_array(n))

    @property
    def capacity(self) -> int:
        """Rows of the buffers."""
        return int(self.coords.shape[0])

    @property
    def active_count(self) -> int:
        """The live rows (the int of ``active_rows``)."""
        return self._count

    def __len__(self) -> int:
        return self._count


def start(*arrays: mx.array) -> None:
    """Queue ``arrays`` for evaluation now (``mx.async_eval``), so the device computes them
    while Python builds what comes next instead of waiting for the whole graph. Inside a
    graph transformation (``mx.grad``, ``mx.compile``, ``mx.vmap``) MLX refuses
    ``async_eval``; they then evaluate with the rest, as without it. Empty arrays are left
    to evaluate with the rest too (MLX 0.32.4's CUDA backend mishandles evaluated empty
    results: ``arange``)."""
    queued = [a for a in arrays if a.size]
    if not queued:
        return
    try:
        mx.async_eval(*queued)
    except ValueError:  # inside a graph transformation
        pass
