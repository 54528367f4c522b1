"""Occupancy downsample / expand (documented ``mlx_lattice.core.coords.occupancy``).

Not provided yet: lattice has no occupancy (child-mask) operations. Every documented
name here raises ``mlx_lattice._missing.NotProvidedError``; see docs/compat.md.
"""

from __future__ import annotations

from mlx_lattice._missing import module_getattr

__all__: list[str] = []

__getattr__ = module_getattr(__name__)
