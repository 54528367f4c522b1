"""Slow, obviously-correct NumPy oracles for the pooling family (DESIGN.md section 3).

- :func:`local_pool` — dense-grid pooling restricted to the active outputs: each
  batch member's features are written into a dense grid over its bounding box; for
  every output ``o`` of ``unique(floor(c / stride))`` and every kernel offset ``k``
  the grid is read at ``o * stride + k * dilation - padding``; sum, mean over the
  present cells, or max (0 when no cell is present).
  :func:`local_pool_grad` — the gradient of ``sum(pool(x) * g)`` by the same walk;
  max sends each ``g[o, c]`` to the smallest input row among the tied maxima.
- :func:`contributor_average` — pool transpose: every coarse row ``s`` and offset
  ``k`` give a fine coordinate ``t = s * stride + k * dilation - padding``; a fine row
  is the mean of its contributors.
- :func:`trilinear` — ``sum w x / sum w`` with ``w = prod_a (1 - |t_a - c_a s_a| / s_a)``
  over the coarse rows ``c`` with ``|t_a - c_a s_a| < s_a`` on every axis.
- :func:`global_pool` — per batch member sum, mean (``sum / max(count, 1)``), max.
- :func:`window_map` — the rows of a set grouped by the cells of its downsample: cells
  in first-occurrence order, within a cell the rows by kernel offset
  ``k = (x mod s0 * s1 + y mod s1) * s2 + z mod s2``, written out row by row.

Outputs are ``(coords, feats)`` in float64 with coordinates sorted; :func:`align`
reorders them to the rows of a native result.
"""

from __future__ import annotations

import itertools

import numpy as np

from . import coords as rc
from .relations import kernel_offsets


def _t(v) -> tuple[int, int, int]:
    return rc._triple(v)


def align(native_coords, ref_coords, ref_feats) -> np.ndarray:
    """Reference rows in the order of ``native_coords`` (every native row must be in the reference)."""
    index = {tuple(r): i for i, r in enumerate(np.asarray(ref_coords).tolist())}
    rows = [index[tuple(r)] for r in np.asarray(native_coords).tolist()]
    c = np.asarray(ref_feats).shape[1] if np.asarray(ref_feats).ndim == 2 else 0
    return np.asarray(ref_feats)[rows] if rows else np.zeros((0, c))


