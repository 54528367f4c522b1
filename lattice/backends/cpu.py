"""CPU routes: wrappers that place the native primitives on the CPU stream."""

from __future__ import annotations

import mlx.core as mx

from lattice import _ext
from lattice.core.quantized import QuantizedWeight, dequantize_weight, with_packed_forms
from lattice.core.relation import KernelRelation


def blas_gemm(a: mx.array, b: mx.array, *, trans_b: bool = False) -> mx.array:
    """``a @ op(b)`` through the linked BLAS (differentiable)."""
    return _ext.blas_gemm(a, b, False, trans_b, stream=mx.cpu)


def gather_gemm_scatter(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out) (differentiable).

    ``distinct=True``: the relation comes from lattice's coordinate manager, whose kernel
    relations never repeat an input or an output row within one kernel offset, so the
    native scatter runs in parallel without re-checking that (it still checks the ranges).
    """
    identity_k = rel.n_kernels // 2 if rel.kind == "submanifold" else -1
    return _ext.sparse_conv(
        feats,
        weight,
        rel.edges.in_rows,
        rel.edges.out_rows,
        list(rel.edge_offsets_host),
        rel.out_count,
        False,
        identity_k,
        distinct=True,
        stream=mx.cpu,
    )


def pointwise_gemm(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """1x1x1 convolution on the same support: one GEMM with W[0] (C_in, C_out)."""
    return _ext.blas_gemm(feats, weight[0], False, False, stream=mx.cpu)


# ---- packed (quantized) linear weights: dequantized (tiny, on the CPU stream), then BLAS ----


def dequant_blas_gemm(a: mx.array, qweight: QuantizedWeight) -> mx.array:
    """``a @ W^T`` for a packed linear weight ``W`` (out, in), dequantized to ``a.dtype``."""
    return blas_gemm(a, dequantize_weight(qweight, dtype=a.dtype), trans_b=True)


# the dense routes and their packed-weight forms (dequant_*)
CONV = with_packed_forms({"gather_gemm_scatter": gather_gemm_scatter, "pointwise_gemm": pointwise_gemm})
