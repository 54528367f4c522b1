"""Normalisation of the feature rows: ``batch_norm`` (given or batch statistics), ``layer_norm``
and ``rms_norm`` (MLX's ops on the call's device, the row-wise route), the one-pass
per-channel affine map (``affine``: an eval-mode BatchNorm with the residual add and the ReLU
after it) and the training-mode BatchNorm with its add and activation (``batch_norm_act``),
each of the last two with routes of its own (``lattice.routing.features``).

Each op takes a SparseTensor (and returns one on the same coordinate key and manager) or a
plain ``mx.array`` (and returns an array), as the ops of ``lattice.ops.features``.
"""

from __future__ import annotations

import mlx.core as mx

from lattice.core._checks import DTypeError, dtype_name
from lattice.core.buffers import arange
from lattice.core.tensor import SparseTensor
from lattice.ops.features import (
    FeatureInput,
    _channel_vector,
    _positive,
    _rowwise_example,
    _split,
    _wrap,
    rowwise_plan,
)
from lattice.routing import requested_device
from lattice.routing.explain import CallPlan, explainable
from lattice.routing.features import (
    AffineRequest,
    BatchNormActRequest,
    route_affine,
    route_batch_norm_act,
)
from lattice.routing.registry import dispatch


def _stats_example(x, req):
    ones = mx.ones((x.channels,), dtype=x.dtype)
    return (x,), {"weight": ones, "bias": ones * 0, "mean": ones * 0, "var": ones}


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


# ---- the training-mode BatchNorm with its add and activation ----------------------------


def _batch_norm_act_example(x, req):
    """``lattice explain batch_norm_act``: a BasicBlock's second BatchNorm in training, with
    the residual add and the ReLU after it."""
    return (x,), {"residual": x, "activation": "relu"}


@explainable(example=_batch_norm_act_example, returns=tuple[FeatureInput, mx.array, mx.array])
def batch_norm_act(
    x: FeatureInput,
    weight: mx.array | None = None,
    bias: mx.array | None = None,
    *,
    eps: float = 1e-5,
    residual: FeatureInput | None = None,
    activation: str | None = None,
) -> CallPlan:
    """Training-mode BatchNorm of the rows, the residual add and the activation after it:
    ``activation((x - mean) / sqrt(var + eps) * weight + bias + residual)`` with ``mean``
    and ``var`` the per-channel mean and biased variance of ``x``'s rows.

    Returns ``(y, mean, var)``: ``y`` as ``x`` (a SparseTensor on its support, or an array),
    ``mean`` and ``var`` float32 ``(C,)`` (what a module folds into its running statistics).
    ``weight`` / ``bias``: ``(C,)`` (None: 1 / 0). ``residual`` and ``activation`` as in
    :func:`affine`. Float32 arithmetic; ``y`` has the operands' promoted float dtype. On the
    CPU: one native pass for the statistics and one for the rest, and two native passes for
    the gradient, rows split over the cores (MLX's CPU ops take a pass per operation, on one
    thread). Features must be ``(N, C)`` float32 / float16 / bfloat16; a lazily counted set
    (its spare rows must not enter the statistics) takes :func:`batch_norm` instead.
    """
    op = "batch_norm_act"
    feats, st = _split(x, op)
    if st is not None and st.lazy:
        raise ValueError(
            f"[{op}] a lazily counted set's buffer holds spare rows that must not enter the statistics; "
            "use lattice.ops.batch_norm, which masks them"
        )
    if feats.ndim != 2:
        raise ValueError(f"[{op}] features must be (N, C), got shape {tuple(feats.shape)}")
    if feats.dtype not in AFFINE_DTYPES:
        names = tuple(dtype_name(d) for d in AFFINE_DTYPES)
        raise DTypeError(f"[{op}] features must be one of {names}, got {dtype_name(feats.dtype)}")
    if activation not in AFFINE_ACTIVATIONS:
        raise ValueError(f"[{op}] activation must be one of {AFFINE_ACTIVATIONS}, got {activation!r}")
    c = int(feats.shape[1])
    weight = _channel_vector(weight, "weight", c, op)
    bias = _channel_vector(bias, "bias", c, op)
    for name, v in (("weight", weight), ("bias", bias)):
        if v is not None and not mx.issubdtype(v.dtype, mx.floating):
            raise DTypeError(f"[{op}] {name} must be floating point, got {dtype_name(v.dtype)}")
    eps = _positive(eps, "eps", op)
    r = _residual_feats(residual, feats, st, op)
    req = BatchNormActRequest(
        op,
        dtype_name(feats.dtype),
        c,
        residual=r is not None,
        activation=activation or "none",
        device=requested_device(None),
    )
    route = route_batch_norm_act(req)
    weight = mx.ones((c,), dtype=feats.dtype) if weight is None else weight  # keeps x's dtype
    bias = mx.zeros((c,), dtype=feats.dtype) if bias is None else bias

    def run():
        y, mean, var = dispatch(route, feats, weight, bias, r, activation == "relu", eps)
        return _wrap(st, y), mean, var

    return CallPlan(route, run)
