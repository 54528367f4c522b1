"""Bundled sample data, generated on demand (no data files ship with the package).

``synthetic_room()`` builds a deterministic indoor scan: a 6 x 5 x 3 m room (floor,
ceiling, four walls with a door and a window opening) holding a table, a box and a
sphere, sampled on the surfaces with small sensor noise. Every point carries
``intensity`` (float32), ``red``/``green``/``blue`` (uint8) and a semantic ``label``
(uint8, see ``ROOM_CLASSES``). ``lattice demo`` runs on it.
"""

from __future__ import annotations

import numpy as np

from lattice.io import PointCloud

ROOM_CLASSES: tuple[str, ...] = ("floor", "ceiling", "wall", "table", "box", "sphere")
ROOM_SIZE = (6.0, 5.0, 3.0)

_COLORS = np.array(
    [[150, 120, 90], [235, 235, 230], [200, 200, 190], [110, 70, 40], [40, 90, 170], [190, 40, 40]],
    dtype=np.float64,
)
_INTENSITY = np.array([0.35, 0.8, 0.6, 0.45, 0.7, 0.9])


def _box_surface(rng: np.random.Generator, lo, hi, n: int) -> np.ndarray:
    """``n`` points on the surface of the axis-aligned box ``[lo, hi]``, area-weighted."""
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    size = hi - lo
    areas = np.array([size[1] * size[2], size[0] * size[2], size[0] * size[1]]).repeat(2)
    face = rng.choice(6, size=n, p=areas / areas.sum())
    pts = lo + rng.random((n, 3)) * size
    axis, side = face // 2, face % 2
    pts[np.arange(n), axis] = np.where(side == 1, hi[axis], lo[axis])
    return pts


def _room_shell(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Floor, ceiling and walls; openings for a door and a window are left empty."""
    pts = _box_surface(rng, (0, 0, 0), ROOM_SIZE, n)
    label = np.full(n, 2)
    label[pts[:, 2] == 0.0] = 0
    label[pts[:, 2] == ROOM_SIZE[2]] = 1
    door = (pts[:, 1] == 0.0) & (np.abs(pts[:, 0] - 1.5) < 0.45) & (pts[:, 2] < 2.1)
    window = (pts[:, 0] == ROOM_SIZE[0]) & (np.abs(pts[:, 1] - 2.5) < 0.8) & (np.abs(pts[:, 2] - 1.6) < 0.5)
    keep = ~(door | window)
    return pts[keep], label[keep]


def _sphere(rng: np.random.Generator, centre, radius: float, n: int) -> np.ndarray:
    d = rng.normal(size=(n, 3))
    d /= np.linalg.norm(d, axis=1, keepdims=True)
    return np.asarray(centre) + radius * d


def synthetic_room(n_points: int = 50_000, seed: int = 0) -> PointCloud:
    """A deterministic synthetic indoor scan of about ``n_points`` points (exactly, for a given seed).

    Coordinates are float32 metres with the room's corner at the origin; attributes are
    ``intensity``, ``red``, ``green``, ``blue`` and ``label`` (index into ``ROOM_CLASSES``).
    """
    if n_points < 100:
        raise ValueError(f"[synthetic_room] n_points must be at least 100, got {n_points}")
    rng = np.random.default_rng(seed)
    n_shell = int(n_points * 0.72)
    n_table, n_box = int(n_points * 0.12), int(n_points * 0.08)
    n_sphere = n_points - n_shell - n_table - n_box
    shell, shell_label = _room_shell(rng, int(n_shell * 1.08))
    shell, shell_label = shell[:n_shell], shell_label[:n_shell]
    top = _box_surface(rng, (3.2, 1.0, 0.72), (4.8, 2.0, 0.76), n_table * 3 // 4)
    legs = np.concatenate(
        [
            _box_surface(rng, (x, y, 0.0), (x + 0.06, y + 0.06, 0.72), n_table // 16 + 1)
            for x in (3.25, 4.69)
            for y in (1.05, 1.89)
        ]
    )[: n_table - len(top)]
    box = _box_surface(rng, (0.6, 3.4, 0.0), (1.4, 4.4, 0.9), n_box)
    ball = _sphere(rng, (4.0, 1.5, 1.06), 0.3, n_sphere)
    pts = np.concatenate([shell, top, legs, box, ball])
    label = np.concatenate(
        [shell_label, np.full(len(top) + len(legs), 3), np.full(n_box, 4), np.full(n_sphere, 5)]
    )
    pts = pts + rng.normal(scale=0.004, size=pts.shape)
    shade = rng.normal(scale=12.0, size=(len(pts), 1))
    rgb = np.clip(_COLORS[label] + shade, 0, 255).astype(np.uint8)
    intensity = np.clip(_INTENSITY[label] + rng.normal(scale=0.05, size=len(pts)), 0, 1)
    order = rng.permutation(len(pts))
    attrs = {
        "intensity": intensity[order].astype(np.float32),
        "red": rgb[order, 0],
        "green": rgb[order, 1],
        "blue": rgb[order, 2],
        "label": label[order].astype(np.uint8),
    }
    return PointCloud(pts[order].astype(np.float32), attrs, source="synthetic_room")


__all__ = ["ROOM_CLASSES", "ROOM_SIZE", "synthetic_room"]
