"""Morton (Z-order) ordering (documented ``mlx_lattice.core.coords.ordering``).

``morton_codes`` and ``morton_order`` are lattice's own. ``morton_sort_coords`` is an
adapter: lattice's returns the tuple ``(sorted_coords, order)``, the documented one a
:class:`CoordinateOrdering`, which adds the inverse permutation.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from lattice.core import morton_codes, morton_order
from lattice.core import morton_sort_coords as _morton_sort_coords


@dataclass(frozen=True)
class CoordinateOrdering:
    """Coordinates in Morton order: ``coords == input[order]`` and
    ``input == coords[inverse_rows]``."""

    coords: mx.array
    order: mx.array
    inverse_rows: mx.array


def morton_sort_coords(coords) -> CoordinateOrdering:
    """``coords`` sorted by Morton code, with the permutation and its inverse.

    Maps to ``lattice.core.morton_sort_coords(coords)`` (which returns
    ``(sorted_coords, order)``); ``inverse_rows`` is ``argsort(order)``.
    """
    sorted_coords, order = _morton_sort_coords(coords)
    return CoordinateOrdering(sorted_coords, order, mx.argsort(order).astype(mx.int32))


__all__ = ["CoordinateOrdering", "morton_codes", "morton_order", "morton_sort_coords"]
