"""The GPU routes of the row-wise feature ops: MLX's own GPU ops over the rows, and the
affine map of ``lattice.ops.affine`` as one compiled MLX function (one fused kernel), which
the training-mode BatchNorm of ``lattice.ops.batch_norm_act`` applies after MLX's reductions."""

from __future__ import annotations

import functools

import mlx.core as mx

from lattice.routing import features as routes
from lattice.routing.registry import implements


@implements(routes.MLX_GPU_OPS)
def mlx_gpu_ops(fn, feats: mx.array) -> mx.array:
    """``fn(feats)`` on the GPU stream."""
    with mx.stream(mx.gpu):
        return fn(feats)


@functools.cache
def _compiled_affine(residual: bool, relu: bool):
    """The affine map as one ``mx.compile``d function of its operands, per form."""

    def affine(x, scale, shift, *rest):
        y = x.astype(mx.float32) * scale + shift
        if residual:
            y = y + rest[0].astype(mx.float32)
        return mx.maximum(y, 0.0) if relu else y

    return mx.compile(affine)


@implements(routes.COMPILED_AFFINE)
def compiled_affine(
    feats: mx.array, scale: mx.array, shift: mx.array, residual: mx.array | None, relu: bool
) -> mx.array:
    """``act(feats * scale + shift + residual)`` as one compiled function on the GPU stream,
    in float32, cast to the operands' promoted dtype. Empty features are not evaluated by a
    compiled function (MLX 0.32.4's CUDA backend ends the process on that)."""
    dtype = mx.result_type(
        feats.dtype, scale.dtype, shift.dtype, *([residual.dtype] if residual is not None else [])
    )
    if feats.size == 0:
        return mx.zeros(feats.shape, dtype=dtype)
    rest = () if residual is None else (residual,)
    with mx.stream(mx.gpu):
        y = _compiled_affine(residual is not None, relu)(
            feats, scale.astype(mx.float32), shift.astype(mx.float32), *rest
        )
        return y if y.dtype == dtype else y.astype(dtype)


def affine_then_concat(
    y: mx.array,
    scale: mx.array,
    shift: mx.array,
    residual: mx.array | None,
    relu: bool,
    concat: mx.array | None,
) -> mx.array:
    """``compiled_affine`` on a convolution's output ``y``, then ``concat``'s columns after it
    (MLX's concatenation, the promoted dtype): ``gpu.conv_then_affine``'s second half, and what
    the CUDA kernels' fused epilogue computes (its VJP, and its result where no kernel runs)."""
    y = compiled_affine(y, scale, shift, residual, relu)
    if concat is None:
        return y
    with mx.stream(mx.gpu):
        return mx.concatenate([y, concat], axis=1)


@functools.cache
def _compiled_norm(residual: bool, relu: bool):
    """``act((x - mean) * scale + bias + residual)`` as one ``mx.compile``d function, per form."""

    def norm(x, mean, scale, bias, *rest):
        y = (x.astype(mx.float32) - mean) * scale + bias
        if residual:
            y = y + rest[0].astype(mx.float32)
        return mx.maximum(y, 0.0) if relu else y

    return mx.compile(norm)


@implements(routes.GPU_BATCH_NORM)
def gpu_batch_norm_act(
    feats: mx.array,
    weight: mx.array,
    bias: mx.array,
    residual: mx.array | None,
    relu: bool,
    eps: float,
) -> tuple[mx.array, mx.array, mx.array]:
    """``(out, mean, var)``: float32 batch mean and biased variance by MLX's GPU reductions,
    then ``act((x - mean) * scale + bias + residual)`` as one compiled function (the native
    route's arithmetic). Empty features are not evaluated by a compiled function (MLX 0.32.4's
    CUDA SIGFPE)."""
    operands = (feats, weight, bias) + (() if residual is None else (residual,))
    dtype = mx.result_type(*(a.dtype for a in operands))
    if feats.size == 0:  # the statistics of no rows are NaN, as the CPU route's
        nan = mx.full((feats.shape[1],), float("nan"), dtype=mx.float32)
        return mx.zeros(feats.shape, dtype=dtype), nan, nan
    with mx.stream(mx.gpu):
        f = feats.astype(mx.float32)
        mean = mx.mean(f, axis=0)
        var = mx.mean(mx.square(f - mean), axis=0)
        scale = weight.astype(mx.float32) * mx.rsqrt(var + eps)
        rest = () if residual is None else (residual,)
        out = _compiled_norm(residual is not None, relu)(f, mean, scale, bias.astype(mx.float32), *rest)
    return (out if out.dtype == dtype else out.astype(dtype)), mean, var
