"""Convolution modules: sparse 3-D convolutions of every relation kind as ``mlx.nn.Module``s.

Each module checks its constructor arguments (errors name the module and the values),
stores ``weight`` in MLX's dense layout ``(C_out, Kx, Ky, Kz, C_in)`` — initialised
like ``mlx.nn.Conv3d``: uniform in ``±sqrt(1 / (C_in * Kx * Ky * Kz))`` — and, unless
``bias=False``, a zero ``bias`` of shape ``(C_out,)``. Each ``__call__`` calls exactly
one op of :mod:`lattice.ops.conv`; there is no device logic here.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import mlx.core as mx

from lattice.core.tensor import SparseTensor
from lattice.nn._kernel import KernelModule
from lattice.ops import conv as C
from lattice.routing.explain import plan_of

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


def _flag(value, name: str, module: str) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"[{module}] {name} must be True or False, got {value!r}")
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


def _uniform(shape: tuple[int, ...]) -> mx.array:
    """A fresh weight initialised like ``mlx.nn.Conv3d`` / ``mlx.nn.Linear``: uniform in
    ``±sqrt(1 / fan_in)``, the fan-in being every axis but the first (``C_out``)."""
    scale = math.sqrt(1.0 / math.prod(shape[1:]))
    return mx.random.uniform(low=-scale, high=scale, shape=shape)


def _one_target(target, coordinates, module: str):
    if target is not None and coordinates is not None:
        raise ValueError(f"[{module}] give the output support as target or as coordinates, not both")
    return target if target is not None else coordinates


class _Conv(KernelModule):
    """One sparse convolution module: a relation kind — ``_geometry``, ``_odd``, ``_op`` and
    ``__call__``, from the kind mixins below — times a weight store — ``_options`` (the
    keywords after the geometry) and ``_store`` / ``_weight``: float here, normalised in
    :class:`_Normalized`, packed in :mod:`lattice.nn.quantized`."""

    _positional = ("in_channels", "out_channels")
    _options: dict[str, object] = {"bias": True}
    _op: Callable  # the op of lattice.ops.conv, called as op(x, weight, bias, **geometry, ...)

    @classmethod
    def _keywords(cls) -> dict[str, object]:
        return {**cls._geometry, **cls._options}

    def _setup(self, in_channels, out_channels, bias, **options) -> None:
        name = type(self).__name__
        super()._setup(**{k: options.pop(k) for k in self._geometry})
        in_channels = _channels(in_channels, "in_channels", name)
        out_channels = _channels(out_channels, "out_channels", name)
        _flag(bias, "bias", name)
        self._store(_uniform((out_channels, *self.spec.size, in_channels)), bias, **options)

    def _store(self, weight: mx.array, bias: bool, **options) -> None:
        raise NotImplementedError

    def _weight(self):
        raise NotImplementedError

    def _op_options(self) -> dict:
        return {}

    def _bias(self) -> mx.array | None:
        return self["bias"] if "bias" in self else None

    def _apply(self, x: SparseTensor, **support) -> SparseTensor:
        return type(self)._op(x, self._weight(), self._bias(), **self._op_kwargs(support))

    def _op_kwargs(self, support: dict) -> dict:
        return {**self._geometry_kwargs(), **support, **self._op_options()}

    def plan(self, x: SparseTensor, **support) -> C.ConvPlan:
        """The plan of this module's op on ``x``, not yet run (``.run()`` is the call; the
        convolution and what follows it as one op take it: ``lattice.ops.conv_affine``).
        ``support``: the op's ``coordinates=`` where the module's call takes a target. A
        subclass whose op is not one of :mod:`lattice.ops.conv`'s (mlx_lattice's adapters)
        has no plan (``ValueError``)."""
        return plan_of(type(self)._op, x, self._weight(), self._bias(), **self._op_kwargs(support))

    def _extra_repr(self) -> str:
        options = [f"{k}={getattr(self, k)}" for k in self._options if k != "bias"]
        return ", ".join(
            [
                f"{self.in_channels}, {self.out_channels}",
                *self._geometry_repr(),
                f"bias={'bias' in self}",
                *options,
            ]
        )


# ---- relation kinds: geometry, op and call ------------------------------------------------------


class _Regular:
    _geometry = {"kernel_size": 3, "stride": 1, "padding": 0, "dilation": 1}
    _op = staticmethod(C.conv3d)

    def __call__(self, x: SparseTensor, *, coordinates=None) -> SparseTensor:
        return self._apply(x, coordinates=coordinates)


class _Submanifold:
    _geometry = {"kernel_size": 3, "dilation": 1}
    _odd = True
    _op = staticmethod(C.subm_conv3d)

    def __call__(self, x: SparseTensor) -> SparseTensor:
        return self._apply(x)


class _Transposed:
    _geometry = {"kernel_size": 2, "stride": 2, "padding": 0, "dilation": 1}
    _op = staticmethod(C.conv_transpose3d)

    def __call__(self, x: SparseTensor, target=None, *, coordinates=None) -> SparseTensor:
        return self._apply(x, coordinates=_one_target(target, coordinates, type(self).__name__))


class _Generative(_Transposed):
    _geometry = {"kernel_size": 2, "stride": 2}
    _op = staticmethod(C.generative_conv_transpose3d)


# ---- float modules ------------------------------------------------------------------------------


class _SparseConv(_Conv):
    """The float store: ``weight`` and an optional zero ``bias``, both trainable."""

    def _store(self, weight: mx.array, bias: bool) -> None:
        self.weight = weight
        if bias:
            self.bias = mx.zeros((weight.shape[0],))

    def _weight(self) -> mx.array:
        return self["weight"]

    def to_quantized(
        self, group_size: int | None = None, bits: int | None = None, mode: str = "affine", **kw
    ):
        """This module's quantized twin (``lattice.nn.quantized.to_quantized``): what
        ``mlx.nn.quantize(model)`` calls."""
        from lattice.nn.quantized import to_quantized

        return to_quantized(self, group_size, bits, mode, **kw)

    @property
    def in_channels(self) -> int:
        return int(self["weight"].shape[-1])

    @property
    def out_channels(self) -> int:
        return int(self["weight"].shape[0])


class Conv3d(_Regular, _SparseConv):
    """Sparse convolution: output on ``unique(floor(coords / stride))``, or on ``coordinates``.

    Edge rule ``i = o * stride + k * dilation - padding``; output stride is
    ``x.stride * stride``. ``conv(x, coordinates=target)`` keeps the target's rows and
    order (a SparseTensor, a coordinate key or an ``(M, 4)`` coordinate array).
    """


class SubmConv3d(_Submanifold, _SparseConv):
    """Submanifold convolution: the output support is the input support (odd kernels).

    Edge rule ``i = o + k * dilation``; the output keeps the input's coordinate key.
    """


class ConvTranspose3d(_Transposed, _SparseConv):
    """Transposed convolution: ``o = i * stride + k * dilation - padding``.

    Output support: the deduplicated generated coordinates at stride ``x.stride / stride``,
    or an explicit ``target`` (rows and order kept) — typically the encoder's skip tensor
    in a U-Net. ``coordinates=`` is accepted as an alias of ``target``.
    """


class GenerativeConvTranspose3d(_Generative, _SparseConv):
    """Generative transposed convolution: every coordinate ``i * stride + k`` of each input's
    kernel footprint (no padding, no dilation), or an explicit ``target``.
    """


# ---- normalised modules: the float ones with ``eps`` and the normalised op ----------------------


class _Normalized(_SparseConv):
    _options = {**_SparseConv._options, "eps": 1e-8}

    def _store(self, weight: mx.array, bias: bool, eps) -> None:
        super()._store(weight, bias)
        self.eps = _eps(eps, type(self).__name__)

    def _op_options(self) -> dict:
        return {"eps": self.eps}


class NormalizedSubmConv3d(_Normalized, SubmConv3d):
    """``conv(X, W) / sqrt(conv(1, W**2) + eps) + b`` on the submanifold support."""

    _op = staticmethod(C.normalized_subm_conv3d)


class NormalizedConvTranspose3d(_Normalized, ConvTranspose3d):
    """Normalised transposed convolution (see :class:`NormalizedSubmConv3d`)."""

    _op = staticmethod(C.normalized_conv_transpose3d)


class NormalizedGenerativeConvTranspose3d(_Normalized, GenerativeConvTranspose3d):
    """Normalised generative transposed convolution (see :class:`NormalizedSubmConv3d`)."""

    _op = staticmethod(C.normalized_generative_conv_transpose3d)
