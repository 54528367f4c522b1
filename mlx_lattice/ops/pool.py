"""Sparse pooling (documented ``mlx_lattice.ops.pool``): lattice's own functions, but for
``pool_transpose3d``, an adapter numbering odd kernel offsets from 0 as 0.6.3 does (see
:mod:`mlx_lattice._transposed`).

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
    sum_pool3d,
    trilinear_upsample3d,
)
from lattice.ops import pool_transpose3d as _pool_transpose3d
from mlx_lattice._transposed import run_indexed


def _pool_transpose(x, *, coordinates=None, **geometry):
    return _pool_transpose3d(x, coordinates, **geometry)


def pool_transpose3d(x, target=None, *, kernel_size=2, stride=2, padding=0, dilation=1, device=None):
    """Contributor average onto ``unique(s * stride + k * dilation - padding)`` (``k`` from 0)
    or onto ``target`` (its rows and order kept); target rows nobody reaches are 0."""
    return run_indexed(
        _pool_transpose,
        x,
        kernel_size=kernel_size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        coordinates=target,
        device=device,
        name="pool_transpose3d",
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
