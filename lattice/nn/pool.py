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
from lattice.core.kernel import KernelGeometry, KernelSpec
from lattice.core.tensor import SparseTensor
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


class _KernelModule(KernelGeometry, nn.Module):
    """Stores a checked KernelSpec (a frozen value, kept out of the parameter tree)."""

    def __init__(self, kernel_size, stride, padding, dilation) -> None:
        super().__init__()
        self.spec = KernelSpec(kernel_size, stride, padding, dilation, op=type(self).__name__)

    def _kernel_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}"
        )

    def _kernel_kwargs(self) -> dict:
        return {
            "kernel_size": self.kernel_size,
            "stride": self.stride,
            "padding": self.padding,
            "dilation": self.dilation,
        }


class Pool3d(_KernelModule):
    """Configurable local sparse 3D pooling module.

    ``mode`` selects sum, max, or avg reduction over a sparse kernel relation. The
    module returns a sparse tensor with output stride multiplied by the pooling stride.
    """

    def __init__(
        self,
        *,
        mode: PoolMode | str = "sum",
        kernel_size: IntOrTriple = 2,
        stride: IntOrTriple = 2,
        padding: IntOrTriple = 0,
        dilation: IntOrTriple = 1,
    ) -> None:
        super().__init__(kernel_size, stride, padding, dilation)
        self.mode = P.pool_mode(mode, type(self).__name__)

    def _extra_repr(self) -> str:
        return f"mode={self.mode.value}, {self._kernel_repr()}"

    def __call__(self, x: SparseTensor) -> SparseTensor:
        return P.pool3d(x, mode=self.mode, **self._kernel_kwargs())


class SumPool3d(Pool3d):
    """Local sparse sum-pooling module."""

    def __init__(self, *, kernel_size: IntOrTriple = 2, stride: IntOrTriple = 2, padding: IntOrTriple = 0,
                 dilation: IntOrTriple = 1) -> None:
        super().__init__(mode=PoolMode.SUM, kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation)


class MaxPool3d(Pool3d):
    """Local sparse max-pooling module (per channel; gradient ties go to the smallest input row)."""

    def __init__(self, *, kernel_size: IntOrTriple = 2, stride: IntOrTriple = 2, padding: IntOrTriple = 0,
                 dilation: IntOrTriple = 1) -> None:
        super().__init__(mode=PoolMode.MAX, kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation)


class AvgPool3d(Pool3d):
    """Local sparse average-pooling module (divides by the contributors of each output row)."""

    def __init__(self, *, kernel_size: IntOrTriple = 2, stride: IntOrTriple = 2, padding: IntOrTriple = 0,
                 dilation: IntOrTriple = 1) -> None:
        super().__init__(mode=PoolMode.AVG, kernel_size=kernel_size, stride=stride, padding=padding,
                         dilation=dilation)


class PoolTranspose3d(_KernelModule):
    """Average-pooling transpose onto generated or explicit target support.

    Called as ``module(x, target=None)``; a target keeps its rows and order and must be
    at stride ``x.stride / stride``.
    """

    def __init__(self, *, kernel_size: IntOrTriple = 2, stride: IntOrTriple = 2, padding: IntOrTriple = 0,
                 dilation: IntOrTriple = 1) -> None:
        super().__init__(kernel_size, stride, padding, dilation)

    def _extra_repr(self) -> str:
        return self._kernel_repr()

    def __call__(self, x: SparseTensor, target=None) -> SparseTensor:
        return P.pool_transpose3d(x, target, **self._kernel_kwargs())


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
    _mode: PoolMode

    def __call__(self, x: SparseTensor, *, batch_size: int | None = None) -> mx.array:
        return P.global_pool(x, mode=self._mode, batch_size=batch_size)


class GlobalSumPool(_GlobalPool):
    """Batch-wise global sum-pooling module returning dense (B, C) rows."""

    _mode = PoolMode.SUM


class GlobalAvgPool(_GlobalPool):
    """Batch-wise global average-pooling module returning dense (B, C) rows (empty members give 0)."""

    _mode = PoolMode.AVG


class GlobalMaxPool(_GlobalPool):
    """Batch-wise global max-pooling module returning dense (B, C) rows (an empty member is an error)."""

    _mode = PoolMode.MAX
