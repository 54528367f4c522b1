"""Sparse convolution modules (documented ``mlx_lattice.nn.conv``).

``Conv3d`` and ``SubmConv3d`` are lattice's own classes; ``NormalizedSubmConv3d`` is
lattice's subclassed to skip the normalisation of a 1x1x1 kernel, as documented. The
four transposed modules are lattice's subclassed to run :mod:`mlx_lattice.ops.conv`'s
transposed adapters (odd kernel offsets numbered from 0, as 0.6.3 does); their
``to_quantized`` gives :mod:`mlx_lattice.nn.quantized_conv`'s twins. Called as
``conv(x, *, coordinates=None)``; the transpose modules take an optional target.
"""

from __future__ import annotations

from lattice import nn as _nn
from lattice.nn import Conv3d, SubmConv3d
from mlx_lattice.ops import conv as _conv


class NormalizedSubmConv3d(_nn.NormalizedSubmConv3d):
    """:class:`lattice.nn.NormalizedSubmConv3d`; a 1x1x1 kernel is the plain pointwise
    projection, as documented."""

    _op = staticmethod(_conv.normalized_subm_conv3d)


class _Indexed:
    """0.6.3's transposed offsets: the op is the adapter; quantized twins stay adapted."""

    _quantized: str | None = None

    def to_quantized(self, group_size=None, bits=None, mode="affine", **kwargs):
        q = super().to_quantized(group_size, bits, mode, **kwargs)
        if self._quantized is not None and q is not self:
            from mlx_lattice.nn import quantized_conv

            q.__class__ = getattr(quantized_conv, self._quantized)  # the same state, adapted op
        return q


class ConvTranspose3d(_Indexed, _nn.ConvTranspose3d):
    """:class:`lattice.nn.ConvTranspose3d` on 0.6.3's support
    ``o = i * stride + k * dilation - padding`` (``k`` from 0 on every axis)."""

    _op = staticmethod(_conv.conv_transpose3d)
    _quantized = "QuantizedConvTranspose3d"


class GenerativeConvTranspose3d(_Indexed, _nn.GenerativeConvTranspose3d):
    """:class:`lattice.nn.GenerativeConvTranspose3d` on 0.6.3's support ``i * stride + k``."""

    _op = staticmethod(_conv.generative_conv_transpose3d)
    _quantized = "QuantizedGenerativeConvTranspose3d"


class NormalizedConvTranspose3d(_nn.NormalizedConvTranspose3d, ConvTranspose3d):
    """:class:`lattice.nn.NormalizedConvTranspose3d` with 0.6.3's offsets."""

    _op = staticmethod(_conv.normalized_conv_transpose3d)


class NormalizedGenerativeConvTranspose3d(_nn.NormalizedGenerativeConvTranspose3d, GenerativeConvTranspose3d):
    """:class:`lattice.nn.NormalizedGenerativeConvTranspose3d` with 0.6.3's offsets."""

    _op = staticmethod(_conv.normalized_generative_conv_transpose3d)


__all__ = [
    "Conv3d",
    "ConvTranspose3d",
    "GenerativeConvTranspose3d",
    "NormalizedConvTranspose3d",
    "NormalizedGenerativeConvTranspose3d",
    "NormalizedSubmConv3d",
    "SubmConv3d",
]
