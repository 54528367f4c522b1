"""The per-voxel mode of categorical attributes, streamed chunk by chunk.

Every chunk gives, for each point, its voxel row (``VoxelAccumulator.last_rows``) and its
value; the chunk is reduced to ``(row, value, count)`` triples (one per distinct pair) and
kept. Triples of all chunks are merged whenever they outgrow the voxels seen so far, so
memory stays about the number of distinct (voxel, value) pairs — a few per voxel for class
ids — not the number of points. ``result`` picks, for every voxel, the value with the most
points, ties to the smallest value; NaN values are not counted (a voxel whose points are
all NaN gives NaN).
"""

from __future__ import annotations

import numpy as np


def _pairs(rows: np.ndarray, values: np.ndarray, counts: np.ndarray | None = None):
    """Distinct ``(row, value)`` pairs of the inputs with their summed counts, sorted by row then value."""
    if counts is None:
        counts = np.ones(len(rows), np.int64)
    if values.dtype.kind == "f":
        keep = ~np.isnan(values)
        if not keep.all():
            rows, values, counts = rows[keep], values[keep], counts[keep]
    order = _order(rows, values)
    r, v, c = rows[order], values[order], counts[order]
    if len(r) == 0:
        return r, v, c
    start = np.ones(len(r), bool)
    start[1:] = (r[1:] != r[:-1]) | (v[1:] != v[:-1])
    idx = np.flatnonzero(start)
    return r[idx], v[idx], np.add.reduceat(c, idx)


def _order(rows: np.ndarray, values: np.ndarray) -> np.ndarray:
    """The permutation sorting the pairs by row, then value: one int64 key sort for small-range
    integers (class ids), else a two-key lexsort."""
    if len(rows) and values.dtype.kind in "iu":
        lo, hi = int(values.min()), int(values.max())
        span = hi - lo + 1
        if span <= 1 << 20 and int(rows.max()) < (1 << 62) // span:
            return np.argsort(rows * span + (values - lo), kind="stable")
    return np.lexsort((values, rows))


_DENSE_SPAN = 256  # class ids in a range this small are counted in a dense (voxel, value) table
_DENSE_CELLS = 1 << 26  # ... while the table stays under 64 Mi cells (256 MiB of int32)


class ModeAccumulator:
    """Counts of values per voxel for one categorical column (see the module docs).

    Integer values in a small range (class ids, return numbers, flags) are counted in a dense
    ``(voxels, range)`` int32 table with one ``bincount`` per chunk; anything else (wide
    ranges, floats, or a table that would grow too large) as sorted (row, value, count) pairs.
    """

    def __init__(self, dtype: np.dtype):
        kind = np.dtype(dtype).kind
        self._dtype = np.dtype(np.float64) if kind == "f" else np.dtype(np.int64)
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._size = 0
        self._dense: np.ndarray | None = None  # (voxels, span) counts of value lo + j
        self._lo = 0
        self._sparse = kind == "f"

    def add(self, rows: np.ndarray, values: np.ndarray, num_voxels: int) -> None:
        """Count ``values`` (one per point) onto the voxel ``rows`` of the same points."""
        rows = np.asarray(rows, np.int64)
        values = np.asarray(values).astype(self._dtype, copy=False)
        if not self._sparse and len(values) and self._add_dense(rows, values, num_voxels):
            return
        part = _pairs(rows, values)
        self._parts.append(part)
        self._size += len(part[0])
        if self._size > 2 * max(num_voxels, 1) and len(self._parts) > 1:
            self._compact()

    def _add_dense(self, rows: np.ndarray, values: np.ndarray, num_voxels: int) -> bool:
        lo, hi = int(values.min()), int(values.max())
        if self._dense is None:
            self._lo, span = lo, hi - lo + 1
            if span > _DENSE_SPAN:
                self._sparse = True
                return False
            self._dense = np.zeros((0, span), np.int32)
        span = self._dense.shape[1]
        if lo < self._lo or hi >= self._lo + span or num_voxels * span > _DENSE_CELLS:
            self._to_sparse()
            return False
        if len(self._dense) < num_voxels:  # grow geometrically, rows of new voxels start at 0
            grown = np.zeros((max(num_voxels, 2 * len(self._dense)), span), np.int32)
            grown[: len(self._dense)] = self._dense
            self._dense = grown
        flat = rows * span + (values - self._lo)
        counts = np.bincount(flat, minlength=num_voxels * span)[: num_voxels * span]
        self._dense[:num_voxels] += counts.reshape(num_voxels, span).astype(np.int32)
        return True

    def _to_sparse(self) -> None:
        """Hand the dense counts over to the pair representation (from here on)."""
        self._sparse = True
        if self._dense is None:
            return
        r, j = np.nonzero(self._dense)
        self._parts.append(
            (r.astype(np.int64), (j + self._lo).astype(np.int64), self._dense[r, j].astype(np.int64))
        )
        self._size += len(r)
        self._dense = None

    def _compact(self) -> None:
        r, v, c = (np.concatenate(a) for a in zip(*self._parts, strict=True))
        self._parts = [_pairs(r, v, c)]
        self._size = len(self._parts[0][0])

    def result(self, num_voxels: int) -> np.ndarray:
        """``(num_voxels,)`` float64: each voxel's most frequent value (ties: the smallest)."""
        if self._dense is not None and not self._parts:
            table = self._dense[:num_voxels]
            out = (table.argmax(axis=1) + self._lo).astype(np.float64)  # argmax: the first, smallest value
            if len(table) < num_voxels:
                out = np.concatenate([out, np.full(num_voxels - len(table), np.nan)])
            out[: len(table)][table.max(axis=1, initial=0) == 0] = np.nan
            self._dense = None
            return out
        self._to_sparse()
        out = np.full(num_voxels, np.nan)
        if not self._parts:
            return out
        self._compact()
        r, v, c = self._parts[0]
        self._parts = []
        order = np.lexsort((v, -c, r))  # per row: most points first, then the smallest value
        r, v = r[order], v[order]
        first = np.ones(len(r), bool)
        first[1:] = r[1:] != r[:-1]
        out[r[first]] = v[first]
        return out


def mode_reference(rows: np.ndarray, values: np.ndarray, num_voxels: int) -> np.ndarray:
    """The same mode computed point by point in Python (slow; for tests)."""
    out = np.full(num_voxels, np.nan)
    best: dict[int, dict] = {}
    for r, v in zip(rows.tolist(), values.tolist(), strict=True):
        if isinstance(v, float) and v != v:
            continue
        best.setdefault(r, {}).setdefault(v, 0)
        best[r][v] += 1
    for r, counts in best.items():
        top = max(counts.values())
        out[r] = min(v for v, n in counts.items() if n == top)
    return out


__all__ = ["ModeAccumulator", "mode_reference"]
