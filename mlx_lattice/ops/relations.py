"""Relation builders on sparse tensors (documented ``mlx_lattice.ops.relations``).

lattice's own functions — the raw-array ``build_*`` builders, ``gather_neighbor_features``,
the kernel relations — each relation in the documented form (the mlx_lattice
``KernelRelation`` / ``NeighborRelation``: ``lattice.core.relation_documented.documented``;
the ``build_*`` builders are :mod:`mlx_lattice.core.coords.builders`'), and
``kernel_offsets`` (the documented tuple of int triples). Besides: ``kernel_relation`` has
the documented defaults (``kernel_size=3, stride=1``; lattice's are ``2, 2``), and
``knn_relation`` / ``radius_relation`` take the documented arguments only and build over
the tensors' coordinate buffers (``lattice.ops.build_knn_relation`` /
``build_radius_relation``: squared distances, the documented capacities).
"""

from __future__ import annotations

from lattice import ops as _ops
from lattice.core.relation_documented import documented
from lattice.ops import gather_neighbor_features
from mlx_lattice._missing import module_getattr
from mlx_lattice.core.coords.builders import (
    build_generative_relation,
    build_kernel_relation,
    build_knn_relation,
    build_radius_relation,
    build_submanifold_kernel_relation,
    build_target_kernel_relation,
    build_transposed_kernel_relation,
    documented_builder,
    kernel_offsets,
)

generative_kernel_relation = documented_builder(_ops.generative_kernel_relation)
submanifold_kernel_relation = documented_builder(_ops.submanifold_kernel_relation)
target_kernel_relation = documented_builder(_ops.target_kernel_relation)
transposed_kernel_relation = documented_builder(_ops.transposed_kernel_relation)


def kernel_relation(x, *, kernel_size=3, stride=1, padding=0, dilation=1):
    """The forward kernel relation of ``x`` (a SparseTensor): output support
    ``unique(floor(coords / stride))``, edges ``i = o*s + k*d - p``.

    Maps to ``lattice.ops.kernel_relation`` with the documented defaults
    (``kernel_size=3, stride=1``; lattice's own defaults are ``kernel_size=2, stride=2``).
    """
    return documented(
        _ops.kernel_relation(x, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)
    )


def _pair(source, query, op: str):
    query = source if query is None else query
    if source.stride != query.stride:
        raise ValueError(
            f"[{op}] source and query must have the same coordinate stride, got {source.stride} and {query.stride}"
        )
    return query


def knn_relation(source, query=None, *, k):
    """The ``k`` nearest source rows of every query row (SparseTensors of one stride; same
    batch, by the xyz lattice indices), nearest first; squared distances.

    Maps to ``lattice.ops.build_knn_relation(source.coords, query.coords, ...)`` with the
    tensors' live rows (lattice's ``knn_relation`` reports Euclidean distances).
    """
    query = _pair(source, query, "knn_relation")
    return build_knn_relation(  # the documented form (core.coords.builders)
        source.coords,
        query.coords,
        source_active_rows=source.active_count,
        query_active_rows=query.active_count,
        k=k,
    )


def radius_relation(source, query=None, *, radius, max_neighbors=None):
    """The source rows within ``radius`` of every query row (SparseTensors of one stride;
    same batch), nearest first, at most ``max_neighbors``; squared distances.

    Maps to ``lattice.ops.build_radius_relation(source.coords, query.coords, ...)`` with the
    tensors' live rows (lattice's ``radius_relation`` reports Euclidean distances).
    """
    query = _pair(source, query, "radius_relation")
    return build_radius_relation(  # the documented form (core.coords.builders)
        source.coords,
        query.coords,
        source_active_rows=source.active_count,
        query_active_rows=query.active_count,
        radius=radius,
        max_neighbors=max_neighbors,
    )


__all__ = [
    "build_generative_relation",
    "build_kernel_relation",
    "build_knn_relation",
    "build_radius_relation",
    "build_submanifold_kernel_relation",
    "build_target_kernel_relation",
    "build_transposed_kernel_relation",
    "gather_neighbor_features",
    "generative_kernel_relation",
    "kernel_offsets",
    "kernel_relation",
    "knn_relation",
    "radius_relation",
    "submanifold_kernel_relation",
    "target_kernel_relation",
    "transposed_kernel_relation",
]

__getattr__ = module_getattr(__name__)
