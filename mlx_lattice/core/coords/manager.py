"""Coordinate identity and relation caches (documented ``mlx_lattice.core.coords.manager``).

Both classes are lattice's own. A ``CoordinateMapKey`` is valid only in the manager that
made it. lattice's ``CoordinateManager`` serves the documented methods beside its own
(``insert``, ``relation``, ``check_key``, ...): ``insert_coords(coords, stride=1,
active_rows=None)``, ``owns``, ``coords``, ``active_rows`` (an int32 ``(1,)`` count),
``inverse_map(source, target)`` (the source row of each target row) and the relation
builders ``kernel_relation``, ``generative_relation``, ``submanifold_kernel_relation``,
``transposed_kernel_relation``, ``target_kernel_relation``, each cached by the manager.
``target_transposed_view`` (an implicit-GEMM view) is not provided yet: see
docs/compat.md.
"""

from __future__ import annotations

from lattice.core import CoordinateManager, CoordinateMapKey

__all__ = ["CoordinateManager", "CoordinateMapKey"]
