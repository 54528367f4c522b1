"""The CPU routes of the row-wise feature ops: MLX's own CPU ops over the rows, and the
native one-pass affine map (``csrc/backend/cpu/features.cpp``) for ``lattice.ops.affine``,
and the native passes of the training-mode BatchNorm for ``lattice.ops.batch_norm_act``."""

from __future__ import annotations

import mlx.core as mx

from lattice import _ext
from lattice.routing import features as routes
from lattice.routing.registry import implements


@implements(routes.MLX_CPU_OPS)
def mlx_cpu_ops(fn, feats: mx.array) -> mx.array:
    """``fn(feats)`` on the CPU stream."""
    with mx.stream(mx.cpu):
        return fn(feats)


@implements(routes.NATIVE_AFFINE)
def native_affine(
    feats: mx.array, scale: mx.array, shift: mx.array, residual: mx.array | None, relu: bool
) -> mx.array:
    """``act(feats * scale + shift + residual)`` in one native pass (differentiable)."""
    return _ext.affine_act(feats, scale, shift, residual, relu, stream=mx.cpu)


@implements(routes.NATIVE_BATCH_NORM)
def native_batch_norm_act(
    feats: mx.array,
    weight: mx.array,
    bias: mx.array,
    residual: mx.array | None,
    relu: bool,
    eps: float,
) -> tuple[mx.array, mx.array, mx.array]:
    """``(out, mean, var)``: the batch statistics and the affine pass, natively (differentiable;
    the backward is two native passes)."""
    out, mean, var = _ext.batch_norm_act(feats, weight, bias, residual, relu, eps, stream=mx.cpu)
    return out, mean, var