def _sorted(coords: np.ndarray, feats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if len(coords) == 0:
        return coords.reshape(0, 4).astype(np.int32), feats
    order = np.lexsort(coords.T[::-1])
    return coords[order].astype(np.int32), feats[order]


# ---- local pooling: dense grid ------------------------------------------------------


class _Grid:
    """One batch member's rows on a dense grid over its bounding box (row -1 = empty)."""

    def __init__(self, xyz: np.ndarray, rows: np.ndarray) -> None:
        self.lo = xyz.min(axis=0)
        shape = xyz.max(axis=0) - self.lo + 1
        self.rows = np.full(tuple(shape), -1, np.int64)
        self.rows[tuple((xyz - self.lo).T)] = rows

    def lookup(self, pos: np.ndarray) -> np.ndarray:
        """Input row at each position (M, 3), -1 outside the box or at an empty cell."""
        p = pos - self.lo
        inside = np.all((p >= 0) & (p < np.array(self.rows.shape)), axis=1)
        out = np.full(len(pos), -1, np.int64)
        out[inside] = self.rows[tuple(p[inside].T)]
        return out


def _windows(coords, size, stride, padding, dilation):
    """Output coords (sorted) and the (M, K) input row of each window cell (-1 absent)."""
    coords = np.asarray(coords, np.int64).reshape(-1, 4)
    size, stride, padding, dilation = (np.array(_t(v)) for v in (size, stride, padding, dilation))
    out = rc.downsample(coords, tuple(stride.tolist())).astype(np.int64)
    out, _ = _sorted(out, np.zeros((len(out), 0)))
    out = out.astype(np.int64)
    offs = np.array(kernel_offsets(tuple(size.tolist()), tuple(dilation.tolist())), np.int64)
    win = np.full((len(out), len(offs)), -1, np.int64)
    for b in np.unique(coords[:, 0]):
        rows = np.flatnonzero(coords[:, 0] == b)
        grid = _Grid(coords[rows, 1:], rows)
        sel = np.flatnonzero(out[:, 0] == b)
        for k, off in enumerate(offs):
            win[sel, k] = grid.lookup(out[sel, 1:] * stride + off - padding)
    return out.astype(np.int32), win


def local_pool(coords, feats, mode, size=2, stride=2, padding=0, dilation=1):
    """Sum / avg / max pooling over the forward relation; returns (out_coords, out_feats)."""
    x = np.asarray(feats, np.float64)
    out, win = _windows(coords, size, stride, padding, dilation)
    present = win >= 0
    vals = x[np.maximum(win, 0)] if len(x) else np.zeros(win.shape + (x.shape[1],))
    counts = present.sum(axis=1)
    if mode == "max":
        y = np.where(present[..., None], vals, -np.inf).max(axis=1, initial=-np.inf)
        y[counts == 0] = 0.0
    else:
        y = np.where(present[..., None], vals, 0.0).sum(axis=1)
        if mode == "avg":
            y = y / np.maximum(counts, 1)[:, None]
    return out, y.reshape(len(out), x.shape[1])


def local_pool_grad(coords, feats, g_aligned, mode, size=2, stride=2, padding=0, dilation=1):
    """d sum(pool(x) * g) / dx; ``g_aligned`` is given on the sorted reference outputs."""
    x = np.asarray(feats, np.float64)
    g = np.asarray(g_aligned, np.float64)
    _, win = _windows(coords, size, stride, padding, dilation)
    dx = np.zeros_like(x)
    counts = (win >= 0).sum(axis=1)
    for o in range(len(win)):
        rows = win[o][win[o] >= 0]
        if mode == "max":
            for c in range(x.shape[1]):
                if len(rows):
                    vals = x[rows, c]
                    winner = rows[vals == vals.max()].min()  # ties: the smallest input row
                    dx[winner, c] += g[o, c]
        else:
            scale = 1.0 / counts[o] if mode == "avg" and counts[o] else 1.0
            for r in rows:
                dx[r] += scale * g[o]
    return dx


# ---- upsampling ------------------------------------------------------------------------


def _gathered(keys: np.ndarray, values: np.ndarray, target, channels: int) -> tuple[np.ndarray, np.ndarray]:
    """Rows of (keys, values) on ``target`` (order kept, absent rows 0), or all keys sorted."""
    if target is None:
        return _sorted(keys.astype(np.int32), values)
    coords = np.asarray(target, np.int32).reshape(-1, 4)
    index = {tuple(k): i for i, k in enumerate(keys.tolist())}
    feats = np.zeros((len(coords), channels))
    for r, c in enumerate(coords.tolist()):
        if tuple(c) in index:
            feats[r] = values[index[tuple(c)]]
    return coords, feats


def _weighted_average(coords, x, moves, target):
    """``sum w x / sum w`` per destination over (displacement d, weight w) moves of every row."""
    coords = np.asarray(coords, np.int64).reshape(-1, 4)
    dest, weight, wx = [], [], []
    for shift, scale, w in moves:
        t = coords.copy()
        t[:, 1:] = coords[:, 1:] * scale + shift
        dest.append(t)
        weight.append(np.full(len(t), w))
        wx.append(w * x)
    dest, weight, wx = np.concatenate(dest), np.concatenate(weight), np.concatenate(wx)
    if len(dest) == 0:
        return _gathered(np.zeros((0, 4), np.int64), np.zeros((0, x.shape[1])), target, x.shape[1])
    keys, inv = np.unique(dest, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    num = np.zeros((len(keys), x.shape[1]))
    np.add.at(num, inv, wx)
    den = np.bincount(inv, weights=weight, minlength=len(keys))
    return _gathered(keys, num / den[:, None], target, x.shape[1])


def contributor_average(coords, feats, size=2, stride=2, padding=0, dilation=1, target=None):
    """Pool transpose: coarse row ``s`` reaches ``t = s * stride + k * dilation - padding`` for every
    offset ``k``; each fine row is the mean of the coarse rows reaching it."""
    x = np.asarray(feats, np.float64)
    stride, padding = np.array(_t(stride)), np.array(_t(padding))
    moves = [(np.array(k) - padding, stride, 1.0) for k in kernel_offsets(size, dilation)]
    return _weighted_average(coords, x, moves, target)


def trilinear(coords, feats, stride=2, target=None):
    """Normalised trilinear interpolation: coarse row ``c`` sits at fine index ``c * s`` and reaches
    ``t = c * s + d`` for ``|d_a| < s_a`` with weight ``prod_a (1 - |d_a| / s_a)``."""
    x = np.asarray(feats, np.float64)
    s = np.array(_t(stride))
    deltas = itertools.product(*[range(-(a - 1), a) for a in s.tolist()])
    moves = [(np.array(d), s, float(np.prod(1.0 - np.abs(np.array(d)) / s))) for d in deltas]
    return _weighted_average(coords, x, moves, target)


# ---- global pooling --------------------------------------------------------------------


def global_pool(coords, feats, mode, batch_size=None) -> np.ndarray:
    """Dense (B, C): sum, mean (sum / max(count, 1)), or max (an empty member raises)."""
    x = np.asarray(feats, np.float64)
    b = np.asarray(coords, np.int64).reshape(-1, 4)[:, 0]
    B = (int(b.max()) + 1 if len(b) else 0) if batch_size is None else batch_size
    out = np.zeros((B, x.shape[1]))
    for m in range(B):
        rows = x[b == m]
        if mode == "max":
            if len(rows) == 0:
                raise ValueError(f"batch member {m} is empty")
            out[m] = rows.max(axis=0)
        elif len(rows):
            out[m] = rows.sum(axis=0) / (len(rows) if mode == "avg" else 1)
    return out


def window_map(coords, stride) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(cells, inverse, in_rows, out_rows)`` of the downsample by ``stride``.

    ``cells`` is ``unique(floor(c / stride))`` in first-occurrence order, ``inverse[i]``
    the cell of row ``i``; ``in_rows`` lists the rows cell by cell, ascending kernel
    offset within a cell, and ``out_rows[p]`` is the cell of ``in_rows[p]``.
    """
    sx, sy, sz = _t(stride)
    cell_of: dict[tuple[int, int, int, int], int] = {}
    members: list[list[tuple[int, int]]] = []
    inverse = []
    for i, (b, x, y, z) in enumerate(rc.tuples(coords)):
        cell = (b, x // sx, y // sy, z // sz)  # Python // floors
        if cell not in cell_of:
            cell_of[cell] = len(members)
            members.append([])
        u = cell_of[cell]
        inverse.append(u)
        members[u].append((((x % sx) * sy + y % sy) * sz + z % sz, i))  # Python % is floor-mod
    in_rows = [i for group in members for _, i in sorted(group)]
    out_rows = [u for u, group in enumerate(members) for _ in group]
    return (
        rc.to_array(list(cell_of)),
        np.array(inverse, np.int64),
        np.array(in_rows, np.int64),
        np.array(out_rows, np.int64),
    )
