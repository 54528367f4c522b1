"""Sparse convolution (documented ``mlx_lattice.ops.conv``): lattice's own functions.

Dense weights are ``(C_out, Kx, Ky, Kz, C_in)`` (flattened offsets vary z fastest) or
kernel-major ``(K, C_in, C_out)``; a ``QuantizedWeight`` is accepted too. ``coordinates``
(a SparseTensor, a key or a coords array) selects target mode. lattice adds a
keyword-only ``device=`` to each.
"""

from __future__ import annotations

from lattice.ops import (
    conv3d,
    conv_transpose3d,
    generative_conv_transpose3d,
    normalized_conv_transpose3d,
    normalized_generative_conv_transpose3d,
    normalized_subm_conv3d,
    subm_conv3d,
)

__all__ = [
    "conv3d",
    "conv_transpose3d",
    "generative_conv_transpose3d",
    "normalized_conv_transpose3d",
    "normalized_generative_conv_transpose3d",
    "normalized_subm_conv3d",
    "subm_conv3d",
]
