"""Feature ops that keep coordinate identity: linear, activations, dropout (normalisation:
``lattice.ops.norms``), and the helpers every row-wise op shares.

Each op takes a SparseTensor (and returns one on the same coordinate key and manager)
or a plain ``mx.array`` (and returns an array). Only the active rows (up to
``x.active_count``) are read; the result holds exactly those rows — except on a set a
GPU builder made for a ``lazy_rows`` manager, where every buffer row is computed (rows past
the count are ignored) so that the count is not read.
Every op asks the routing layer for its route and dispatches on it: ``linear`` its GEMM
route, the row-wise ops MLX's ops on the call's device (``lattice.routing.features``).
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn

from lattice.core._checks import DTypeError, dtype_name
from lattice.core.quantized import QuantizedWeight, quantize_weight
from lattice.core.tensor import SparseTensor
from lattice.routing import LinearRequest, requested_device, route_linear
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.features import RowwiseRequest, route_rowwise
from lattice.routing.registry import dispatch

FeatureInput = SparseTensor | mx.array
GELU_APPROXIMATIONS = ("none", "precise", "tanh", "fast")
GEMM_DTYPES = (mx.float32, mx.float16, mx.bfloat16)


# ---- shared helpers -------------------------------------------------------------------


def active_feats(x: SparseTensor) -> mx.array:
    """The features the row-wise ops run over: ``x.run_feats`` (the active rows; every
    buffer row of a lazily counted set, whose count is then not read)."""
    return x.run_feats


def with_feats(x: SparseTensor, feats: mx.array) -> SparseTensor:
    """``x``'s coordinates (same key and manager) with new features for its ``run_rows``."""
    if feats.shape[0] == x.capacity:
        return x.replace(feats=feats)
    if x.lazy:  # the live rows of a lazily counted set: back into its buffer
        pad = mx.zeros((x.capacity - feats.shape[0], feats.shape[1]), dtype=feats.dtype)
        return x.replace(feats=mx.concatenate([feats, pad], axis=0))
    coords = x.coord_manager.coords(x.coord_key)  # the key's own array of the live rows
    out = SparseTensor(coords, feats, x.stride, coord_key=x.coord_key, coord_manager=x.coord_manager)
    out._batch_counts = x._batch_counts  # same rows: already checked, not read again
    return out


def _split(x, op: str) -> tuple[mx.array, SparseTensor | None]:
    if isinstance(x, SparseTensor):
        return active_feats(x), x
    if isinstance(x, mx.array):
        return x, None
    raise TypeError(f"[{op}] x must be a SparseTensor or an mx.array, got {type(x).__name__}")


def _wrap(x: SparseTensor | None, y: mx.array) -> FeatureInput:
    return y if x is None else with_feats(x, y)


def rowwise_plan(x, op: str, fn: Callable[[mx.array], mx.array]) -> CallPlan:
    """The plan of a row-wise op: ``fn`` over the features on the route's device."""
    feats, st = _split(x, op)
    channels = int(feats.shape[-1]) if feats.ndim else 0
    route = route_rowwise(RowwiseRequest(op, dtype_name(feats.dtype), channels, requested_device(None)))
    return CallPlan(route, lambda: _wrap(st, dispatch(route, fn, feats)))


def _rowwise_example(x, req):
    """``lattice explain`` of a row-wise op: ``x`` (per-channel statistics where it takes them)."""
    return (x,), {}


def _channel_vector(value, name: str, channels: int, op: str, *, required: bool = False) -> mx.array | None:
    if value is None:
        if required:
            raise ValueError(f"[{op}] {name} is required")
        return None
    if not isinstance(value, mx.array):
        value = mx.array(value)
    if value.shape != (channels,):
        raise ValueError(f"[{op}] {name} must have shape ({channels},), got {tuple(value.shape)}")
    return value


def _positive(value: float, name: str, op: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"[{op}] {name} must be a positive number, got {value!r}")
    return float(value)


# ---- linear ---------------------------------------------------------------------------


