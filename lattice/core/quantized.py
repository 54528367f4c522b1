"""Packed affine int4 / int8 weights (MLX's ``mx.quantize`` layout) for linear and conv weights.

A :class:`QuantizedWeight` holds a weight quantized along its input channels ``C_in``:
every ``group_size`` consecutive input channels of one output channel (and one kernel
offset) share a ``scale`` and a ``bias``, and each element is stored as an unsigned
``bits``-bit integer ``q`` with ``w ≈ scale * q + bias``. ``data`` is exactly what
``mx.quantize(..., mode="affine")`` returns for the weight with ``C_in`` moved last and
zero-padded to a multiple of ``group_size``:

========  ================================  =====================================
layout    logical weight                    ``data`` (uint32)
========  ================================  =====================================
linear    ``(out, in)``                     ``(out, in_p * bits / 32)``
dense     ``(C_out, Kx, Ky, Kz, C_in)``     ``(C_out, Kx, Ky, Kz, in_p * bits / 32)``
mapped    ``(K, C_in, C_out)``              ``(K, C_out, in_p * bits / 32)``
========  ================================  =====================================

``scales`` and ``biases`` have the shape of ``data`` with the last axis ``in_p /
group_size``, in float16 (default) or float32. ``in_p`` is ``C_in`` rounded up to the
group size; the padded channels are dropped again by :func:`dequantize_weight`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import mlx.core as mx

from lattice.core._checks import DTypeError, dtype_name

BITS = (4, 8)
GROUP_SIZES = (32, 64, 128)
LAYOUTS = {2: "linear", 5: "dense", 3: "mapped"}  # by the logical weight's ndim
SCALE_DTYPES = (mx.float16, mx.float32)
WEIGHT_DTYPES = (mx.float32, mx.float16, mx.bfloat16)

__all__ = [
    "QuantizedWeight",
    "check_conv_weight",
    "default_group_size",
    "dequantize_mapped",
    "dequantize_weight",
    "quantize_weight",
]


def default_group_size(in_channels: int) -> int:
    """64 when ``in_channels >= 64``, else 32."""
    return 64 if in_channels >= 64 else 32


def _check_bits(bits, op: str) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits not in BITS:
        raise ValueError(f"[{op}] bits must be 4 or 8, got {bits!r}")
    return int(bits)


def _check_group_size(group_size, op: str) -> int:
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size not in GROUP_SIZES:
        raise ValueError(f"[{op}] group_size must be 32, 64 or 128, got {group_size!r}")
    return int(group_size)


@dataclass(frozen=True, eq=False)
class QuantizedWeight:
    """A packed affine-quantized weight and how to read it back.

    ``shape`` is the logical (float) weight shape and ``layout`` one of ``'linear'``
    ``(out, in)``, ``'dense'`` ``(C_out, Kx, Ky, Kz, C_in)`` or ``'mapped'``
    ``(K, C_in, C_out)``. See the module docstring for the packed shapes. Construction
    checks that every array has the shape and dtype the parameters imply.
    """

    data: mx.array
    scales: mx.array
    biases: mx.array
    bits: int
    group_size: int
    shape: tuple[int, ...]
    layout: str

    def __post_init__(self) -> None:
        op = "QuantizedWeight"
        _check_bits(self.bits, op)
        _check_group_size(self.group_size, op)
        shape = tuple(int(s) for s in self.shape)
        object.__setattr__(self, "shape", shape)
        if LAYOUTS.get(len(shape)) != self.layout:
            raise ValueError(f"[{op}] layout {self.layout!r} does not fit logical shape {shape}")
        if min(shape) < 1:
            raise ValueError(f"[{op}] every dimension of the logical shape must be positive, got {shape}")
        for name in ("data", "scales", "biases"):
            if not isinstance(getattr(self, name), mx.array):
                raise TypeError(
                    f"[{op}] {name} must be an mx.array, got {type(getattr(self, name)).__name__}"
                )
        if self.data.dtype != mx.uint32 or tuple(self.data.shape) != self.packed_shape:
            raise ValueError(
                f"[{op}] data must be uint32 of shape {self.packed_shape} for {self.layout} {shape}, "
                f"{self.bits} bits, group {self.group_size}; got {dtype_name(self.data.dtype)} "
                f"{tuple(self.data.shape)}"
            )
        for name in ("scales", "biases"):
            a = getattr(self, name)
            if a.dtype not in SCALE_DTYPES or tuple(a.shape) != self.group_shape:
                raise ValueError(
                    f"[{op}] {name} must be float16 or float32 of shape {self.group_shape}, "
                    f"got {dtype_name(a.dtype)} {tuple(a.shape)}"
                )
        if self.scales.dtype != self.biases.dtype:
            raise ValueError(
                f"[{op}] scales and biases must share a dtype, got {dtype_name(self.scales.dtype)} "
                f"and {dtype_name(self.biases.dtype)}"
            )

    # ---- logical geometry -------------------------------------------------------------

    @property
    def in_channels(self) -> int:
        """Logical input channels ``C_in`` (before padding)."""
        return self.shape[1] if self.layout in ("linear", "mapped") else self.shape[-1]

    @property
    def out_channels(self) -> int:
        """Output channels ``C_out``."""
        return self.shape[2] if self.layout == "mapped" else self.shape[0]

    @property
    def padded_in_channels(self) -> int:
        """``C_in`` rounded up to a multiple of ``group_size``."""
        return math.ceil(self.in_channels / self.group_size) * self.group_size

    @property
    def kernel_volume(self) -> int:
        """Kernel offsets ``K`` (1 for a linear weight)."""
        if self.layout == "linear":
            return 1
        return self.shape[0] if self.layout == "mapped" else math.prod(self.shape[1:4])

    # ---- the names mlx-lattice 0.6.3 documents for the same facts (its drop-in, issue 17) ----

    @property
    def weight(self) -> mx.array:
        """The packed uint32 words: ``data`` under mlx-lattice's documented name."""
        return self.data

    @property
    def storage_in_channels(self) -> int:
        """``padded_in_channels`` under mlx-lattice's documented name: the stored ``C_in``."""
        return self.padded_in_channels

    @property
    def kernel_size(self) -> tuple[int, int, int]:
        """The kernel's extent: ``(Kx, Ky, Kz)`` of a dense weight, ``(K, 1, 1)`` of a mapped
        one (its offsets in a row) and ``(1, 1, 1)`` of a linear one."""
        if self.layout == "dense":
            return tuple(self.shape[1:4])  # type: ignore[return-value]
        return (self.kernel_volume, 1, 1)

    @property
    def is_pointwise(self) -> bool:
        """One kernel offset: a linear weight, or a convolution of kernel volume 1."""
        return self.kernel_volume == 1

    @property
    def rows_shape(self) -> tuple[int, ...]:
        """Leading axes of the packed arrays (everything but the packed ``C_in`` axis)."""
        if self.layout == "mapped":
            return (self.shape[0], self.shape[2])
        return self.shape[:-1]

    @property
    def packed_shape(self) -> tuple[int, ...]:
        return (*self.rows_shape, self.padded_in_channels * self.bits // 32)

    @property
    def group_shape(self) -> tuple[int, ...]:
        return (*self.rows_shape, self.padded_in_channels // self.group_size)

    @property
    def dtype(self) -> mx.Dtype:
        """dtype of the scales and biases."""
        return self.scales.dtype

    @property
    def nbytes(self) -> int:
        """Bytes held: packed data plus scales plus biases."""
        return int(self.data.nbytes + self.scales.nbytes + self.biases.nbytes)

    @property
    def packing(self) -> str:
        """Short description for route facts: ``"int8, group 64, float16 scales"``."""
        return f"int{self.bits}, group {self.group_size}, {dtype_name(self.dtype)} scales"

    @property
    def route_fields(self) -> dict:
        """The fields of a route request (``ConvRequest`` / ``LinearRequest``) that describe it."""
        return {"weight_layout": "packed", "packing": self.packing}

    def __repr__(self) -> str:
        return (
            f"QuantizedWeight(layout={self.layout!r}, shape={self.shape}, bits={self.bits}, "
            f"group_size={self.group_size}, scales={dtype_name(self.dtype)}, nbytes={self.nbytes})"
        )


def quantize_weight(
    weight: mx.array, *, group_size: int | None = None, bits: int = 4, scale_dtype: mx.Dtype = mx.float16
) -> QuantizedWeight:
    """Packs a linear ``(out, in)``, dense conv ``(C_out, Kx, Ky, Kz, C_in)`` or mapped conv
    ``(K, C_in, C_out)`` weight into ``bits``-bit affine groups along ``C_in``.

    ``group_size`` is 32, 64 or 128 (default 64 when ``C_in >= 64``, else 32); ``C_in``
    is zero-padded to a multiple of it. ``data`` is ``mx.quantize`` of the float32
    weight; ``scales`` / ``biases`` are stored in ``scale_dtype`` (float16 or float32).
    """
    op = "quantize_weight"
    if isinstance(weight, QuantizedWeight):
        raise TypeError(f"[{op}] weight is already a QuantizedWeight ({weight.bits} bits)")
    if not isinstance(weight, mx.array):
        raise TypeError(f"[{op}] weight must be an mx.array, got {type(weight).__name__}")
    layout = LAYOUTS.get(weight.ndim)
    if layout is None:
        raise ValueError(
            f"[{op}] weight must be linear (out, in), dense (C_out, Kx, Ky, Kz, C_in) or mapped "
            f"(K, C_in, C_out), got shape {tuple(weight.shape)}"
        )
    if weight.size == 0:
        raise ValueError(
            f"[{op}] every dimension of the weight must be positive, got shape {tuple(weight.shape)}"
        )
    if weight.dtype not in WEIGHT_DTYPES:
        names = tuple(dtype_name(d) for d in WEIGHT_DTYPES)
        raise DTypeError(f"[{op}] weight must be one of {names}, got {dtype_name(weight.dtype)}")
    if scale_dtype not in SCALE_DTYPES:
        raise ValueError(f"[{op}] scale_dtype must be float16 or float32, got {scale_dtype}")
    bits = _check_bits(bits, op)
    rows = weight.transpose(0, 2, 1) if layout == "mapped" else weight  # C_in last
    c_in = int(rows.shape[-1])
    group_size = _check_group_size(default_group_size(c_in) if group_size is None else group_size, op)
    rows = rows.astype(mx.float32)
    if not bool(mx.all(mx.isfinite(rows)).item()):
        raise ValueError(f"[{op}] weight has non-finite values (inf or nan)")
    pad = -c_in % group_size
    if pad:
        rows = mx.pad(rows, [(0, 0)] * (rows.ndim - 1) + [(0, pad)])
    data, scales, biases = mx.quantize(rows, group_size, bits, mode="affine")
    scales, biases = scales.astype(scale_dtype), biases.astype(scale_dtype)
    if not bool(mx.all(mx.isfinite(scales)).item() and mx.all(mx.isfinite(biases)).item()):
        raise ValueError(f"[{op}] scales overflow {dtype_name(scale_dtype)}; use scale_dtype=mx.float32")
    q = QuantizedWeight(data, scales, biases, bits, group_size, tuple(weight.shape), layout)
    mx.eval(q.data, q.scales, q.biases)
    return q


def check_conv_weight(q: QuantizedWeight, spec, op: str) -> QuantizedWeight:
    """Checks a packed conv weight against a ``KernelSpec`` (``op`` names the caller in errors)."""
    if q.layout == "linear":
        raise ValueError(
            f"[{op}] a linear-layout QuantizedWeight {q.shape} is not a conv weight; quantize the dense "
            "(C_out, Kx, Ky, Kz, C_in) or mapped (K, C_in, C_out) weight"
        )
    if q.layout == "dense" and q.shape[1:4] != tuple(spec.size):
        raise ValueError(f"[{op}] packed weight kernel {q.shape[1:4]} does not match kernel_size {spec.size}")
    if q.layout == "mapped" and q.kernel_volume != spec.volume:
        raise ValueError(
            f"[{op}] packed mapped weight has {q.kernel_volume} offsets, kernel_size {spec.size} has {spec.volume}"
        )
    return q


def _unpacked(q: QuantizedWeight, dtype: mx.Dtype) -> mx.array:
    """The dequantized packed rows (C_in last, padding dropped)."""
    if not isinstance(q, QuantizedWeight):
        raise TypeError(f"[dequantize_weight] expected a QuantizedWeight, got {type(q).__name__}")
    # On the CPU stream on every device: float32 arithmetic (MLX 0.32.4's CUDA dequantize
    # differs from it by ~1e-3 relative, measured on the H200) and the weight is tiny.
    w = mx.dequantize(
        q.data, q.scales, q.biases, q.group_size, q.bits, mode="affine", dtype=dtype, stream=mx.cpu
    )
    return w[..., : q.in_channels] if q.padded_in_channels != q.in_channels else w


def dequantize_weight(q: QuantizedWeight, *, dtype: mx.Dtype = mx.float32) -> mx.array:
    """The float weight ``scale * q + bias`` in the logical shape and layout it was quantized from."""
    w = _unpacked(q, dtype)
    return w.transpose(0, 2, 1) if q.layout == "mapped" else w


def dequantize_mapped(q: QuantizedWeight, *, dtype: mx.Dtype = mx.float32) -> mx.array:
    """A conv weight dequantized straight into the mapped ``(K, C_in, C_out)`` layout the routes use."""
    w = _unpacked(q, dtype)
    if q.layout == "mapped":
        return w.transpose(0, 2, 1)
    if q.layout == "dense":
        return w.reshape(q.out_channels, q.kernel_volume, q.in_channels).transpose(1, 2, 0)
    raise ValueError(f"[dequantize_mapped] a {q.layout} weight {q.shape} is not a conv weight")


def dequantized(impl):
    """The packed-weight form of a conv route's implementation ``impl(feats, weight, rel)``
    (its ``dequant_*`` route): the weight dequantized into the mapped layout (tiny, on the
    CPU stream: ``_unpacked``), then ``impl`` itself."""

    def run(feats, qweight, rel, **kwargs):
        return impl(feats, dequantize_mapped(qweight), rel, **kwargs)

    run.__module__ = impl.__module__
    run.__name__ = f"dequant_{impl.__name__}"
    run.__qualname__ = f"dequantized({impl.__qualname__})"
    return run
