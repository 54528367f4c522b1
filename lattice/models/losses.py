"""Segmentation losses in MLX: class-weighted cross-entropy and the Lovász-softmax.

The Lovász-softmax (Berman, Rannen Triki and Blaschko, CVPR 2018, "The Lovász-Softmax
loss: a tractable surrogate for the optimization of the intersection-over-union measure
in neural networks") is the convex Lovász extension of ``1 - IoU`` per class, applied to
the errors ``|[y == c] - p_c|`` sorted in decreasing order; averaged over the classes
present in the labels. It pushes the network towards the mIoU that segmentation is scored
by, and weighs a rare class as much as a common one.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as nn

from lattice.core.buffers import arange


def lovasz_softmax(probs: mx.array, labels: mx.array) -> mx.array:
    """Lovász-softmax loss of ``probs`` (N, C) softmax scores against ``labels`` (N,) in 0..C-1.

    Mean over the classes present in ``labels`` (a class absent there adds nothing; the
    loss of no rows is 0). Leave out ignored rows before the call (``mx.take``). The sort
    order is treated as a constant, as in the reference implementation: the gradient is
    the Lovász extension's, ``d loss / d error`` = the IoU increments in sorted order.
    """
    if probs.ndim != 2 or labels.shape != probs.shape[:1]:
        raise ValueError(
            f"[lovasz_softmax] needs probs (N, C) and labels (N,), got {probs.shape}, {labels.shape}"
        )
    n, c = probs.shape
    if n == 0:
        return mx.array(0.0, probs.dtype)
    fg = (labels.reshape(-1, 1) == arange(c).reshape(1, -1)).astype(probs.dtype)
    errors = mx.abs(fg - probs)
    order = mx.stop_gradient(mx.argsort(-errors, axis=0))
    err_sorted = mx.take_along_axis(errors, order, axis=0)
    fg_sorted = mx.take_along_axis(fg, order, axis=0)
    gts = fg.sum(axis=0)
    intersection = gts - mx.cumsum(fg_sorted, axis=0)
    union = gts + mx.cumsum(1.0 - fg_sorted, axis=0)
    jaccard = 1.0 - intersection / union
    grad = mx.concatenate([jaccard[:1], jaccard[1:] - jaccard[:-1]], axis=0)
    per_class = (err_sorted * mx.stop_gradient(grad)).sum(axis=0)
    present = (gts > 0).astype(probs.dtype)
    return (per_class * present).sum() / mx.maximum(present.sum(), 1.0)


def weighted_cross_entropy(logits: mx.array, labels: mx.array, weights: mx.array) -> mx.array:
    """Cross-entropy of ``logits`` (N, C) against ``labels`` (N,), each row weighted by its
    class's ``weights[label]`` and normalised by the sum of those weights (PyTorch's
    ``CrossEntropyLoss(weight=...)``, reduction ``mean``)."""
    w = weights[labels]
    ce = nn.losses.cross_entropy(logits, labels, reduction="none")
    return (ce * w).sum() / mx.maximum(w.sum(), 1e-12)


__all__ = ["lovasz_softmax", "weighted_cross_entropy"]
