"""The GPU route of dense feature GEMMs (``linear``): MLX's own matmul (cuBLAS / Metal)."""

from __future__ import annotations

import mlx.core as mx

from lattice.routing import linear as routes
from lattice.routing.device import capability
from lattice.routing.registry import implements


@implements(routes.MLX_MATMUL)
def mlx_matmul(a: mx.array, weight: mx.array) -> mx.array:
    """``a @ W^T`` on the GPU stream whatever the default device (where a GPU exists)."""
    with mx.stream(mx.gpu if capability().has_gpu else mx.default_device()):
        return mx.matmul(a, weight.T)
