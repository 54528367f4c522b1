"""Occupancy downsample / expand (documented ``mlx_lattice.core.coords.occupancy``): lattice's own.

``occupancy_downsample(coords, active_rows=None)`` gives the parents
``(b, floor(x / 2), floor(y / 2), floor(z / 2))`` in first-occurrence order with an 8-bit
child mask each (child ``(x & 1) + 2 (y & 1) + 4 (z & 1)`` sets bit ``1 << child``), a
``SparseOccupancy(coords, active_rows, occupancy)``; ``occupancy_expand(coords, occupancy,
active_rows=None)`` the children the masks name (parent by parent, child ids ascending,
capacity ``8 N``), an ``OccupancyExpansion(coords, active_rows, parent_rows,
child_indices)``; ``child_coords_from_indices`` the child of each parent row. Padding
rows are 0. All from ``lattice.core``.
"""

from __future__ import annotations

from lattice.core import (
    OccupancyExpansion,
    SparseOccupancy,
    child_coords_from_indices,
    occupancy_downsample,
    occupancy_expand,
)

__all__ = [
    "OccupancyExpansion",
    "SparseOccupancy",
    "child_coords_from_indices",
    "occupancy_downsample",
    "occupancy_expand",
]
