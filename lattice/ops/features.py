"""Feature ops that keep coordinate identity: linear, activations, dropout, normalisation,
the one-pass per-channel affine map.

Each op takes a SparseTensor (and returns one on the same coordinate key and manager)
or a plain ``mx.array`` (and returns an array). Only the active rows (up to
``x.active_count``) are read; the result holds exactly those rows — except on a set a
GPU builder made for a ``lazy_rows`` manager, where every buffer row is computed (rows past
the count are ignored) so that the count is not read.
Every op asks the routing layer for its route and dispatches on it: ``linear`` its GEMM
route, the row-wise ops MLX's ops on the call's device, ``affine`` its one-pass route
(``lattice.routing.features``).
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn

from lattice.core._checks import DTypeError, dtype_name
from lattice.core.buffers import arange
from lattice.core.quantized import QuantizedWeight, quantize_weight
from lattice.core.tensor import SparseTensor
from lattice.routing import LinearRequest, requested_device, route_linear
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.features import AffineRequest, RowwiseRequest, route_affine, route_rowwise
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


def _stats_example(x, req):
    ones = mx.ones((x.channels,), dtype=x.dtype)
    return (x,), {"weight": ones, "bias": ones * 0, "mean": ones * 0, "var": ones}


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


# ---- normalisation --------------------------------------------------------------------


@explainable(example=_stats_example, returns=FeatureInput)
def batch_norm(
    x: FeatureInput,
    *,
    weight: mx.array | None = None,
    bias: mx.array | None = None,
    mean: mx.array | None = None,
    var: mx.array | None = None,
    eps: float = 1e-5,
) -> CallPlan:
    """Batch norm: ``(x - mean) / sqrt(var + eps) * weight + bias`` per channel.

    ``mean`` / ``var`` (shape ``(C,)``) given: the inference form. None: the statistics
    of the active rows (each one alone: the mean, the biased variance about that mean).
    ``weight`` / ``bias`` may be None (no affine part).
    """
    op = "batch_norm"
    feats, st = _split(x, op)
    c = int(feats.shape[-1]) if feats.ndim else 0
    mean = _channel_vector(mean, "mean", c, op)
    var = _channel_vector(var, "var", c, op)
    weight = _channel_vector(weight, "weight", c, op)
    bias = _channel_vector(bias, "bias", c, op)
    eps = _positive(eps, "eps", op)
    count = st.active_rows if st is not None and st.lazy else None  # never read

    def normalise(feats: mx.array) -> mx.array:
        m, v = mean, var
        if m is None or v is None:
            batch_mean, batch_var = _batch_statistics(feats, count)
            m, v = batch_mean if m is None else m, batch_var if v is None else v
        y = (feats - m) * mx.rsqrt(v + eps)
        if weight is not None:
            y = y * weight
        y = y if bias is None else y + bias
        if count is None:
            return y
        return mx.where((arange(feats.shape[0]) < count)[:, None], y, mx.zeros((), dtype=y.dtype))

    return rowwise_plan(x, op, normalise)


def _batch_statistics(feats: mx.array, count: mx.array | None) -> tuple[mx.array, mx.array]:
    """Per-channel mean and biased variance over every axis but the last, summed in float32
    (returned in the features' float dtype). ``count``: only the first ``count`` rows of a
    lazily counted buffer enter them."""
    f = feats.astype(mx.float32)
    axes = tuple(range(feats.ndim - 1))
    if count is None:
        mean = mx.mean(f, axis=axes)
        var = mx.mean(mx.square(f - mean), axis=axes)
    else:
        live = (arange(feats.shape[0]) < count)[:, None]
        n = mx.maximum(count, 1).astype(mx.float32)
        mean = mx.sum(mx.where(live, f, 0.0), axis=0) / n
        var = mx.sum(mx.where(live, mx.square(f - mean), 0.0), axis=0) / n
    dtype = feats.dtype if mx.issubdtype(feats.dtype, mx.floating) else mx.float32
    return mean.astype(dtype), var.astype(dtype)


@explainable(example=_rowwise_example, returns=FeatureInput)
def layer_norm(
    x: FeatureInput, *, weight: mx.array | None = None, bias: mx.array | None = None, eps: float = 1e-5
) -> CallPlan:
    """Per-row normalisation over the channels (``mx.fast.layer_norm``), optional affine."""
    op = "layer_norm"
    feats, _ = _split(x, op)
    c = int(feats.shape[-1]) if feats.ndim else 0
    weight = _channel_vector(weight, "weight", c, op)
    bias = _channel_vector(bias, "bias", c, op)
    eps = _positive(eps, "eps", op)
    return rowwise_plan(x, op, lambda f: mx.fast.layer_norm(f, weight, bias, eps))


@explainable(example=_rowwise_example, returns=FeatureInput)
def rms_norm(x: FeatureInput, *, weight: mx.array | None = None, eps: float = 1e-5) -> CallPlan:
    """``x / sqrt(mean(x^2) + eps) * weight`` per row over the channels (``mx.fast.rms_norm``)."""
    op = "rms_norm"
    feats, _ = _split(x, op)
    c = int(feats.shape[-1]) if feats.ndim else 0
    weight = _channel_vector(weight, "weight", c, op)
    eps = _positive(eps, "eps", op)
    return rowwise_plan(x, op, lambda f: mx.fast.rms_norm(f, weight, eps))


# ---- the one-pass affine map ----------------------------------------------------------

AFFINE_ACTIVATIONS = (None, "relu")
AFFINE_DTYPES = (mx.float32, mx.float16, mx.bfloat16)  # the one pass's feature dtypes


def _affine_example(x, req):
    """``lattice explain affine``: a per-channel scale and shift, a residual on the same
    support and a ReLU (the form of a BasicBlock's second BatchNorm, add and activation)."""
    ones = mx.ones((x.channels,), dtype=mx.float32)
    return (x, ones, ones * 0), {"residual": x, "activation": "relu"}


def _residual_feats(residual, feats: mx.array, st: SparseTensor | None, op: str) -> mx.array | None:
    """The residual's rows: a SparseTensor on ``x``'s support (one manager and coordinate
    key, so its rows are ``x``'s rows in ``x``'s order) or, for an array ``x``, an array of
    ``x``'s shape."""
    if residual is None:
        return None
    if st is not None:
        if not isinstance(residual, SparseTensor):
            raise TypeError(
                f"[{op}] residual must be a SparseTensor for a SparseTensor x, got {type(residual).__name__}"
            )
        if not residual.same_coords(st):
            raise ValueError(
                f"[{op}] residual must be on x's support (the same coordinate manager and key); "
                "add tensors on other supports with lattice.ops.sparse_add"
            )
        r = residual.run_feats
    else:
        if not isinstance(residual, mx.array):
            raise TypeError(
                f"[{op}] residual must be an mx.array for an array x, got {type(residual).__name__}"
            )
        r = residual
    if r.shape != feats.shape:
        raise ValueError(f"[{op}] residual must have shape {tuple(feats.shape)}, got {tuple(r.shape)}")
    return r


@explainable(example=_affine_example, returns=FeatureInput)
def affine(
    x: FeatureInput,
    scale: mx.array | None = None,
    shift: mx.array | None = None,
    *,
    residual: FeatureInput | None = None,
    activation: str | None = None,
) -> CallPlan:
    """``activation(x * scale + shift + residual)`` per channel, in one pass over the rows.

    ``scale`` / ``shift``: shape ``(C,)`` (None: 1 / 0). ``residual``: a tensor on ``x``'s
    support (same coordinate manager and key; for an array ``x``, an array of its shape)
    added before the activation. ``activation``: None or ``"relu"``. Float32 arithmetic;
    the result has the operands' promoted float dtype. This is what an eval-mode
    BatchNorm (``lattice.nn.BatchNorm.affine()``), the residual add after it and the ReLU
    become together: one native pass on the CPU, one compiled MLX function on a GPU.
    """
    op = "affine"
    feats, st = _split(x, op)
    if feats.ndim != 2:
        raise ValueError(f"[{op}] features must be (N, C), got shape {tuple(feats.shape)}")
    if feats.dtype not in AFFINE_DTYPES:
        names = tuple(dtype_name(d) for d in AFFINE_DTYPES)
        raise DTypeError(f"[{op}] features must be one of {names}, got {dtype_name(feats.dtype)}")
    if activation not in AFFINE_ACTIVATIONS:
        raise ValueError(f"[{op}] activation must be one of {AFFINE_ACTIVATIONS}, got {activation!r}")
    c = int(feats.shape[1])
    scale = _channel_vector(scale, "scale", c, op)
    shift = _channel_vector(shift, "shift", c, op)
    for name, v in (("scale", scale), ("shift", shift)):
        if v is not None and not mx.issubdtype(v.dtype, mx.floating):
            raise DTypeError(f"[{op}] {name} must be floating point, got {dtype_name(v.dtype)}")
    r = _residual_feats(residual, feats, st, op)
    req = AffineRequest(
        op,
        dtype_name(feats.dtype),
        c,
        residual=r is not None,
        activation=activation or "none",
        device=requested_device(None),
    )
    route = route_affine(req)
    scale = mx.ones((c,), dtype=feats.dtype) if scale is None else scale  # keeps x's dtype
    shift = mx.zeros((c,), dtype=feats.dtype) if shift is None else shift
    return CallPlan(route, lambda: _wrap(st, dispatch(route, feats, scale, shift, r, activation == "relu")))