def _linear_out_channels(weight, c_in: int, op: str) -> int:
    """C_out of a dense ``(out, in)`` weight or a packed linear ``QuantizedWeight``."""
    if isinstance(weight, QuantizedWeight):
        if weight.layout != "linear" or weight.in_channels != c_in:
            raise ValueError(f"[{op}] packed weight must be a linear (out, {c_in}) weight, got {weight!r}")
        return weight.out_channels
    if not isinstance(weight, mx.array):
        raise TypeError(f"[{op}] weight must be an mx.array, got {type(weight).__name__}")
    if weight.ndim != 2 or weight.shape[1] != c_in:
        raise ValueError(f"[{op}] weight must have shape (out, {c_in}), got {tuple(weight.shape)}")
    return int(weight.shape[0])


def _packed_dtype(feats_dtype: mx.Dtype) -> mx.Dtype:
    """Packed weights compute in the features' float dtype (float32 for integer features)."""
    return feats_dtype if feats_dtype in GEMM_DTYPES else mx.result_type(feats_dtype, mx.float32)


def _linear_example(x, req):
    """``lattice explain linear``: a dense (or packed) weight of the requested channels."""
    w = mx.zeros((req.channels[-1], x.channels), dtype=getattr(mx, req.dtype))
    if req.quantize:
        w = quantize_weight(w.astype(mx.float32), bits=req.quantize)
    return (x, w), {"device": req.device}


@explainable(example=_linear_example, returns=FeatureInput)
def linear(
    x: FeatureInput, weight: mx.array | QuantizedWeight, bias: mx.array | None = None, *, device=None
) -> CallPlan:
    """``y = x W^T + b`` on the features, with ``weight`` ``(out, in)`` as in ``mlx.nn.Linear``.

    ``weight`` may be a packed linear ``QuantizedWeight`` (route ``cpu.dequant_blas_gemm``;
    the result keeps the features' float dtype).

    The route comes from ``lattice.routing.route_linear``: on the CPU one GEMM through
    the linked BLAS (``cpu.blas_gemm``), on a GPU MLX's matmul. A plain array may have
    any leading dimensions ``(..., in)``. Operands are promoted to a common float dtype.
    """
    op = "linear"
    feats, st = _split(x, op)
    packed = isinstance(weight, QuantizedWeight)
    if feats.ndim < 1:
        raise ValueError(f"[{op}] x must have at least one dimension, got shape {tuple(feats.shape)}")
    c_in = int(feats.shape[-1])
    c_out = _linear_out_channels(weight, c_in, op)
    if bias is not None:
        if not isinstance(bias, mx.array):
            raise TypeError(f"[{op}] bias must be an mx.array, got {type(bias).__name__}")
        if bias.shape != (c_out,):
            raise ValueError(f"[{op}] bias must have shape ({c_out},), got {tuple(bias.shape)}")
    dtype = _packed_dtype(feats.dtype) if packed else mx.result_type(feats.dtype, weight.dtype)
    if dtype not in GEMM_DTYPES:
        names = tuple(dtype_name(d) for d in GEMM_DTYPES)
        raise DTypeError(
            f"[{op}] features and weight must promote to one of {names}, got {dtype_name(dtype)}"
        )
    lead = tuple(feats.shape[:-1])
    a = feats.reshape(-1, c_in).astype(dtype)
    req = LinearRequest(
        op=op,
        dtype=dtype_name(dtype),
        rows=int(a.shape[0]),
        c_in=c_in,
        c_out=c_out,
        device=requested_device(device),
        **(weight.route_fields if packed else {}),
    )
    route = route_linear(req)

    def run() -> FeatureInput:
        y = dispatch(route, a, weight if packed else weight.astype(dtype))
        if bias is not None:
            y = y + bias.astype(dtype)
        return _wrap(st, y.reshape(*lead, c_out))

    return CallPlan(route, run)


# ---- activations ----------------------------------------------------------------------


def _elementwise(fn: Callable[[mx.array], mx.array]) -> Callable[[mx.array], mx.array]:
    """``fn``, a shape-keeping element-wise function, not called on features with no
    element: MLX 0.32.4's CUDA backend ends the process (SIGFPE) when it evaluates a compiled
    element-wise function (mlx.nn's activations are ``mx.compile``d) on an empty array (seen
    on the H200: ``relu`` of a tensor whose buffer has no live row)."""

    def run(feats: mx.array) -> mx.array:
        return feats if feats.size == 0 else fn(feats)

    return run


