"""Sparse coordinate alignment (documented ``mlx_lattice.core.coords.alignment``).

``SparseJoin`` is the documented join type. ``SparseAlignment(coords, active_rows,
lhs_rows, rhs_rows)`` and ``build_sparse_alignment(lhs_coords, lhs_active_rows,
rhs_coords, rhs_active_rows, *, join='inner')`` are lattice's own
(``lattice.ops.alignment``): the join's output coordinates and, per row, the row of each
side (-1 where that side lacks it), with the capacity of the join (lhs rows for
``inner`` / ``left``, rhs rows for ``right``, both for ``outer``).
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from lattice.ops import SparseAlignment, build_sparse_alignment

#: Join modes: ``inner`` (both sides), ``left`` / ``right`` (one side), ``outer`` (union).
SparseJoin: TypeAlias = Literal["inner", "left", "right", "outer"]

__all__ = ["SparseAlignment", "SparseJoin", "build_sparse_alignment"]
