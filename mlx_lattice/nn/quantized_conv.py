"""Quantized convolution modules (documented ``mlx_lattice.nn.quantized_conv``), each with
``from_conv(module, group_size=None, bits=4)``: lattice's own ``QuantizedConv3d`` and
``QuantizedSubmConv3d``; the transposed two are lattice's subclassed to run
:mod:`mlx_lattice.ops.conv`'s adapters (odd kernel offsets numbered from 0, as 0.6.3 does)."""

from __future__ import annotations

from lattice import nn as _nn
from lattice.nn import QuantizedConv3d, QuantizedSubmConv3d
from mlx_lattice.ops import conv as _conv


class QuantizedConvTranspose3d(_nn.QuantizedConvTranspose3d):
    """:class:`lattice.nn.QuantizedConvTranspose3d` with 0.6.3's transposed offsets."""

    _op = staticmethod(_conv.conv_transpose3d)


class QuantizedGenerativeConvTranspose3d(_nn.QuantizedGenerativeConvTranspose3d):
    """:class:`lattice.nn.QuantizedGenerativeConvTranspose3d` with 0.6.3's offsets."""

    _op = staticmethod(_conv.generative_conv_transpose3d)


__all__ = [
    "QuantizedConv3d",
    "QuantizedConvTranspose3d",
    "QuantizedGenerativeConvTranspose3d",
    "QuantizedSubmConv3d",
]
