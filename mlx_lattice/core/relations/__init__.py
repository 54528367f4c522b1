"""Relation specifications and relation data (documented ``mlx_lattice.core.relations``).

Submodules :mod:`~mlx_lattice.core.relations.specs` and
:mod:`~mlx_lattice.core.relations.views`: the relation classes in their documented forms
(subclasses of lattice's), the views lattice's own. ``RelationKind`` is lattice's enum of
relation kinds (``forward``, ``submanifold``, ``target``, ``transposed``, ``generative``);
``RelationView`` is ``RelationCSRView``.
"""

from __future__ import annotations

from lattice.core import RelationKind, RelationView
from mlx_lattice.core.relations import specs, views
from mlx_lattice.core.relations.specs import KernelSpec
from mlx_lattice.core.relations.views import (
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
    "specs",
    "views",
    "KernelRelation",
    "KernelSpec",
    "NeighborEdges",
    "NeighborRelation",
    "RelationCSRView",
    "RelationEdges",
    "RelationImplicitGemmView",
    "RelationKind",
    "RelationSortedImplicitGemmView",
    "RelationView",
    "SparseRelationContract",
]
