"""Sparse coordinate alignment (documented ``mlx_lattice.core.coords.alignment``).

``SparseJoin`` is the documented join type. ``SparseAlignment`` and
``build_sparse_alignment`` are not provided yet (lattice aligns inside its algebra ops
but exposes no alignment record); they raise ``mlx_lattice._missing.NotProvidedError``.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

from mlx_lattice._missing import module_getattr

#: Join modes: ``inner`` (both sides), ``left`` / ``right`` (one side), ``outer`` (union).
SparseJoin: TypeAlias = Literal["inner", "left", "right", "outer"]

__all__ = ["SparseJoin"]

__getattr__ = module_getattr(__name__)
