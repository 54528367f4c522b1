"""Relation classes and views (documented ``mlx_lattice.core.relations.views``).

All lattice's own. ``KernelRelation``, ``NeighborRelation`` and ``RelationEdges`` are the
objects lattice's relation functions return (their constructors differ from the
documented ones; see docs/compat.md). The views — ``SparseRelationContract``,
``RelationCSRView``, ``RelationImplicitGemmView``, ``RelationSortedImplicitGemmView`` and
``NeighborEdges`` (``lattice.core.relation_views``) — are what their documented members
return, each made from the relation's edges or dense map on first use and kept with it.

lattice's kernel-relation edges are grouped by kernel offset, not sorted by output row:
``output_csr`` therefore carries ``edge_ids`` (indices into ``edges``, ascending kernel
offset within a row). ``edge_count`` / ``out_count`` of a ``KernelRelation`` are Python
ints (its ``contract`` has the documented int32 arrays) and ``counts`` the edges per
kernel offset; a ``NeighborRelation``'s ``counts`` are the neighbours per query.
"""

from __future__ import annotations

from lattice.core import (
    KernelRelation,
    NeighborEdges,
    NeighborRelation,
    RelationCSRView,
    RelationEdges,
    RelationImplicitGemmView,
    RelationSortedImplicitGemmView,
    SparseRelationContract,
)

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
