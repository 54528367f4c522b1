"""CPU routes of the convolution family: the native relation convolution — gather, BLAS GEMM,
scatter-add, or lattice's register-tiled GEMM kernel (``csrc/backend/cpu/conv.cpp``,
``gemm.h``) — and the pointwise GEMM, placed on the CPU stream, and their packed-weight
forms."""

from __future__ import annotations

import mlx.core as mx

from lattice import _ext
from lattice.core.buffers import arange
from lattice.core.quantized import dequantized
from lattice.core.relation import KernelRelation
from lattice.routing import conv as routes
from lattice.routing.device import capability
from lattice.routing.registry import implements


def _relation_conv(feats: mx.array, weight: mx.array, rel: KernelRelation, kernel: str) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out) (differentiable), its products
    by ``kernel`` ("blas" or one of lattice's GEMM kernels; the VJP's convolutions too).

    ``distinct=True``: the relation comes from lattice's coordinate manager, whose kernel
    relations never repeat an input or an output row within one kernel offset, so the
    native scatter runs in parallel without re-checking that (it still checks the ranges).
    """
    identity_k = rel.spec.volume // 2 if rel.kind == "submanifold" else -1
    return _ext.sparse_conv(
        feats,
        weight,
        rel.grouped_edges.in_rows,
        rel.grouped_edges.out_rows,
        list(rel.edge_offsets_host),
        rel.n_out,
        False,
        identity_k,
        distinct=True,
        kernel=kernel,
        stream=mx.cpu,
    )


@implements(routes.GATHER_GEMM_SCATTER)
def gather_gemm_scatter(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """Per kernel offset: gather, BLAS GEMM, scatter-add."""
    return _relation_conv(feats, weight, rel, "blas")


@implements(routes.TILED_GEMM)
def tiled_gemm(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """Per kernel offset: lattice's register-tiled GEMM kernel of this CPU (the capability's
    ``cpu_gemm``) over the gathered rows, adding into the scattered ones."""
    return _relation_conv(feats, weight, rel, capability().cpu_gemm)


@implements(routes.POINTWISE_GEMM)
def pointwise_gemm(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """1x1x1 convolution on the same support: one GEMM with W[0] (C_in, C_out)."""
    return _ext.blas_gemm(feats, weight[0], False, False, stream=mx.cpu)


@implements(routes.POINTWISE_TILED)
def pointwise_tiled(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """1x1x1 convolution on the same support through the capability's (rounding) GEMM kernel:
    one offset whose edges are row i to row i (the identity: its products are stored into the
    output, which is not zeroed first)."""
    n = feats.shape[0]
    rows = arange(n)
    return _ext.sparse_conv(
        feats,
        weight,
        rows,
        rows,
        [0, n],
        n,
        False,
        0,
        distinct=True,
        kernel=capability().cpu_gemm,
        stream=mx.cpu,
    )


implements(routes.DEQUANT_GATHER_GEMM_SCATTER)(dequantized(gather_gemm_scatter))
implements(routes.DEQUANT_TILED_GEMM)(dequantized(tiled_gemm))
implements(routes.DEQUANT_POINTWISE_GEMM)(dequantized(pointwise_gemm))
