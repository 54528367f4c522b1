"""Sparse pooling (documented ``mlx_lattice.ops.pool``): lattice's own functions.

Local pooling reduces over a kernel relation (``sum`` / ``avg`` give zero on empty
output rows; ``max`` needs a contributor); global pooling reduces per batch item to a
dense ``(B, C)`` array. lattice adds a keyword-only ``device=`` to each.
"""

from __future__ import annotations

from lattice.ops import (
    avg_pool3d,
    global_avg_pool,
    global_max_pool,
    global_pool,
    global_sum_pool,
    max_pool3d,
    pool3d,
    pool_transpose3d,
    sum_pool3d,
    trilinear_upsample3d,
)

__all__ = [
    "avg_pool3d",
    "global_avg_pool",
    "global_max_pool",
    "global_pool",
    "global_sum_pool",
    "max_pool3d",
    "pool3d",
    "pool_transpose3d",
    "sum_pool3d",
    "trilinear_upsample3d",
]