def _activation(name: str, fn: Callable[[mx.array], mx.array], doc: str) -> Callable:
    """The row-wise op ``name``: ``fn`` (an MLX activation) on the features."""

    def body(x: FeatureInput) -> CallPlan:
        return rowwise_plan(x, name, _elementwise(fn))

    body.__name__ = body.__qualname__ = name
    body.__doc__ = doc
    return explainable(example=_rowwise_example, returns=FeatureInput)(body)


relu = _activation("relu", nn.relu, "``max(x, 0)`` on the features.")
sigmoid = _activation("sigmoid", mx.sigmoid, "Logistic sigmoid on the features.")
silu = _activation("silu", nn.silu, "``x * sigmoid(x)`` on the features.")
tanh = _activation("tanh", mx.tanh, "Hyperbolic tangent on the features.")


@explainable(example=_rowwise_example, returns=FeatureInput)
def softplus(x: FeatureInput, *, beta: float = 1.0, threshold: float = 20.0) -> CallPlan:
    """``log(1 + exp(beta * x)) / beta`` on the features, and ``x`` itself where
    ``beta * x > threshold`` (``beta`` positive)."""
    op = "softplus"
    beta = _positive(beta, "beta", op)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)):
        raise TypeError(f"[{op}] threshold must be a number, got {threshold!r}")
    threshold = float(threshold)

    def fn(feats: mx.array) -> mx.array:
        scaled = feats * beta if beta != 1.0 else feats
        soft = nn.softplus(scaled) if beta == 1.0 else nn.softplus(scaled) / beta
        return mx.where(scaled > threshold, feats, soft)

    return rowwise_plan(x, op, _elementwise(fn))


@explainable(example=_rowwise_example, returns=FeatureInput)
def gelu(x: FeatureInput, *, approximate: str = "none") -> CallPlan:
    """GELU: exact (``'none'``), tanh approximation (``'precise'`` / ``'tanh'``) or ``'fast'``."""
    op = "gelu"
    if approximate not in GELU_APPROXIMATIONS:
        raise ValueError(f"[{op}] approximate must be one of {GELU_APPROXIMATIONS}, got {approximate!r}")
    fn = {"none": nn.gelu, "precise": nn.gelu_approx, "tanh": nn.gelu_approx, "fast": nn.gelu_fast_approx}
    return rowwise_plan(x, op, _elementwise(fn[approximate]))


@explainable(example=_rowwise_example, returns=FeatureInput)
def leaky_relu(x: FeatureInput, *, negative_slope: float = 0.01) -> CallPlan:
    """``max(negative_slope * x, x)`` on the features."""
    op = "leaky_relu"
    if isinstance(negative_slope, bool) or not isinstance(negative_slope, (int, float)):
        raise TypeError(f"[{op}] negative_slope must be a number, got {negative_slope!r}")
    return rowwise_plan(x, op, _elementwise(lambda f: nn.leaky_relu(f, negative_slope)))


@explainable(example=_rowwise_example, returns=FeatureInput)
def dropout(
    x: FeatureInput, *, p: float = 0.5, training: bool = True, key: mx.array | None = None
) -> CallPlan:
    """Zeroes each feature with probability ``p`` and scales the rest by ``1 / (1 - p)``.

    Identity when ``training`` is False or ``p == 0``. ``key`` (optional) is an
    ``mx.random`` key for a reproducible mask.
    """
    op = "dropout"
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < 1:
        raise ValueError(f"[{op}] p must be in [0, 1), got {p!r}")
    if not training or p == 0:
        return rowwise_plan(x, op, _same)

    def drop(feats: mx.array) -> mx.array:
        keep = mx.random.bernoulli(1.0 - p, feats.shape, key=key)
        scale = mx.array(1.0 / (1.0 - p), dtype=feats.dtype)
        return mx.where(keep, feats * scale, mx.zeros((), dtype=feats.dtype))

    return rowwise_plan(x, op, drop)


def _same(feats: mx.array) -> mx.array:
    return feats
