"""Coordinate validators (documented ``mlx_lattice.core.coords.validation``): lattice's own.

``validate_coords(coords, *, name='coords')`` raises ValueError unless ``coords`` is an
``(N, 4)`` int32 / int64 array; ``validate_coord_pair`` checks two arrays and that they
share a dtype. Both return None (``lattice.core.validate_coords``,
``lattice.core.validate_coord_pair``).
"""

from __future__ import annotations

from lattice.core import validate_coord_pair, validate_coords

__all__ = ["validate_coord_pair", "validate_coords"]
