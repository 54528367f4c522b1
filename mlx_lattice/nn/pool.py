"""Pooling modules (documented ``mlx_lattice.nn.pool``): lattice's own classes."""

from __future__ import annotations

from lattice.nn import (
    AvgPool3d,
    GlobalAvgPool,
    GlobalMaxPool,
    GlobalSumPool,
    MaxPool3d,
    Pool3d,
    PoolTranspose3d,
    SumPool3d,
    TrilinearUpsample3d,
)

__all__ = [
    "AvgPool3d",
    "GlobalAvgPool",
    "GlobalMaxPool",
    "GlobalSumPool",
    "MaxPool3d",
    "Pool3d",
    "PoolTranspose3d",
    "SumPool3d",
    "TrilinearUpsample3d",
]
