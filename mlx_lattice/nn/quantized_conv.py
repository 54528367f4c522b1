"""Quantized convolution modules (documented ``mlx_lattice.nn.quantized_conv``):
lattice's own classes, each with ``from_conv(module, group_size=None, bits=4)``."""

from __future__ import annotations

from lattice.nn import (
    QuantizedConv3d,
    QuantizedConvTranspose3d,
    QuantizedGenerativeConvTranspose3d,
    QuantizedSubmConv3d,
)

__all__ = [
    "QuantizedConv3d",
    "QuantizedConvTranspose3d",
    "QuantizedGenerativeConvTranspose3d",
    "QuantizedSubmConv3d",
]
