"""Pooling modules (documented ``mlx_lattice.nn.pool``): lattice's own classes, but
``PoolTranspose3d``, subclassed to run :func:`mlx_lattice.ops.pool.pool_transpose3d` (odd
kernel offsets numbered from 0, as 0.6.3 does)."""

from __future__ import annotations

from lattice import nn as _nn
from lattice.nn import (
    AvgPool3d,
    GlobalAvgPool,
    GlobalMaxPool,
    GlobalSumPool,
    MaxPool3d,
    Pool3d,
    SumPool3d,
    TrilinearUpsample3d,
)
from mlx_lattice.ops.pool import pool_transpose3d


class PoolTranspose3d(_nn.PoolTranspose3d):
    """:class:`lattice.nn.PoolTranspose3d` on 0.6.3's support (``k`` from 0 on every axis)."""

    def __call__(self, x, target=None):
        return pool_transpose3d(x, target, **self._geometry_kwargs())


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
