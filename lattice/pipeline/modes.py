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
    order = np.lexsort((values, rows))
    r, v, c = rows[order], values[order], counts[order]
    if len(r) == 0:
        return r, v, c
    start = np.ones(len(r), bool)
    start[1:] = (r[1:] != r[:-1]) | (v[1:] != v[:-1])
    idx = np.flatnonzero(start)
    return r[idx], v[idx], np.add.reduceat(c, idx)


class ModeAccumulator:
    """Counts of values per voxel for one categorical column (see the module docs)."""

    def __init__(self, dtype: np.dtype):
        kind = np.dtype(dtype).kind
        self._dtype = np.dtype(np.float64) if kind == "f" else np.dtype(np.int64)
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._size = 0

    def add(self, rows: np.ndarray, values: np.ndarray, num_voxels: int) -> None:
        """Count ``values`` (one per point) onto the voxel ``rows`` of the same points."""
        part = _pairs(np.asarray(rows, np.int64), np.asarray(values).astype(self._dtype, copy=False))
        self._parts.append(part)
        self._size += len(part[0])
        if self._size > 2 * max(num_voxels, 1) and len(self._parts) > 1:
            self._compact()

    def _compact(self) -> None:
        r, v, c = (np.concatenate(a) for a in zip(*self._parts, strict=True))
        self._parts = [_pairs(r, v, c)]
        self._size = len(self._parts[0][0])

    def result(self, num_voxels: int) -> np.ndarray:
        """``(num_voxels,)`` float64: each voxel's most frequent value (ties: the smallest)."""
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
