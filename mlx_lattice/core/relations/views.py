"""Relation classes and views (documented ``mlx_lattice.core.relations.views``).

``KernelRelation``, ``NeighborRelation`` and ``RelationEdges`` are the documented forms
(``lattice.core.relation_documented``): subclasses of lattice's relations with the
documented constructors (edge arrays and optional views) and members — ``counts`` int32
``[edge_count, out_count]`` (``[edge_count, query_count]``), ``edge_count`` / ``out_count``
/ ``query_count`` int32 ``(1,)`` arrays, ``kernel_offsets`` a tuple of int triples, ``edges``
by output row. Every relation mlx_lattice hands out (its builders, ``ops.relations``, the
``CoordinateManager`` relation methods) is one of them, and lattice's ops take them as
lattice's own. The views — ``SparseRelationContract``, ``RelationCSRView``,
``RelationImplicitGemmView``, ``RelationSortedImplicitGemmView`` and ``NeighborEdges`` —
are lattice's own (``lattice.core.relation_views``).

lattice's relations are exact: a builder's relation holds its live edges only
(``edge_capacity`` is the edge count), see docs/compat.md.
"""

from __future__ import annotations

from lattice.core import (
    NeighborEdges,
    RelationCSRView,
    RelationImplicitGemmView,
    RelationSortedImplicitGemmView,
    SparseRelationContract,
)
from lattice.core.relation_documented import KernelRelation, NeighborRelation, RelationEdges

__all__ = [
    "KernelRelation",
    "NeighborEdges",
    "NeighborRelation",
    "RelationCSRView",
    "RelationEdges",
    "RelationImplicitGemmView",
    "RelationSortedImplicitGemmView",
    "SparseRelationContract",
]
