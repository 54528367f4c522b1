"""Per-point features from a point's neighbourhood, for models that must transfer across sites.

Absolute coordinates do not transfer between airborne scans (another CRS, another
terrain height); these do. Both work on a regular grid of cell size ``scale`` (in the
cloud's units), in NumPy, in O(N log N):

- :func:`height_above_min` — ``z`` minus the lowest ``z`` of the 3 x 3 block of
  ``scale``-sized xy cells around the point's cell: height above the local ground, roughly,
  when ``scale`` is larger than the widest building;
- :func:`planarity` — ``(l2 - l3) / l1`` from the eigenvalues ``l1 >= l2 >= l3`` of the
  covariance of the points in the point's ``scale``-sized 3D cell (0 where the cell holds
  fewer than 3 points): near 1 on a plane (ground, roofs), lower in vegetation.
"""

from __future__ import annotations

import numpy as np


def _cells(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids 0..M-1 of the integer rows ``keys`` (N, D) and M."""
    if len(keys) == 0:
        return np.zeros(0, np.int64), 0
    _, inv = np.unique(keys, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    return inv, int(inv.max()) + 1


def height_above_min(points: np.ndarray, scale: float) -> np.ndarray:
    """float64 (N,): ``z`` minus the minimum ``z`` over the 3 x 3 xy cells of size ``scale`` around each point."""
    pts = np.asarray(points, np.float64)
    if len(pts) == 0:
        return np.zeros(0)
    ij = np.floor(pts[:, :2] / scale).astype(np.int64)
    ij -= ij.min(axis=0)
    ids, m = _cells(ij)
    cell_min = np.full(m, np.inf)
    np.minimum.at(cell_min, ids, pts[:, 2])
    # each cell's index pair, then the minimum over its 8 neighbours and itself
    first = np.zeros(m, np.int64)
    first[ids[::-1]] = np.arange(len(ids))[::-1]
    cell_ij = ij[first]
    width = int(cell_ij[:, 1].max()) + 3
    code = (cell_ij[:, 0] + 1) * width + (cell_ij[:, 1] + 1)
    order = np.argsort(code)
    sorted_code = code[order]
    best = cell_min.copy()
    for di in (-1, 0, 1):
        for dj in (-1, 0, 1):
            if di == dj == 0:
                continue
            want = code + di * width + dj
            pos = np.clip(np.searchsorted(sorted_code, want), 0, m - 1)
            hit = sorted_code[pos] == want
            best = np.where(hit, np.minimum(best, cell_min[order[pos]]), best)
    return pts[:, 2] - best[ids]


def planarity(points: np.ndarray, scale: float) -> np.ndarray:
    """float64 (N,) in [0, 1]: ``(l2 - l3) / l1`` of the covariance of each point's 3D cell of size ``scale``."""
    pts = np.asarray(points, np.float64)
    if len(pts) == 0:
        return np.zeros(0)
    ids, m = _cells(np.floor(pts / scale).astype(np.int64))
    count = np.bincount(ids, minlength=m).astype(np.float64)
    mean = np.stack([np.bincount(ids, pts[:, k], m) for k in range(3)], axis=1) / count[:, None]
    d = pts - mean[ids]
    cov = np.empty((m, 3, 3))
    for a in range(3):
        for b in range(a, 3):
            cov[:, a, b] = cov[:, b, a] = np.bincount(ids, d[:, a] * d[:, b], m) / count
    lam = np.linalg.eigvalsh(cov)  # ascending
    l3, l2, l1 = lam[:, 0], lam[:, 1], lam[:, 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.where((count >= 3) & (l1 > 0), (l2 - l3) / l1, 0.0)
    return np.clip(p, 0.0, 1.0)[ids]


NEIGHBOURHOOD_FEATURES = {"height_above_min": height_above_min, "planarity": planarity}

__all__ = ["NEIGHBOURHOOD_FEATURES", "height_above_min", "planarity"]
