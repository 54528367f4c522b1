"""Quantized modules: sparse convolutions and linear layers with packed int4 / int8 weights.

Each module stores its weight packed as in :mod:`lattice.core.quantized` — ``weight``
(uint32), ``scales`` and ``biases`` — plus an optional float ``bias``, all frozen like
``mlx.nn.QuantizedLinear`` (``unfreeze`` leaves the packed arrays frozen). Conv
modules keep MLX's dense layout ``(C_out, Kx, Ky, Kz, C_in)`` packed along ``C_in``;
``QuantizedLinear`` packs ``(out, in)`` exactly like ``mlx.nn.QuantizedLinear`` (with
``in`` zero-padded to the group size). Each ``__call__`` calls one op of
:mod:`lattice.ops` with a :class:`~lattice.core.quantized.QuantizedWeight`; the
routing layer picks the packed route. :func:`quantize` swaps a model's conv and
linear modules for these in place.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_map_with_path

from lattice.core.quantized import QuantizedWeight, quantize_weight
from lattice.nn import conv as fconv
from lattice.nn.conv import _channels, _flag, _Generative, _Regular, _Submanifold, _Transposed, _uniform
from lattice.ops import features as F

PACKED = ("weight", "scales", "biases")

__all__ = [
    "QuantizedConv3d",
    "QuantizedConvTranspose3d",
    "QuantizedGenerativeConvTranspose3d",
    "QuantizedLinear",
    "QuantizedSubmConv3d",
    "from_packed",
    "quantize",
]


class _Packed(nn.Module):
    """Packed-weight storage shared by the quantized modules."""

    _layout = "dense"  # QuantizedWeight layout of the stored weight

    def _pack(self, q: QuantizedWeight, bias: mx.array | None) -> None:
        self.group_size, self.bits = q.group_size, q.bits
        self.in_channels, self.out_channels = q.in_channels, q.out_channels
        self.weight, self.scales, self.biases = q.data, q.scales, q.biases
        if bias is not None:
            self.bias = bias
        self.freeze()

    def _quantize_fresh(self, weight: mx.array, bias: bool, group_size, bits) -> None:
        """Packs a freshly initialised float ``weight`` (and a zero bias when ``bias``)."""
        q = quantize_weight(weight, group_size=group_size, bits=bits)
        self._pack(q, mx.zeros((weight.shape[0],)) if bias else None)

    def unfreeze(self, *args, **kwargs) -> nn.Module:
        """Unfreezes like ``mlx.nn.Module.unfreeze``, except the packed arrays stay frozen."""
        super().unfreeze(*args, **kwargs)
        self.freeze(recurse=False, keys=list(PACKED))
        return self

    def _bias(self) -> mx.array | None:
        return self["bias"] if "bias" in self else None

    def _logical_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def qweight(self) -> QuantizedWeight:
        """The packed weight as a :class:`QuantizedWeight` (no copy)."""
        return QuantizedWeight(
            self["weight"],
            self["scales"],
            self["biases"],
            self.bits,
            self.group_size,
            self._logical_shape(),
            self._layout,
        )

    @property
    def nbytes(self) -> int:
        """Bytes of the packed weight (data + scales + biases), without the float bias."""
        return sum(int(self[k].nbytes) for k in PACKED)


class _QuantizedConv(fconv._Conv, _Packed):
    """The packed store of the conv modules (:class:`lattice.nn.conv._Conv`): the float
    module's constructor plus ``group_size`` and ``bits``; subclasses name their float twin."""

    _float: type[nn.Module]
    _options = {**fconv._Conv._options, "group_size": None, "bits": 4}

    def _store(self, weight: mx.array, bias: bool, group_size, bits) -> None:
        self._quantize_fresh(weight, bias, group_size, bits)

    def _weight(self) -> QuantizedWeight:
        return self.qweight()

    def _logical_shape(self) -> tuple[int, ...]:
        return (self.out_channels, *self.spec.size, self.in_channels)

    @classmethod
    def from_conv(cls, module: nn.Module, group_size: int | None = None, bits: int = 4):
        """The quantized twin of a float conv module (same geometry; its bias kept in float)."""
        name = f"{cls.__name__}.from_conv"
        normalized = type(module).__name__.startswith("Normalized")
        if not isinstance(module, cls._float) or normalized:
            why = " (normalised convolutions need the float weight)" if normalized else ""
            raise TypeError(f"[{name}] expected a {cls._float.__name__}, got {type(module).__name__}{why}")
        return _twin(cls, module, quantize_weight(module["weight"], group_size=group_size, bits=bits))


