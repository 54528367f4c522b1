"""Coordinate identity and relation caches (documented ``mlx_lattice.core.coords.manager``).

Both classes are lattice's own. A ``CoordinateMapKey`` is valid only in the manager that
made it. lattice's ``CoordinateManager`` has its own method names (``insert``,
``relation``, ``check_key``, ...) where the documented one has ``insert_coords``,
``kernel_relation``, ``owns``, ...: the missing members are listed in docs/compat.md.
"""

from __future__ import annotations

from lattice.core import CoordinateManager, CoordinateMapKey

__all__ = ["CoordinateManager", "CoordinateMapKey"]
