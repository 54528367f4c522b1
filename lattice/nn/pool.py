"""Pooling modules: local relation pooling and upsampling returning SparseTensors,
and batch-wise global pooling returning dense ``(B, C)`` rows.

Constructors take exactly the documented keyword-only arguments, check them (errors
name the module and the values) and store them; each ``__call__`` calls one op of
``lattice.ops.pool``. The modules hold no parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

import mlx.core as mx
import mlx.nn as nn

from lattice.core._checks import Triple, int_triple
from lattice.core.tensor import SparseTensor
from lattice.nn._kernel import KernelModule
from lattice.ops import pool as P
from lattice.ops.pool import PoolMode

IntOrTriple = int | Sequence[int]

__all__ = [
    "AvgPool3d",
    "GlobalAvgPool",
    "GlobalMaxPool",
    "GlobalSumPool",
    "MaxPool3d",
    "Pool3d",
    "PoolMode",
    "PoolTranspose3d",
    "SumPool3d",
    "TrilinearUpsample3d",
]


class _Window(KernelModule):
    """A local pooling module: the window keywords, stored as a checked KernelSpec."""

    _geometry = {"kernel_size": 2, "stride": 2, "padding": 0, "dilation": 1}


class Pool3d(_Window):
    """Configurable local sparse 3D pooling module.

    ``mode`` selects sum, max, or avg reduction over a sparse kernel relation. The
    module returns a sparse tensor with output stride multiplied by the pooling stride.
    """

    _mode: PoolMode | None = None  # fixed by a subclass; Pool3d takes ``mode`` as an argument

    @classmethod
    def _keywords(cls) -> dict[str, object]:
        window = super()._keywords()
        return window if cls._mode is not None else {"mode": "sum", **window}

    def _setup(self, mode=None, **window) -> None:
        super()._setup(**window)
        self.mode = P.pool_mode(self._mode if self._mode is not None else mode, type(self).__name__)

    def _extra_repr(self) -> str:
        return ", ".join([f"mode={self.mode.value}", *self._geometry_repr()])

    def __call__(self, x: SparseTensor) -> SparseTensor:
        return P.pool3d(x, mode=self.mode, **self._geometry_kwargs())


class SumPool3d(Pool3d):
    """Local sparse sum-pooling module."""

    _mode = PoolMode.SUM


class MaxPool3d(Pool3d):
    """Local sparse max-pooling module (per channel; gradient ties go to the smallest input row)."""

    _mode = PoolMode.MAX


class AvgPool3d(Pool3d):
    """Local sparse average-pooling module (divides by the contributors of each output row)."""

    _mode = PoolMode.AVG


class PoolTranspose3d(_Window):
    """Average-pooling transpose onto generated or explicit target support.

    Called as ``module(x, target=None)``; a target keeps its rows and order and must be
    at stride ``x.stride / stride``.
    """

    def _extra_repr(self) -> str:
        return ", ".join(self._geometry_repr())

    def __call__(self, x: SparseTensor, target=None) -> SparseTensor:
        return P.pool_transpose3d(x, target, **self._geometry_kwargs())


class TrilinearUpsample3d(nn.Module):
    """Normalized trilinear upsampling on generated or target support.

    Called as ``module(x, target=None)``.
    """

    def __init__(self, *, stride: IntOrTriple = 2) -> None:
        super().__init__()
        # A plain attribute: nn.Module would file a tuple into its parameter tree.
        object.__setattr__(self, "_stride", int_triple(stride, "stride", type(self).__name__, minimum=1))

    @property
    def stride(self) -> Triple:
        return self._stride

    def _extra_repr(self) -> str:
        return f"stride={self.stride}"

    def __call__(self, x: SparseTensor, target=None) -> SparseTensor:
        return P.trilinear_upsample3d(x, target, stride=self.stride)


class _GlobalPool(nn.Module):
    """A global pooling module; each subclass names its reduction: ``class G(_GlobalPool, mode=...)``."""

    _mode: PoolMode

    def __init_subclass__(cls, *, mode: PoolMode | None = None, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if mode is not None:  # a subclass without one keeps its parent's
            cls._mode = mode

    def __call__(self, x: SparseTensor, *, batch_size: int | None = None) -> mx.array:
        return P.global_pool(x, mode=self._mode, batch_size=batch_size)


class GlobalSumPool(_GlobalPool, mode=PoolMode.SUM):
    """Batch-wise global sum-pooling module returning dense (B, C) rows."""


class GlobalAvgPool(_GlobalPool, mode=PoolMode.AVG):
    """Batch-wise global average-pooling module returning dense (B, C) rows (empty members give 0)."""


class GlobalMaxPool(_GlobalPool, mode=PoolMode.MAX):
    """Batch-wise global max-pooling module returning dense (B, C) rows (an empty member is an error)."""