class QuantizedConv3d(_Regular, _QuantizedConv):
    """:class:`lattice.nn.Conv3d` with a packed weight; ``conv(x, coordinates=target)`` is target mode."""

    _float = fconv.Conv3d


class QuantizedSubmConv3d(_Submanifold, _QuantizedConv):
    """:class:`lattice.nn.SubmConv3d` with a packed weight (output support = input support)."""

    _float = fconv.SubmConv3d


class QuantizedConvTranspose3d(_Transposed, _QuantizedConv):
    """:class:`lattice.nn.ConvTranspose3d` with a packed weight, on generated support only
    (an explicit ``target`` is rejected by the op: use the float module there).
    """

    _float = fconv.ConvTranspose3d


class QuantizedGenerativeConvTranspose3d(_Generative, _QuantizedConv):
    """:class:`lattice.nn.GenerativeConvTranspose3d` with a packed weight (generated or explicit target)."""

    _float = fconv.GenerativeConvTranspose3d


class QuantizedLinear(_Packed):
    """``y = x W^T + b`` with a packed ``(output_dims, input_dims)`` weight, on a SparseTensor's
    features or a plain array (route ``cpu.dequant_blas_gemm``).
    """

    _layout = "linear"

    def __init__(
        self,
        input_dims: int,
        output_dims: int,
        bias: bool = True,
        group_size: int | None = None,
        bits: int = 4,
    ) -> None:
        super().__init__()
        name = type(self).__name__
        input_dims = _channels(input_dims, "input_dims", name)
        output_dims = _channels(output_dims, "output_dims", name)
        _flag(bias, "bias", name)
        self._quantize_fresh(_uniform((output_dims, input_dims)), bias, group_size, bits)

    def _logical_shape(self) -> tuple[int, ...]:
        return (self.out_channels, self.in_channels)

    @classmethod
    def from_linear(cls, module: nn.Module, group_size: int | None = None, bits: int = 4) -> QuantizedLinear:
        """The quantized twin of an ``mlx.nn.Linear`` / ``lattice.nn.Linear`` (bias kept in float)."""
        if not isinstance(module, nn.Linear):
            raise TypeError(
                f"[{cls.__name__}.from_linear] expected an mlx.nn.Linear, got {type(module).__name__}"
            )
        return _twin(cls, module, quantize_weight(module["weight"], group_size=group_size, bits=bits))

    def _extra_repr(self) -> str:
        return (
            f"input_dims={self.in_channels}, output_dims={self.out_channels}, bias={'bias' in self}, "
            f"group_size={self.group_size}, bits={self.bits}"
        )

    def __call__(self, x):
        return F.linear(x, self.qweight(), self._bias())


# ---- whole models ------------------------------------------------------------------------------

_NORMALIZED = (
    fconv.NormalizedSubmConv3d,
    fconv.NormalizedConvTranspose3d,
    fconv.NormalizedGenerativeConvTranspose3d,
)
_CONVERSIONS: tuple[tuple[type, Callable], ...] = (
    (fconv.Conv3d, QuantizedConv3d.from_conv),
    (fconv.SubmConv3d, QuantizedSubmConv3d.from_conv),
    (fconv.ConvTranspose3d, QuantizedConvTranspose3d.from_conv),
    (fconv.GenerativeConvTranspose3d, QuantizedGenerativeConvTranspose3d.from_conv),
    (nn.Linear, QuantizedLinear.from_linear),
)


def _conversion(module: nn.Module) -> Callable | None:
    if isinstance(module, _NORMALIZED):
        return None
    return next((fn for cls, fn in _CONVERSIONS if isinstance(module, cls)), None)


