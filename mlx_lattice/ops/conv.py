"""Sparse convolution (documented ``mlx_lattice.ops.conv``).

``conv3d`` and ``subm_conv3d`` are lattice's own functions. The normalised ones skip the
normalisation for a 1x1x1 kernel, as documented (lattice's normalise it). The four
transposed ones are thin adapters over lattice's: they number the kernel
offsets of odd axes from 0, as 0.6.3 does (``fine = coarse * stride + k * dilation -
padding``, ``k`` in ``0 .. K-1``), where lattice centres them; see
:mod:`mlx_lattice._transposed` and docs/compat.md. Dense weights are ``(C_out, Kx, Ky,
Kz, C_in)`` (flattened offsets vary z fastest) or kernel-major ``(K, C_in, C_out)``; a
``QuantizedWeight`` is accepted too; a 1x1x1 kernel also takes ``(C_out, C_in)``.
``coordinates`` (a SparseTensor, a key or a coords array) selects target mode. lattice
adds a keyword-only ``device=`` to each.
"""

from __future__ import annotations

from lattice import ops as _ops
from lattice.core import KernelSpec
from lattice.ops import conv3d, subm_conv3d
from mlx_lattice._transposed import run_indexed


def _pointwise(kernel_size) -> bool:
    """A 1x1x1 kernel: the documented normalised convolutions skip the normalisation there."""
    return KernelSpec(kernel_size).volume == 1


def normalized_subm_conv3d(x, weight, bias=None, *, kernel_size=3, dilation=1, eps=1e-8, device=None):
    """``conv(X, W) / sqrt(conv(1, W**2) + eps) + b`` on the submanifold support; a 1x1x1
    kernel is the plain pointwise projection, as documented (lattice's normalises it too)."""
    if _pointwise(kernel_size):
        return subm_conv3d(x, weight, bias, kernel_size=kernel_size, dilation=dilation, device=device)
    return _ops.normalized_subm_conv3d(
        x, weight, bias, kernel_size=kernel_size, dilation=dilation, eps=eps, device=device
    )


def conv_transpose3d(
    x, weight, bias=None, *, kernel_size=2, stride=2, padding=0, dilation=1, coordinates=None, device=None
):
    """Transposed convolution onto ``unique(s * stride + k * dilation - padding)`` (``k`` from 0)
    or onto ``coordinates`` (lattice's ``conv_transpose3d`` with 0.6.3's offsets)."""
    return run_indexed(
        _ops.conv_transpose3d,
        x,
        weight,
        bias,
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        coordinates=coordinates,
        device=device,
        name="conv_transpose3d",
    )


def normalized_conv_transpose3d(
    x,
    weight,
    bias=None,
    *,
    kernel_size=2,
    stride=2,
    padding=0,
    dilation=1,
    eps=1e-8,
    coordinates=None,
    device=None,
):
    """``conv(X, W) / sqrt(conv(1, W**2) + eps) + b`` on the transposed support (0.6.3's offsets);
    a 1x1x1 kernel is the plain transposed projection, as documented."""
    if _pointwise(kernel_size):
        return conv_transpose3d(
            x,
            weight,
            bias,
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            coordinates=coordinates,
            device=device,
        )
    return run_indexed(
        _ops.normalized_conv_transpose3d,
        x,
        weight,
        bias,
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        coordinates=coordinates,
        eps=eps,
        device=device,
        name="normalized_conv_transpose3d",
    )


def generative_conv_transpose3d(
    x, weight, bias=None, *, kernel_size=2, stride=2, coordinates=None, device=None
):
    """Every coordinate ``s * stride + k`` (``k`` from 0) of each input, or ``coordinates``."""
    return run_indexed(
        _ops.generative_conv_transpose3d,
        x,
        weight,
        bias,
        kernel_size=kernel_size,
        stride=stride,
        coordinates=coordinates,
        device=device,
        name="generative_conv_transpose3d",
        has_padding=False,
    )


def normalized_generative_conv_transpose3d(
    x, weight, bias=None, *, kernel_size=2, stride=2, eps=1e-8, coordinates=None, device=None
):
    """The normalised generative transposed convolution (0.6.3's offsets); a 1x1x1 kernel is
    the plain generative projection, as documented."""
    if _pointwise(kernel_size):
        return generative_conv_transpose3d(
            x, weight, bias, kernel_size=kernel_size, stride=stride, coordinates=coordinates, device=device
        )
    return run_indexed(
        _ops.normalized_generative_conv_transpose3d,
        x,
        weight,
        bias,
        kernel_size=kernel_size,
        stride=stride,
        coordinates=coordinates,
        eps=eps,
        device=device,
        name="normalized_generative_conv_transpose3d",
        has_padding=False,
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
