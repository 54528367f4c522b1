"""Convolution modules: sparse 3-D convolutions of every relation kind as ``mlx.nn.Module``s.

Each module checks its constructor arguments (errors name the module and the values),
stores ``weight`` in MLX's dense layout ``(C_out, Kx, Ky, Kz, C_in)`` — initialised
like ``mlx.nn.Conv3d``: uniform in ``±sqrt(1 / (C_in * Kx * Ky * Kz))`` — and, unless
``bias=False``, a zero ``bias`` of shape ``(C_out,)``. Each ``__call__`` calls exactly
one op of :mod:`lattice.ops.conv`; there is no device logic here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import mlx.core as mx
import mlx.nn as nn

from lattice.core.kernel import KernelGeometry, KernelSpec
from lattice.core.tensor import SparseTensor
from lattice.ops import conv as C

IntOrTriple = int | Sequence[int]

__all__ = [
    "Conv3d",
    "ConvTranspose3d",
    "GenerativeConvTranspose3d",
    "NormalizedConvTranspose3d",
    "NormalizedGenerativeConvTranspose3d",
    "NormalizedSubmConv3d",
    "SubmConv3d",
]


def _channels(value, name: str, module: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"[{module}] {name} must be a positive int, got {value!r}")
    return value


def _eps(value, module: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or value < 0
    ):
        raise ValueError(f"[{module}] eps must be a finite number >= 0, got {value!r}")
    return float(value)


class _SparseConv(KernelGeometry, nn.Module):
    """Shared parameters and geometry of the convolution modules."""

    def __init__(self, in_channels: int, out_channels: int, spec: KernelSpec, bias: bool) -> None:
        super().__init__()
        name = type(self).__name__
        in_channels = _channels(in_channels, "in_channels", name)
        out_channels = _channels(out_channels, "out_channels", name)
        if not isinstance(bias, bool):
            raise ValueError(f"[{name}] bias must be True or False, got {bias!r}")
        self.spec = spec  # a frozen value object: kept out of the parameter tree
        scale = math.sqrt(1.0 / (in_channels * spec.volume))
        self.weight = mx.random.uniform(low=-scale, high=scale, shape=(out_channels, *spec.size, in_channels))
        if bias:
            self.bias = mx.zeros((out_channels,))

    @property
    def in_channels(self) -> int:
        return int(self["weight"].shape[-1])

    @property
    def out_channels(self) -> int:
        return int(self["weight"].shape[0])

    def _bias(self) -> mx.array | None:
        return self["bias"] if "bias" in self else None

    def _extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, "
            f"bias={'bias' in self}"
        )


def _odd_kernel(spec: KernelSpec, module: str) -> KernelSpec:
    if not spec.is_odd:
        raise ValueError(f"[{module}] kernel_size must be odd on every axis, got {spec.size}")
    return spec


def _one_target(target, coordinates, module: str):
    if target is not None and coordinates is not None:
        raise ValueError(f"[{module}] give the output support as target or as coordinates, not both")
    return target if target is not None else coordinates


class Conv3d(_SparseConv):
    """Sparse convolution: output on ``unique(floor(coords / stride))``, or on ``coordinates``.

    Edge rule ``i = o * stride + k * dilation - padding``; output stride is
    ``x.stride * stride``. ``conv(x, coordinates=target)`` keeps the target's rows and
    order (a SparseTensor, a coordinate key or an ``(M, 4)`` coordinate array).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        kernel_size: IntOrTriple = 3,
        stride: IntOrTriple = 1,
        padding: IntOrTriple = 0,
        dilation: IntOrTriple = 1,
        bias: bool = True,
    ) -> None:
        spec = KernelSpec(kernel_size, stride, padding, dilation, op=type(self).__name__)
        super().__init__(in_channels, out_channels, spec, bias)

    def __call__(self, x: SparseTensor, *, coordinates=None) -> SparseTensor:
        s = self.spec
        return C.conv3d(
            x,
            self["weight"],
            self._bias(),
            kernel_size=s.size,
            stride=s.stride,
            padding=s.padding,
            dilation=s.dilation,
            coordinates=coordinates,
        )


