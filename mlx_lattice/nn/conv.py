"""Sparse convolution modules (documented ``mlx_lattice.nn.conv``): lattice's own classes.

Called as ``conv(x, *, coordinates=None)``; the transpose modules take an optional
target. The documented ``to_quantized`` method is missing on lattice's conv modules
(use ``lattice.nn.quantize(model)`` or ``Quantized*.from_conv``); see docs/compat.md.
"""

from __future__ import annotations

from lattice.nn import (
    Conv3d,
    ConvTranspose3d,
    GenerativeConvTranspose3d,
    NormalizedConvTranspose3d,
    NormalizedGenerativeConvTranspose3d,
    NormalizedSubmConv3d,
    SubmConv3d,
)

__all__ = [
    "Conv3d",
    "ConvTranspose3d",
    "GenerativeConvTranspose3d",
    "NormalizedConvTranspose3d",
    "NormalizedGenerativeConvTranspose3d",
    "NormalizedSubmConv3d",
    "SubmConv3d",
]
