"""CPU routes of dense feature GEMMs (``linear``): the linked optimised BLAS
(``csrc/backend/cpu/blas.cpp``) on the CPU stream."""

from __future__ import annotations

import mlx.core as mx

from lattice import _ext
from lattice.core.quantized import QuantizedWeight, dequantize_weight
from lattice.routing import linear as routes
from lattice.routing.registry import implements


def blas_gemm(a: mx.array, b: mx.array, *, trans_b: bool = False) -> mx.array:
    """``a @ op(b)`` through the linked BLAS (differentiable)."""
    return _ext.blas_gemm(a, b, False, trans_b, stream=mx.cpu)


@implements(routes.BLAS_GEMM)
def gemm(a: mx.array, weight: mx.array) -> mx.array:
    """``a @ W^T`` for a dense linear weight ``W`` (out, in)."""
    return blas_gemm(a, weight, trans_b=True)


@implements(routes.DEQUANT_BLAS_GEMM)
def dequant_blas_gemm(a: mx.array, qweight: QuantizedWeight) -> mx.array:
    """``a @ W^T`` for a packed linear weight ``W`` (out, in), dequantized to ``a.dtype``."""
    return blas_gemm(a, dequantize_weight(qweight, dtype=a.dtype), trans_b=True)
