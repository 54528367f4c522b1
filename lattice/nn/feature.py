"""Feature modules: subclasses of the ``mlx.nn`` ones that also accept a SparseTensor.

A SparseTensor input gives a SparseTensor on the same coordinates (same key and
manager); a plain ``mx.array`` input gives an array, exactly as the parent module
would. Constructors, parameters and state are the parents' own, so checkpoints and
``mlx.optimizers`` work unchanged. Each ``__call__`` calls one op of
``lattice.ops.features``.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx
import mlx.nn as nn

from lattice.core.buffers import arange
from lattice.core.tensor import SparseTensor
from lattice.ops import features as F
from lattice.ops import norms as N

FeatureInput = SparseTensor | mx.array


class Linear(nn.Linear):
    """``y = x W^T + b`` on the features (``weight`` is ``(output_dims, input_dims)``).

    Routed through ``lattice.ops.features.linear``: the linked BLAS on the CPU, MLX's
    matmul on a GPU.
    """

    def __call__(self, x: FeatureInput) -> FeatureInput:
        return F.linear(x, self["weight"], self["bias"] if "bias" in self else None)

    def to_quantized(
        self, group_size: int | None = None, bits: int | None = None, mode: str = "affine", **kw
    ):
        """lattice's ``QuantizedLinear`` twin (not mlx's): what ``mlx.nn.quantize(model)``
        calls (``lattice.nn.quantized.to_quantized``)."""
        from lattice.nn.quantized import to_quantized

        return to_quantized(self, group_size, bits, mode, **kw)


class _OnFeatures:
    """An ``mlx.nn`` activation applied by one op of ``lattice.ops.features``, named with
    the class: ``class ReLU(_OnFeatures, nn.ReLU, op=F.relu)``; ``_options`` gives the
    op's keywords from the parent module's settings."""

    _op: Callable

    def __init_subclass__(cls, *, op: Callable | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if op is not None:  # a subclass without one keeps its parent's
            cls._op = staticmethod(op)

    def _options(self) -> dict:
        return {}

    def __call__(self, x: FeatureInput) -> FeatureInput:
        return self._op(x, **self._options())


class ReLU(_OnFeatures, nn.ReLU, op=F.relu):
    """``max(x, 0)`` on the features."""


class Sigmoid(_OnFeatures, nn.Sigmoid, op=F.sigmoid):
    """Logistic sigmoid on the features."""


class GELU(_OnFeatures, nn.GELU, op=F.gelu):
    """GELU with ``approx`` in 'none' | 'precise' | 'tanh' | 'fast' (as ``mlx.nn.GELU``)."""

    def _options(self) -> dict:
        return {"approximate": self._approx}


class SiLU(_OnFeatures, nn.SiLU, op=F.silu):
    """``x * sigmoid(x)`` on the features."""


class LeakyReLU(_OnFeatures, nn.LeakyReLU, op=F.leaky_relu):
    """``max(negative_slope * x, x)`` on the features."""

    def _options(self) -> dict:
        return {"negative_slope": self._negative_slope}


class Tanh(_OnFeatures, nn.Tanh, op=F.tanh):
    """Hyperbolic tangent on the features."""


class Softplus(_OnFeatures, nn.Softplus, op=F.softplus):
    """``log(1 + exp(x))`` on the features."""


class Dropout(nn.Dropout):
    """Dropout on the features while ``self.training``; identity in eval mode."""

    def __call__(self, x: FeatureInput) -> FeatureInput:
        return F.dropout(x, p=1.0 - self._p_1, training=self.training)


class BatchNorm(nn.BatchNorm):
    """Batch norm over the active rows: batch statistics (and running-stat updates) in
    training mode, running statistics in eval mode — ``mlx.nn.BatchNorm``'s arithmetic on
    the feature matrix (biased variance to normalise, unbiased for the running variance).

    Batch statistics are computed once per call, in float32: one mean and one variance
    pass, the running variance scaled from the same sums. (``mlx.nn.BatchNorm`` computes
    the variance a second time for the running stats; that lazy graph kept every
    activation of a network alive until the parameters were evaluated, and was 40 % of a
    MinkUNet training forward on the CPU.)

    A 2-D float input takes the fused form (:meth:`normalize`): in eval mode one pass,
    ``x * scale + shift`` (``lattice.ops.affine``), where ``mlx.nn.BatchNorm`` takes four; under
    batch statistics ``lattice.ops.batch_norm_act`` (the statistics and the pass natively on
    the CPU, and the gradient in two native passes). The result differs from its arithmetic
    only by rounding.
    """

    @property
    def uses_running_stats(self) -> bool:
        """Eval mode with running statistics: the module is then the per-channel affine map
        :meth:`affine` gives."""
        return not self.training and self.track_running_stats

    def affine(self) -> tuple[mx.array, mx.array]:
        """The eval-mode map as ``(scale, shift)`` per channel, ``y = x * scale + shift``:
        ``scale = weight / sqrt(running_var + eps)``, ``shift = bias - running_mean * scale``
        (what ``lattice.ops.affine`` takes, with a residual and a ReLU where they follow)."""
        if not self.uses_running_stats:
            raise ValueError(
                "[BatchNorm] affine() is the eval-mode map of the running statistics: call "
                ".eval() first (and build the module with track_running_stats=True)"
            )
        scale = mx.rsqrt(self.running_var + self.eps)
        if "weight" in self:
            scale = self.weight * scale
        shift = -self.running_mean * scale
        if "bias" in self:
            shift = self.bias + shift
        return scale, shift

    def __call__(self, x: FeatureInput) -> FeatureInput:
        fused = self.normalize(x)
        if fused is not None:  # lattice.ops.affine / batch_norm_act instead of MLX's passes
            return fused
        sparse = isinstance(x, SparseTensor)
        feats = F.active_feats(x) if sparse else x
        if sparse and x.lazy and (self.training or not self.track_running_stats):
            y = self._batch_normed(feats, x.active_rows)  # the count is never read
        elif (
            self.training
            and isinstance(feats, mx.array)
            and 2 <= feats.ndim <= 4
            and feats.size > feats.shape[-1]
        ):
            y = self._batch_normed(feats, None)
        else:  # running statistics; batch statistics without tracking; the parent's own errors
            y = super().__call__(feats)
        return F.with_feats(x, y) if sparse else y

    def normalize(
        self,
        x: FeatureInput,
        *,
        residual: FeatureInput | None = None,
        activation: str | None = None,
    ) -> FeatureInput | None:
        """``activation(self(x) + residual)`` as one fused op, or None where it is not one.

        Running statistics (eval mode): ``lattice.ops.affine`` with :meth:`affine`. Batch
        statistics: ``lattice.ops.batch_norm_act``, the running statistics updated (in
        training) from the mean and variance it returns, as a call does. None for features
        other than (N, num_features) float32 / float16 / bfloat16, under batch statistics
        for a lazily counted set (its spare rows) or fewer than two rows, and for a residual
        on another support; the caller then takes the module, the add and the activation
        one after another. ``activation``: None or ``"relu"``."""
        sparse = isinstance(x, SparseTensor)
        feats = F.active_feats(x) if sparse else x
        if not (
            isinstance(feats, mx.array)
            and feats.ndim == 2
            and feats.dtype in N.AFFINE_DTYPES
            and feats.shape[1] == self.num_features
        ):
            return None
        if residual is not None and sparse and not residual.same_coords(x):
            return None
        if self.uses_running_stats:
            return N.affine(x, *self.affine(), residual=residual, activation=activation)
        if (sparse and x.lazy) or feats.shape[0] < 2:
            return None
        weight = self["weight"] if "weight" in self else None
        bias = self["bias"] if "bias" in self else None
        y, mean, var = N.batch_norm_act(
            x, weight, bias, eps=self.eps, residual=residual, activation=activation
        )
        if self.training and self.track_running_stats:
            self._update_running(mean, var, mx.array(feats.shape[0], mx.float32))
        return y

    def _update_running(self, mean: mx.array, var: mx.array, n: mx.array) -> None:
        """Folds batch statistics (biased ``var`` over ``n`` rows) into the running ones with
        ``momentum``, the variance unbiased (``mlx.nn.BatchNorm``'s update)."""
        mu = self.momentum
        self.running_mean = (1 - mu) * self.running_mean + mu * mean
        self.running_var = (1 - mu) * self.running_var + mu * var * n / mx.maximum(n - 1.0, 1.0)

    def scale_shift(self, x: FeatureInput) -> tuple[mx.array, mx.array] | None:
        """``(scale, shift)`` per channel with ``self(x) == x * scale + shift`` up to rounding:
        :meth:`affine` under running statistics, else the batch statistics of ``x``'s rows
        (the running statistics updated as a call does). None where the module is not such a
        map of ``x`` for ``lattice.ops.affine``: features other than (N, num_features) float32
        / float16 / bfloat16, or under batch statistics a lazily counted set (its spare rows)
        or fewer than two rows. (The module's own call and the model blocks take
        :meth:`normalize`, whose batch-statistics form is ``lattice.ops.batch_norm_act``.)"""
        sparse = isinstance(x, SparseTensor)
        feats = F.active_feats(x) if sparse else x
        if not (
            isinstance(feats, mx.array)
            and feats.ndim == 2
            and feats.dtype in N.AFFINE_DTYPES
            and feats.shape[1] == self.num_features
        ):
            return None
        if self.uses_running_stats:
            return self.affine()
        if (sparse and x.lazy) or feats.shape[0] < 2:
            return None
        mean, var = self._batch_stats(feats, None)
        scale = mx.rsqrt(var + self.eps)
        if "weight" in self:
            scale = self.weight * scale
        shift = -mean * scale
        if "bias" in self:
            shift = self.bias + shift
        if "weight" not in self:  # no float32 parameter to promote a 16-bit input
            scale, shift = scale.astype(feats.dtype), shift.astype(feats.dtype)
        return scale, shift

    def _batch_stats(self, feats: mx.array, count: mx.array | None) -> tuple[mx.array, mx.array]:
        """Float32 mean and biased variance over every axis but the last, the running
        statistics updated in training (the running variance unbiased). ``count`` (a lazily
        counted set's ``active_rows``, never read): only the first ``count`` rows of a 2-D
        buffer enter them; a count of one row is not rejected here (it would need a read):
        its running variance divides by 1."""
        f = feats.astype(mx.float32)
        axes = tuple(range(feats.ndim - 1))
        if count is None:
            n = mx.array(feats.size // feats.shape[-1], mx.float32)
            mean = mx.mean(f, axis=axes)
            ss = mx.sum(mx.square(f - mean), axis=axes)
        else:
            live = (arange(feats.shape[0], dtype=mx.int32) < count)[:, None]
            n = count.astype(mx.float32)
            mean = mx.sum(mx.where(live, f, 0.0), axis=0) / n
            ss = mx.sum(mx.where(live, mx.square(f - mean), 0.0), axis=0)
        if self.training and self.track_running_stats:
            self._update_running(mean, ss / n, n)
        return mean, ss / n

    def _batch_normed(self, feats: mx.array, count: mx.array | None) -> mx.array:
        """Batch statistics (:meth:`_batch_stats`) applied; with ``count`` the spare rows
        come out 0 (so no gradient reaches the statistics through them)."""
        mean, var = self._batch_stats(feats, count)
        mean, var = mean.astype(feats.dtype), var.astype(feats.dtype)
        y = (feats - mean) * mx.rsqrt(var + self.eps)
        if "weight" in self:
            y = self.weight * y + self.bias
        if count is None:
            return y
        live = (arange(feats.shape[0], dtype=mx.int32) < count)[:, None]
        return mx.where(live, y, mx.zeros((), dtype=y.dtype))


class LayerNorm(nn.LayerNorm):
    """Per-row normalisation over the channels, with the optional learned affine part."""

    def __call__(self, x: FeatureInput) -> FeatureInput:
        weight = self["weight"] if "weight" in self else None
        bias = self["bias"] if "bias" in self else None
        return N.layer_norm(x, weight=weight, bias=bias, eps=self.eps)


class RMSNorm(nn.RMSNorm):
    """``x / sqrt(mean(x^2) + eps) * weight`` per row over the channels."""

    def __call__(self, x: FeatureInput) -> FeatureInput:
        return N.rms_norm(x, weight=self["weight"], eps=self.eps)


__all__ = [
    "BatchNorm",
    "Dropout",
    "GELU",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "RMSNorm",
    "ReLU",
    "SiLU",
    "Sigmoid",
    "Softplus",
    "Tanh",
]
