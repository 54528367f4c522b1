"""Feature operations that keep coordinate identity (documented ``mlx_lattice.ops.feature``).

The sparse forms (``relu``, ``linear``, ``layer_norm``, ``softplus`` with ``beta`` /
``threshold``, ``batch_norm`` with the statistics of the active rows where ``mean`` /
``var`` are None, ...) take a SparseTensor (or a plain array) and are lattice's own. The
dense forms of the documented API (``activation``,
``linear_features``, ``batch_norm_features``, ``layer_norm_features``,
``rms_norm_features``) are adapters onto the same lattice functions, which accept rank-2
``mx.array`` features too.
"""

from __future__ import annotations

import mlx.core as mx

from lattice import ops as _ops
from lattice.ops import (
    batch_norm,
    dropout,
    gelu,
    layer_norm,
    leaky_relu,
    linear,
    relu,
    rms_norm,
    sigmoid,
    silu,
    softplus,
    tanh,
)

_ACTIVATIONS = ("relu", "sigmoid", "gelu", "silu", "leaky_relu", "tanh", "softplus")


def activation(
    x,
    *,
    kind: str,
    approximate: str = "none",
    alpha: float = 0.01,
    beta: float = 1.0,
    threshold: float = 20.0,
):
    """The activation ``kind`` on dense features ``(N, C)`` (or a SparseTensor's features).

    ``kind`` names one of lattice's activations: ``relu``, ``sigmoid``, ``gelu`` (with
    ``approximate``), ``silu``, ``leaky_relu`` (slope ``alpha``), ``tanh``, ``softplus``
    (``beta``, ``threshold``). Maps to ``lattice.ops.<kind>``.
    """
    if kind == "gelu":
        return gelu(x, approximate=approximate)
    if kind == "leaky_relu":
        return leaky_relu(x, negative_slope=alpha)
    if kind == "softplus":
        return softplus(x, beta=beta, threshold=threshold)
    if kind in _ACTIVATIONS:
        return getattr(_ops, kind)(x)
    raise ValueError(f"[activation] kind must be one of {_ACTIVATIONS}, got {kind!r}")


def linear_features(x: mx.array, weight, bias=None) -> mx.array:
    """``x @ weight.T + bias`` on dense features ``(N, C_in)``; ``weight`` ``(C_out, C_in)`` or a
    linear ``QuantizedWeight``. Maps to ``lattice.ops.linear(x, weight, bias)``."""
    return linear(x, weight, bias)


def batch_norm_features(x: mx.array, scale, bias, mean, var, *, eps: float = 1e-05) -> mx.array:
    """Inference batch norm on dense features. Maps to
    ``lattice.ops.batch_norm(x, weight=scale, bias=bias, mean=mean, var=var, eps=eps)``."""
    return _ops.batch_norm(x, weight=scale, bias=bias, mean=mean, var=var, eps=eps)


def layer_norm_features(x: mx.array, scale, bias, *, eps: float = 1e-05) -> mx.array:
    """Per-row layer norm on dense features. Maps to
    ``lattice.ops.layer_norm(x, weight=scale, bias=bias, eps=eps)``."""
    return layer_norm(x, weight=scale, bias=bias, eps=eps)


def rms_norm_features(x: mx.array, scale, *, eps: float = 1e-05) -> mx.array:
    """Per-row RMS norm on dense features. Maps to ``lattice.ops.rms_norm(x, weight=scale, eps=eps)``."""
    return rms_norm(x, weight=scale, eps=eps)


__all__ = [
    "activation",
    "batch_norm",
    "batch_norm_features",
    "dropout",
    "gelu",
    "layer_norm",
    "layer_norm_features",
    "leaky_relu",
    "linear",
    "linear_features",
    "relu",
    "rms_norm",
    "rms_norm_features",
    "sigmoid",
    "silu",
    "softplus",
    "tanh",
]