def _twin(cls: type, module: nn.Module, q: QuantizedWeight) -> nn.Module:
    """A ``cls`` holding packed ``q``, with ``module``'s geometry and float bias."""
    obj = cls.__new__(cls)
    nn.Module.__init__(obj)
    if issubclass(cls, _QuantizedConv):
        obj.spec = module.spec
    obj._pack(q, module["bias"] if "bias" in module else None)
    return obj


def from_packed(module: nn.Module, weight: QuantizedWeight) -> nn.Module:
    """The quantized twin of float conv or linear ``module`` holding the already-packed
    ``weight`` (a stored bundle's tensors): nothing is quantized and ``module``'s float
    weight is never read, so it may be an unevaluated placeholder. The float bias is kept.
    ``weight`` must have the logical shape of ``module``'s weight."""
    fn = _conversion(module)
    if fn is None:
        raise TypeError(f"[from_packed] {type(module).__name__} has no quantized form")
    if not isinstance(weight, QuantizedWeight):
        raise TypeError(f"[from_packed] weight must be a QuantizedWeight, got {type(weight).__name__}")
    want = tuple(module["weight"].shape)
    if weight.shape != want or weight.layout not in ("linear", "dense"):
        raise ValueError(
            f"[from_packed] a {type(module).__name__} with weight {want} needs a linear or dense packed "
            f"weight of that shape, got {weight.layout} {weight.shape}"
        )
    return _twin(fn.__self__, module, weight)


def quantize(
    model: nn.Module,
    *,
    bits: int = 4,
    group_size: int | None = None,
    class_predicate: Callable[[str, nn.Module], bool] | None = None,
) -> nn.Module:
    """Swaps ``model``'s conv and linear leaf modules for their quantized forms, in place.

    Converted: ``Conv3d``, ``SubmConv3d``, ``ConvTranspose3d``, ``GenerativeConvTranspose3d``
    and ``mlx.nn.Linear`` (so ``lattice.nn.Linear``). Normalised convolutions keep their
    float weight. ``class_predicate(path, module)`` (as in ``mlx.nn.quantize``) chooses
    which convertible modules to quantize — e.g. to keep a ``ConvTranspose3d`` that is
    called with an explicit target in float. Returns ``model``.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"[quantize] model must be an mlx.nn.Module, got {type(model).__name__}")
    # check the parameters once, before any module is swapped
    quantize_weight(mx.zeros((1, 32)), group_size=32 if group_size is None else group_size, bits=bits)

    def convert(path: str, module: nn.Module) -> nn.Module:
        fn = _conversion(module)
        if fn is None or (class_predicate is not None and not class_predicate(path, module)):
            return module
        return fn(module, group_size=group_size, bits=bits)

    leaves = tree_map_with_path(convert, model.leaf_modules(), is_leaf=nn.Module.is_module)
    model.update_modules(leaves)
    return model


def to_quantized(
    module: nn.Module, group_size: int | None = None, bits: int | None = None, mode: str = "affine", **kwargs
) -> nn.Module:
    """The quantized twin of one float conv / linear module: what ``module.to_quantized``
    returns, so ``mlx.nn.quantize(model)`` converts lattice's modules into lattice's quantized
    modules (``bits=None``: 4, ``group_size=None``: lattice's default). Normalised
    convolutions come back unchanged (they need the float weight). Only ``mode='affine'``
    is packed; ``quantize_input`` is not supported."""
    name = f"{type(module).__name__}.to_quantized"
    if mode != "affine":
        raise ValueError(f"[{name}] lattice packs mode='affine' weights only, got mode={mode!r}")
    if kwargs.pop("quantize_input", False):
        raise ValueError(f"[{name}] quantize_input=True is not supported (weights only)")
    if kwargs:
        raise TypeError(f"[{name}] unexpected arguments {sorted(kwargs)}")
    fn = _conversion(module)
    if fn is None:
        return module
    return fn(module, group_size=group_size, bits=4 if bits is None else bits)
