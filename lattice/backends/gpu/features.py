"""The GPU route of the row-wise feature ops: MLX's own GPU ops over the rows."""

from __future__ import annotations

import mlx.core as mx

from lattice.routing import features as routes
from lattice.routing.registry import implements


@implements(routes.MLX_GPU_OPS)
def mlx_gpu_ops(fn, feats: mx.array) -> mx.array:
    """``fn(feats)`` on the GPU stream."""
    with mx.stream(mx.gpu):
        return fn(feats)
