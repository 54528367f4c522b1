"""The CPU route of the row-wise feature ops: MLX's own CPU ops over the rows (lattice's
native core has nothing faster for an activation or a normalisation)."""

from __future__ import annotations

import mlx.core as mx

from lattice.routing import features as routes
from lattice.routing.registry import implements


@implements(routes.MLX_CPU_OPS)
def mlx_cpu_ops(fn, feats: mx.array) -> mx.array:
    """``fn(feats)`` on the CPU stream."""
    with mx.stream(mx.cpu):
        return fn(feats)
