"""Coordinate set operations (documented ``mlx_lattice.core.coords.set_ops``): lattice's own.

``downsample_coords``, ``union_coords`` and ``intersection_coords`` return a
``CoordinateSet(coords, active_rows)``; ``lookup_coords`` gives -1 where a query is
missing; ``contains_coords`` a bool mask; ``inverse_map(source, target)`` the source row
of each target row.
"""

from __future__ import annotations

from lattice.core import (
    CoordinateSet,
    contains_coords,
    downsample_coords,
    intersection_coords,
    inverse_map,
    lookup_coords,
    union_coords,
)

__all__ = [
    "CoordinateSet",
    "contains_coords",
    "downsample_coords",
    "intersection_coords",
    "inverse_map",
    "lookup_coords",
    "union_coords",
]
