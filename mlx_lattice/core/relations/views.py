"""Relation classes and views (documented ``mlx_lattice.core.relations.views``).

``KernelRelation``, ``NeighborRelation`` and ``RelationEdges`` are lattice's own (the
objects lattice's relation functions return); their constructors differ from the
documented ones. The documented CSR / implicit-GEMM views, ``SparseRelationContract`` and
``NeighborEdges`` are not provided yet and raise ``mlx_lattice._missing.NotProvidedError``;
see docs/compat.md.
"""

from __future__ import annotations

from lattice.core import KernelRelation, NeighborRelation, RelationEdges
from mlx_lattice._missing import module_getattr

__all__ = ["KernelRelation", "NeighborRelation", "RelationEdges"]

__getattr__ = module_getattr(__name__)
