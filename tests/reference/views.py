"""Slow, obviously-correct oracles for the documented relation views and the integer
neighbour relations, in plain Python loops over the edges.

- ``csr``:            for every row ``r < n_rows``, the edge ids whose group is ``r``,
                      ascending;
- ``out_in_map``:     ``M[o, k] = i`` for every edge ``(i, o, k)``, -1 elsewhere;
- ``row_masks``:      bit ``k % 32`` of word ``k // 32`` where ``M[o, k] >= 0``, as int32;
- ``sorted_view``:    rows ordered by (mask as int32, row); tile ``t`` word ``w`` the OR of
                      the masks of sorted rows ``64 t + 16 w .. 64 t + 16 w + 15``;
- ``neighbors``:      per query, ``[(source row, squared distance)]`` of the same-batch
                      sources (brute force on the integer xyz), nearest first, ties by
                      row; ``k`` nearest, or within ``radius`` (``d2 <= radius²``);
- ``radius_capacity``: integer offsets with ``dx² + dy² + dz² <= radius²`` (at least 1).
"""

from __future__ import annotations

import math

import numpy as np


def csr(groups, n_rows: int) -> list[list[int]]:
    rows: list[list[int]] = [[] for _ in range(n_rows)]
    for e, g in enumerate(np.asarray(groups).reshape(-1).tolist()):
        rows[g].append(e)
    return rows


def assert_csr(view, groups, n_rows: int) -> None:
    """``view`` (a RelationCSRView) groups ``groups`` into ``n_rows`` rows as ``csr`` does."""
    offsets = np.asarray(view.row_offsets)
    ids = np.asarray(view.edge_ids)
    assert view.row_offsets.dtype.size == 4 and offsets.shape == (n_rows + 1,)
    assert ids.shape == (np.asarray(groups).size,)
    assert offsets[0] == 0 and np.all(np.diff(offsets) >= 0)
    for r, want in enumerate(csr(groups, n_rows)):
        assert ids[offsets[r] : offsets[r + 1]].tolist() == want, f"row {r}"


def out_in_map(in_rows, out_rows, kernel_ids, n_out: int, n_kernels: int) -> np.ndarray:
    m = np.full((n_out, n_kernels), -1, np.int64)
    for i, o, k in zip(*(np.asarray(a).tolist() for a in (in_rows, out_rows, kernel_ids)), strict=True):
        assert m[o, k] == -1, f"two edges for output row {o}, offset {k}"
        m[o, k] = i
    return m


def row_masks(m: np.ndarray) -> np.ndarray:
    n, k = m.shape
    words = (k + 31) // 32
    out = np.zeros((n, words), np.uint32)
    for o in range(n):
        for j in range(k):
            if m[o, j] >= 0:
                out[o, j // 32] |= np.uint32(1 << (j % 32))
    return out.view(np.int32)


def sorted_view(m: np.ndarray, masks: np.ndarray):
    """(reorder rows, sorted map, tile masks) of a one-word-per-row view."""
    n = m.shape[0]
    flat = masks[:, 0].astype(np.int64)
    order = sorted(range(n), key=lambda r: (flat[r], r))
    tiles = (n + 63) // 64
    tile_masks = []
    for t in range(tiles):
        for w in range(4):
            word = 0
            for j in range(16):
                row = 64 * t + 16 * w + j
                if row < n:
                    word |= int(flat[order[row]]) & 0xFFFFFFFF
            tile_masks.append(word)
    tm = np.array(tile_masks, np.uint64).astype(np.uint32).view(np.int32)
    return np.array(order, np.int64), m[order] if n else m, tm


def neighbors(source, query, *, k=None, radius=None, max_neighbors=None) -> list[list[tuple[int, int]]]:
    s = np.asarray(source, np.int64).reshape(-1, 4)
    q = np.asarray(query, np.int64).reshape(-1, 4)
    out = []
    for row in q:
        rows = np.nonzero(s[:, 0] == row[0])[0]
        d2 = ((s[rows, 1:] - row[1:]) ** 2).sum(axis=1)
        if radius is not None:
            keep = d2 <= radius * radius
            rows, d2 = rows[keep], d2[keep]
        ranked = np.lexsort((rows, d2))  # by distance, then by row
        cap = k if k is not None else max_neighbors
        if cap is not None:
            ranked = ranked[:cap]
        out.append([(int(rows[j]), int(d2[j])) for j in ranked])
    return out


def radius_capacity(radius: float) -> int:
    reach = math.ceil(radius)
    count = 0
    for dx in range(-reach, reach + 1):
        for dy in range(-reach, reach + 1):
            for dz in range(-reach, reach + 1):
                if dx * dx + dy * dy + dz * dz <= radius * radius:
                    count += 1
    return max(count, 1)
