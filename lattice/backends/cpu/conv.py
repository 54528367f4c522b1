"""CPU routes of the convolution family: the native gather-GEMM-scatter and the pointwise
GEMM (``csrc/backend/cpu/conv.cpp``), placed on the CPU stream, and their packed-weight
forms."""

from __future__ import annotations

import mlx.core as mx

from lattice import _ext
from lattice.core.quantized import dequantized
from lattice.core.relation import KernelRelation
from lattice.routing import conv as routes
from lattice.routing.registry import implements


@implements(routes.GATHER_GEMM_SCATTER)
def gather_gemm_scatter(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out) (differentiable).

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
        stream=mx.cpu,
    )


@implements(routes.POINTWISE_GEMM)
def pointwise_gemm(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """1x1x1 convolution on the same support: one GEMM with W[0] (C_in, C_out)."""
    return _ext.blas_gemm(feats, weight[0], False, False, stream=mx.cpu)


implements(routes.DEQUANT_GATHER_GEMM_SCATTER)(dequantized(gather_gemm_scatter))
implements(routes.DEQUANT_POINTWISE_GEMM)(dequantized(pointwise_gemm))
