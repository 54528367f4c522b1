"""Relation builders over raw coordinate arrays (documented ``mlx_lattice.core.coords.builders``).

The ``build_*`` relation builders are lattice's (``lattice.ops.build_kernel_relation`` and
friends: the live rows of coordinate buffers in, a relation whose contract records the
buffers, out; neighbour relations report squared distances), each adapted to return its
relation in the documented form (``lattice.core.relation_documented.documented``: the
mlx_lattice ``KernelRelation`` / ``NeighborRelation``, documented counts and edges by
output row). The three implicit-GEMM builders are adapters over
``KernelRelation.require_implicit_gemm``. Kernel offsets are lattice's (odd sizes centred,
even from 0, z fastest) for every relation kind; ``kernel_offsets`` gives them as the
documented tuple of ``(dx, dy, dz)`` int triples (lattice's: a (K, 3) int32 array).

The ``Native*`` aliases name the tuple shapes of the documented native builders.
"""

from __future__ import annotations

import functools
from typing import TypeAlias

import mlx.core as mx

import lattice.core
from lattice import ops as _ops
from lattice.core import KernelRelation, RelationImplicitGemmView, RelationKind
from lattice.core.relation_documented import documented

NativeKernelRelation: TypeAlias = tuple[
    mx.array, mx.array, mx.array, mx.array, mx.array, mx.array, mx.array, mx.array, mx.array, mx.array
]
NativeNeighborRelation: TypeAlias = tuple[mx.array, mx.array, mx.array, mx.array, mx.array, mx.array]
NativeImplicitGemmView: TypeAlias = tuple[mx.array, mx.array]

_FORWARD_KINDS = (RelationKind.FORWARD, RelationKind.TARGET, RelationKind.SUBMANIFOLD)


def documented_builder(build):
    """``build`` (a lattice relation function) returning its relation in the documented form;
    the signature (``inspect.signature``) is ``build``'s."""

    @functools.wraps(build)
    def adapter(*args, **kwargs):
        return documented(build(*args, **kwargs))

    adapter.__doc__ = (
        f"``lattice.ops.{build.__name__}``, its relation in the documented form "
        f"(``lattice.core.relation_documented.documented``).\n\n{build.__doc__ or ''}"
    )
    return adapter


build_kernel_relation = documented_builder(_ops.build_kernel_relation)
build_submanifold_kernel_relation = documented_builder(_ops.build_submanifold_kernel_relation)
build_target_kernel_relation = documented_builder(_ops.build_target_kernel_relation)
build_transposed_kernel_relation = documented_builder(_ops.build_transposed_kernel_relation)
build_generative_relation = documented_builder(_ops.build_generative_relation)
build_knn_relation = documented_builder(_ops.build_knn_relation)
build_radius_relation = documented_builder(_ops.build_radius_relation)


def kernel_offsets(kernel_size, dilation=1) -> tuple[tuple[int, int, int], ...]:
    """The offsets of a kernel, a tuple of ``(dx, dy, dz)`` int triples: odd sizes centred,
    even sizes from 0, scaled by ``dilation``, z fastest.

    Maps to ``lattice.core.kernel_offsets`` (an (K, 3) int32 array) as host tuples.
    """
    rows = lattice.core.kernel_offsets(kernel_size, dilation).tolist()
    return tuple((int(x), int(y), int(z)) for x, y, z in rows)


def _relation(relation, op: str) -> KernelRelation:
    if not isinstance(relation, KernelRelation):
        raise TypeError(f"[{op}] relation must be a KernelRelation, got {type(relation).__name__}")
    return relation


def build_relation_implicit_gemm_view(relation) -> RelationImplicitGemmView:
    """The implicit-GEMM view of a forward, target or submanifold relation (other kinds raise
    ``ValueError``: use ``build_relation_implicit_gemm_view_from_edges``).

    Maps to ``relation.require_implicit_gemm()`` (lattice makes the view from the relation's
    dense neighbour map, the same rows the documented coordinate lookup finds).
    """
    op = "build_relation_implicit_gemm_view"
    relation = _relation(relation, op)
    if relation.kind not in _FORWARD_KINDS:
        raise ValueError(
            f"[{op}] the implicit-GEMM view supports forward, target and submanifold relations, "
            f"got {relation.kind.value}; build_relation_implicit_gemm_view_from_edges takes every kind"
        )
    return relation.require_implicit_gemm()


def build_relation_implicit_gemm_view_from_edges(relation) -> RelationImplicitGemmView:
    """The implicit-GEMM view of a relation of any kind, from its edges.

    Maps to ``relation.require_implicit_gemm()``.
    """
    return _relation(relation, "build_relation_implicit_gemm_view_from_edges").require_implicit_gemm()


def build_target_transposed_implicit_gemm_view(
    source_coords,
    target_coords,
    *,
    source_active_rows,
    target_active_rows,
    kernel_size=2,
    stride=2,
    padding=0,
    dilation=1,
) -> RelationImplicitGemmView:
    """The implicit-GEMM view of the transposed relation from ``source_coords`` onto
    ``target_coords``: one row per target buffer row, ``out_in_map[t, k]`` the source row
    with ``t = s * stride + k * dilation - padding`` (-1: none, and for rows past
    ``target_active_rows``).

    Maps to ``lattice.ops.build_transposed_kernel_relation(..., target_coords=,
    target_active_rows=).require_implicit_gemm()``.
    """
    relation = _ops.build_transposed_kernel_relation(
        source_coords,
        source_active_rows,
        kernel_size,
        stride,
        padding,
        dilation,
        target_coords=target_coords,
        target_active_rows=target_active_rows,
    )
    return relation.require_implicit_gemm()


__all__ = [
    "NativeImplicitGemmView",
    "NativeKernelRelation",
    "NativeNeighborRelation",
    "build_generative_relation",
    "build_kernel_relation",
    "build_knn_relation",
    "build_radius_relation",
    "build_relation_implicit_gemm_view",
    "build_relation_implicit_gemm_view_from_edges",
    "build_submanifold_kernel_relation",
    "build_target_kernel_relation",
    "build_target_transposed_implicit_gemm_view",
    "build_transposed_kernel_relation",
    "kernel_offsets",
]
