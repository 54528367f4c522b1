"""Colour tables: a qualitative palette for arbitrary class ids, the ASPRS LAS and the
SemanticKITTI class palettes, and the viridis ramp for scalar values.

Arbitrary ids get the colour of their *rank* among the ids present (not of the id
itself), so neighbouring ids (CGAL's -1/0, OSD's 0/1, 20/21) always differ: Tableau 10
first, then Kelly's colours of maximum contrast, then the cycle repeats.
"""

from __future__ import annotations

import numpy as np

RGB = tuple[int, int, int]


def _hex(codes: str) -> tuple[RGB, ...]:
    return tuple(tuple(int(c[i : i + 2], 16) for i in (0, 2, 4)) for c in codes.split())


# Tableau 10, then colours of Kelly's and Tableau 20 kept only where every pair of the 24
# differs by at least 55 (RGB distance): no two classes look alike.
QUALITATIVE: tuple[RGB, ...] = _hex(
    "1f77b4 ff7f0e 2ca02c d62728 9467bd 8c564b e377c2 7f7f7f bcbd22 17becf f3c300 a1caf1 "
    "c2b280 008856 f99379 604e97 882d17 8db600 2b3d26 98df8a f7b6d2 637939 000080 ff1493"
)

# ASPRS LAS classification codes (lattice.io.ASPRS_CLASSES): the colours GIS tools use.
ASPRS_COLOURS: dict[int, RGB] = {
    0: (110, 110, 110),
    1: (150, 150, 150),
    2: (166, 118, 60),
    3: (170, 230, 120),
    4: (80, 180, 60),
    5: (20, 110, 30),
    6: (220, 60, 50),
    7: (255, 0, 255),
    8: (255, 150, 0),
    9: (40, 120, 230),
    10: (120, 80, 40),
    11: (90, 90, 90),
    12: (250, 200, 210),
    13: (250, 200, 0),
    14: (255, 230, 0),
    15: (200, 100, 0),
    16: (255, 160, 0),
    17: (150, 80, 200),
    18: (255, 0, 150),
}

# SemanticKITTI's 19 learning classes (semantic-kitti.yaml's colours, as RGB).
SEMANTICKITTI: dict[str, RGB] = {
    "unlabeled": (0, 0, 0),
    "car": (100, 150, 245),
    "bicycle": (100, 230, 245),
    "motorcycle": (30, 60, 150),
    "truck": (80, 30, 180),
    "other-vehicle": (100, 80, 250),
    "person": (255, 30, 30),
    "bicyclist": (255, 40, 200),
    "motorcyclist": (150, 30, 90),
    "road": (255, 0, 255),
    "parking": (255, 150, 255),
    "sidewalk": (75, 0, 75),
    "other-ground": (175, 0, 75),
    "building": (255, 200, 0),
    "fence": (255, 120, 50),
    "vegetation": (0, 175, 0),
    "trunk": (135, 60, 0),
    "terrain": (150, 240, 80),
    "pole": (255, 240, 150),
    "traffic-sign": (255, 0, 0),
}
SEMANTICKITTI_NAMES: tuple[str, ...] = tuple(SEMANTICKITTI)  # learning id -> name

_VIRIDIS = np.array(
    [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142],
     [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]],
    float,
)  # fmt: skip


def qualitative(rank: int) -> RGB:
    """The colour of the ``rank``-th id present (0-based), cycling after 24."""
    return QUALITATIVE[rank % len(QUALITATIVE)]


def ramp(t: np.ndarray) -> np.ndarray:
    """uint8 ``(N, 3)`` viridis colours of ``t`` in [0, 1] (NaN -> the low end)."""
    t = np.nan_to_num(np.clip(np.asarray(t, np.float64), 0.0, 1.0), nan=0.0)
    x = t * (len(_VIRIDIS) - 1)
    i = np.minimum(x.astype(np.int64), len(_VIRIDIS) - 2)
    f = (x - i)[:, None]
    return (_VIRIDIS[i] * (1 - f) + _VIRIDIS[i + 1] * f + 0.5).astype(np.uint8)


def class_colours(ids: np.ndarray, table: dict[int, RGB]) -> dict[int, RGB]:
    """A colour for every id of ``ids`` (unique, sorted): ``table``'s where it has one, else the
    qualitative palette by rank, skipping colours ``table`` already uses."""
    used = set(table.values())
    free = [c for c in QUALITATIVE if c not in used] or list(QUALITATIVE)
    out, k = {}, 0
    for i in ids.tolist():
        if int(i) in table:
            out[int(i)] = tuple(int(v) for v in table[int(i)])
        else:
            out[int(i)] = free[k % len(free)]
            k += 1
    return out