class SubmConv3d(_SparseConv):
    """Submanifold convolution: the output support is the input support (odd kernels).

    Edge rule ``i = o + k * dilation``; the output keeps the input's coordinate key.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        kernel_size: IntOrTriple = 3,
        dilation: IntOrTriple = 1,
        bias: bool = True,
    ) -> None:
        name = type(self).__name__
        spec = _odd_kernel(KernelSpec(kernel_size, 1, 0, dilation, op=name), name)
        super().__init__(in_channels, out_channels, spec, bias)

    def _extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"dilation={self.dilation}, bias={'bias' in self}"
        )

    def __call__(self, x: SparseTensor) -> SparseTensor:
        return C.subm_conv3d(
            x, self["weight"], self._bias(), kernel_size=self.spec.size, dilation=self.spec.dilation
        )


class ConvTranspose3d(_SparseConv):
    """Transposed convolution: ``o = i * stride + k * dilation - padding``.

    Output support: the deduplicated generated coordinates at stride ``x.stride / stride``,
    or an explicit ``target`` (rows and order kept) — typically the encoder's skip tensor
    in a U-Net. ``coordinates=`` is accepted as an alias of ``target``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        kernel_size: IntOrTriple = 2,
        stride: IntOrTriple = 2,
        padding: IntOrTriple = 0,
        dilation: IntOrTriple = 1,
        bias: bool = True,
    ) -> None:
        spec = KernelSpec(kernel_size, stride, padding, dilation, op=type(self).__name__)
        super().__init__(in_channels, out_channels, spec, bias)

    def __call__(self, x: SparseTensor, target=None, *, coordinates=None) -> SparseTensor:
        s = self.spec
        return C.conv_transpose3d(
            x,
            self["weight"],
            self._bias(),
            kernel_size=s.size,
            stride=s.stride,
            padding=s.padding,
            dilation=s.dilation,
            coordinates=_one_target(target, coordinates, type(self).__name__),
        )


class GenerativeConvTranspose3d(_SparseConv):
    """Generative transposed convolution: every coordinate ``i * stride + k`` of each input's
    kernel footprint (no padding, no dilation), or an explicit ``target``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        kernel_size: IntOrTriple = 2,
        stride: IntOrTriple = 2,
        bias: bool = True,
    ) -> None:
        spec = KernelSpec(kernel_size, stride, 0, 1, op=type(self).__name__)
        super().__init__(in_channels, out_channels, spec, bias)

    def _extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
            f"stride={self.stride}, bias={'bias' in self}"
        )

    def __call__(self, x: SparseTensor, target=None, *, coordinates=None) -> SparseTensor:
        return C.generative_conv_transpose3d(
            x,
            self["weight"],
            self._bias(),
            kernel_size=self.spec.size,
            stride=self.spec.stride,
            coordinates=_one_target(target, coordinates, type(self).__name__),
        )


class NormalizedSubmConv3d(SubmConv3d):
    """``conv(X, W) / sqrt(conv(1, W**2) + eps) + b`` on the submanifold support."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        kernel_size: IntOrTriple = 3,
        dilation: IntOrTriple = 1,
        bias: bool = True,
        eps: float = 1e-8,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size=kernel_size, dilation=dilation, bias=bias)
        self.eps = _eps(eps, type(self).__name__)

    def _extra_repr(self) -> str:
        return f"{super()._extra_repr()}, eps={self.eps}"

    def __call__(self, x: SparseTensor) -> SparseTensor:
        return C.normalized_subm_conv3d(
            x,
            self["weight"],
            self._bias(),
            kernel_size=self.spec.size,
            dilation=self.spec.dilation,
            eps=self.eps,
        )


class NormalizedConvTranspose3d(ConvTranspose3d):
    """Normalised transposed convolution (see :class:`NormalizedSubmConv3d`)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        kernel_size: IntOrTriple = 2,
        stride: IntOrTriple = 2,
        padding: IntOrTriple = 0,
        dilation: IntOrTriple = 1,
        bias: bool = True,
        eps: float = 1e-8,
    ) -> None:
        super().__init__(
            in_channels,
            out_channels,
            kernel_size=kernel_size,
            stride=stride,
            padding=padding,
            dilation=dilation,
            bias=bias,
        )
        self.eps = _eps(eps, type(self).__name__)

    def _extra_repr(self) -> str:
        return f"{super()._extra_repr()}, eps={self.eps}"

    def __call__(self, x: SparseTensor, target=None, *, coordinates=None) -> SparseTensor:
        s = self.spec
        return C.normalized_conv_transpose3d(
            x,
            self["weight"],
            self._bias(),
            kernel_size=s.size,
            stride=s.stride,
            padding=s.padding,
            dilation=s.dilation,
            coordinates=_one_target(target, coordinates, type(self).__name__),
            eps=self.eps,
        )


class NormalizedGenerativeConvTranspose3d(GenerativeConvTranspose3d):
    """Normalised generative transposed convolution (see :class:`NormalizedSubmConv3d`)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        *,
        kernel_size: IntOrTriple = 2,
        stride: IntOrTriple = 2,
        bias: bool = True,
        eps: float = 1e-8,
    ) -> None:
        super().__init__(in_channels, out_channels, kernel_size=kernel_size, stride=stride, bias=bias)
        self.eps = _eps(eps, type(self).__name__)

    def _extra_repr(self) -> str:
        return f"{super()._extra_repr()}, eps={self.eps}"

    def __call__(self, x: SparseTensor, target=None, *, coordinates=None) -> SparseTensor:
        return C.normalized_generative_conv_transpose3d(
            x,
            self["weight"],
            self._bias(),
            kernel_size=self.spec.size,
            stride=self.spec.stride,
            coordinates=_one_target(target, coordinates, type(self).__name__),
            eps=self.eps,
        )
