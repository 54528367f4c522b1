"""Functional operations on sparse tensors."""

from lattice.core.kernel import kernel_offsets
from lattice.ops.conv import (
    conv3d,
    conv_transpose3d,
    generative_conv_transpose3d,
    normalized_conv_transpose3d,
    normalized_generative_conv_transpose3d,
    normalized_subm_conv3d,
    subm_conv3d,
)
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
    "conv3d",
    "conv_transpose3d",
    "generative_conv_transpose3d",
    "normalized_conv_transpose3d",
    "normalized_generative_conv_transpose3d",
    "normalized_subm_conv3d",
    "subm_conv3d",
    "generative_kernel_relation",
    "kernel_offsets",
    "kernel_relation",
    "knn_relation",
    "radius_relation",
    "submanifold_kernel_relation",
    "target_kernel_relation",
    "transposed_kernel_relation",
]
