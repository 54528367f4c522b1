"""Relation specifications and relation data (documented ``mlx_lattice.core.relations``).

Submodules :mod:`~mlx_lattice.core.relations.specs` and
:mod:`~mlx_lattice.core.relations.views`. ``RelationKind`` is lattice's enum of relation
kinds (``forward``, ``submanifold``, ``target``, ``transposed``, ``generative``).
"""

from __future__ import annotations

from lattice.core import RelationKind
from mlx_lattice._missing import module_getattr
from mlx_lattice.core.relations import specs, views
from mlx_lattice.core.relations.specs import KernelSpec
from mlx_lattice.core.relations.views import KernelRelation, NeighborRelation, RelationEdges

__all__ = [
    "specs",
    "views",
    "KernelRelation",
    "KernelSpec",
    "NeighborRelation",
    "RelationEdges",
    "RelationKind",
]

__getattr__ = module_getattr(__name__)
