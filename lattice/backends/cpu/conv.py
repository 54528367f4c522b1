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
from lattice.routing.registry import dispatch, implements


def _native_conv(
    feats, weight, in_rows, out_rows, bounds, n_out, identity_k, kernel, epilogue, mirrored=False
) -> mx.array:
    """The native SparseConv primitive on the CPU stream (differentiable); ``epilogue`` None, or
    ``(scale, shift, residual | None, relu, concat | None)`` applied by it
    (``_ext.sparse_conv_affine``: ``concat``'s columns written after each output row's).

    ``distinct=True``: the relation comes from lattice's coordinate manager, whose kernel
    relations never repeat an input or an output row within one kernel offset, so the
    native scatter runs in parallel without re-checking that (it still checks the ranges).
    ``mirrored`` (``KernelRelation.mirrored``): the input gradient runs over the same edges
    with W's offsets reversed, in their output-row order (every offset of a submanifold
    relation comes by output row, so the backward takes it in output-row blocks too).
    """
    args = (feats, weight, in_rows, out_rows, bounds, n_out, False, identity_k)
    if epilogue is None:
        return _ext.sparse_conv(*args, distinct=True, kernel=kernel, mirrored=mirrored, stream=mx.cpu)
    scale, shift, residual, relu, concat = epilogue
    return _ext.sparse_conv_affine(
        *args,
        distinct=True,
        kernel=kernel,
        scale=scale,
        shift=shift,
        residual=residual,
        relu=relu,
        append=concat,
        mirrored=mirrored,
        stream=mx.cpu,
    )


def _relation_conv(feats: mx.array, weight: mx.array, rel: KernelRelation, kernel: str, epilogue) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out), its products by ``kernel``
    ("blas" or one of lattice's GEMM kernels; the VJP's convolutions too)."""
    identity_k = rel.spec.volume // 2 if rel.kind == "submanifold" else -1
    edges = rel.grouped_edges
    bounds = list(rel.edge_offsets_host)
    return _native_conv(
        feats,
        weight,
        edges.in_rows,
        edges.out_rows,
        bounds,
        rel.n_out,
        identity_k,
        kernel,
        epilogue,
        rel.mirrored,
    )


@implements(routes.GATHER_GEMM_SCATTER)
def gather_gemm_scatter(feats: mx.array, weight: mx.array, rel: KernelRelation, epilogue=None) -> mx.array:
    """Per kernel offset: gather, BLAS GEMM, scatter-add (``epilogue``: as ``_native_conv``)."""
    return _relation_conv(feats, weight, rel, "blas", epilogue)


@implements(routes.TILED_GEMM)
def tiled_gemm(feats: mx.array, weight: mx.array, rel: KernelRelation, epilogue=None) -> mx.array:
    """Per kernel offset: lattice's register-tiled GEMM kernel of this CPU (the capability's
    ``cpu_gemm``) over the gathered rows, adding into the scattered ones."""
    return _relation_conv(feats, weight, rel, capability().cpu_gemm, epilogue)


@implements(routes.POINTWISE_GEMM)
def pointwise_gemm(feats: mx.array, weight: mx.array, rel: KernelRelation) -> mx.array:
    """1x1x1 convolution on the same support: one GEMM with W[0] (C_in, C_out)."""
    return _ext.blas_gemm(feats, weight[0], False, False, stream=mx.cpu)


@implements(routes.POINTWISE_TILED)
def pointwise_tiled(feats: mx.array, weight: mx.array, rel: KernelRelation, epilogue=None) -> mx.array:
    """1x1x1 convolution on the same support through the capability's (rounding) GEMM kernel:
    one offset whose edges are row i to row i (the identity: its products are stored into the
    output, which is not zeroed first)."""
    n = feats.shape[0]
    rows = arange(n)
    return _native_conv(feats, weight, rows, rows, [0, n], n, 0, capability().cpu_gemm, epilogue)


implements(routes.DEQUANT_GATHER_GEMM_SCATTER)(dequantized(gather_gemm_scatter))
implements(routes.DEQUANT_TILED_GEMM)(dequantized(tiled_gemm))
implements(routes.DEQUANT_POINTWISE_GEMM)(dequantized(pointwise_gemm))


@implements(routes.FUSED_EPILOGUE)
def fused_epilogue(plan, scale, shift, residual, relu: bool, concat) -> mx.array:
    """The convolution's own route (one of ``routes.EPILOGUE_CONV_ROUTES``) with the affine map
    and the concatenation handed to its native primitive (which reads the residual and the
    concatenated rows as float32: exact casts)."""
    residual, concat = (None if a is None else a.astype(mx.float32) for a in (residual, concat))
    epilogue = (scale, shift, residual, relu, concat)
    return dispatch(plan.route, plan.x.run_feats, plan.weight, plan.relation, epilogue=epilogue)


@implements(routes.CPU_CONV_THEN_AFFINE)
def conv_then_affine(plan, scale, shift, residual, relu: bool, concat) -> mx.array:
    """The convolution (its own route), then ``lattice.ops.affine`` on its output (the affine
    op's route: the native pass), then ``concat``'s columns after it (MLX's concatenation)."""
    from lattice.ops.norms import affine  # the ops import the backends lazily, not the reverse

    y = affine(plan.run().feats, scale, shift, residual=residual, activation="relu" if relu else None)
    return y if concat is None else mx.concatenate([y, concat], axis=1)
