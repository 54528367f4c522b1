"""CPU routes: wrappers that place the native primitives on the CPU stream."""

from __future__ import annotations

import mlx.core as mx

from lattice import _ext
from lattice.core.quantized import QuantizedWeight, dequantize_mapped, dequantize_weight
from lattice.core.relation import KernelRelation


def blas_gemm(a: mx.array, b: mx.array, *, trans_b: bool = False) -> mx.array:
    """``a @ op(b)`` through the linked BLAS (differentiable)."""
    return _ext.blas_gemm(a, b, False, trans_b, stream=mx.cpu)


def gather_gemm_scatter(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out) (differentiable)."""
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
        stream=mx.cpu,
    )


def pointwise_gemm(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """1x1x1 convolution on the same support: one GEMM with W[0] (C_in, C_out)."""
    return _ext.blas_gemm(feats, weight[0], False, False, stream=mx.cpu)


# ---- packed (quantized) weights: dequantize on the CPU stream (tiny), then the BLAS routes ----


def dequant_gather_gemm_scatter(feats: mx.array, qweight: QuantizedWeight, rel: KernelRelation) -> mx.array:
    """Relation convolution with a packed conv weight (differentiable in ``feats``)."""
    with mx.stream(mx.cpu):
        w = dequantize_mapped(qweight)
    return gather_gemm_scatter(feats, w, rel)


def dequant_pointwise_gemm(feats: mx.array, qweight: QuantizedWeight, rel: KernelRelation) -> mx.array:
    """1x1x1 convolution on the same support with a packed conv weight."""
    with mx.stream(mx.cpu):
        w = dequantize_mapped(qweight)
    return pointwise_gemm(feats, w, rel)


def dequant_blas_gemm(a: mx.array, qweight: QuantizedWeight) -> mx.array:
    """``a @ W^T`` for a packed linear weight ``W`` (out, in), dequantized to ``a.dtype``."""
    with mx.stream(mx.cpu):
        w = dequantize_weight(qweight, dtype=a.dtype)
    return blas_gemm(a, w, trans_b=True)


CONV = {
    "gather_gemm_scatter": gather_gemm_scatter,
    "pointwise_gemm": pointwise_gemm,
    "dequant_gather_gemm_scatter": dequant_gather_gemm_scatter,
    "dequant_pointwise_gemm": dequant_pointwise_gemm,
}
