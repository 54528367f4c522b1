"""Functional operations on sparse tensors."""

from lattice.core.kernel import kernel_offsets
from lattice.ops.relations import (
    generative_kernel_relation,
    kernel_relation,
    knn_relation,
    radius_relation,
    submanifold_kernel_relation,
    target_kernel_relation,
    transposed_kernel_relation,
)

__all__ = [
    "generative_kernel_relation",
    "kernel_offsets",
    "kernel_relation",
    "knn_relation",
    "radius_relation",
    "submanifold_kernel_relation",
    "target_kernel_relation",
    "transposed_kernel_relation",
]
