"""Coordinate validators (documented ``mlx_lattice.core.coords.validation``).

Not provided yet: lattice validates coordinates inside every op but has no public
validators. Every documented name here raises ``mlx_lattice._missing.NotProvidedError``;
see docs/compat.md.
"""

from __future__ import annotations

from mlx_lattice._missing import module_getattr

__all__: list[str] = []

__getattr__ = module_getattr(__name__)
