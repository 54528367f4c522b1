"""GPU conv routes built from MLX's own kernels (the ``gpu.*`` routes): they run wherever
MLX runs its GPU stream (the CUDA backend on NVIDIA, Metal on Apple silicon).

The relation (kernel map) is still built by the CPU core and its edge arrays travel to
the GPU (a host round trip per new relation; cached relations are reused). The
convolution itself is, per kernel offset: gather its edges' input rows, one matmul
with the offset's weight, a float32 scatter-add onto the output rows. MLX
differentiates all three.
"""

from __future__ import annotations

import mlx.core as mx

from lattice.backends.gpu.features import affine_then_concat
from lattice.core.quantized import dequantized
from lattice.core.relation import KernelRelation
from lattice.routing import conv as routes
from lattice.routing.registry import implements


@implements(routes.GATHER_MATMUL_SCATTER)
def gather_matmul_scatter(feats: mx.array, weight: mx.array, rel: KernelRelation, *, device=None) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out) on the GPU stream: per kernel
    offset, gather its edges' input rows, one matmul, float32 scatter-add.

    (``mx.gather_mm`` over all edges at once, sorted by offset, gave wrong results on MLX
    0.32.4's CUDA backend — see docs/backend.md — so the offsets are walked here; the
    offsets' edge ranges are known on the host.) ``device`` (default ``mx.gpu``) lets the
    tests run the same code on the CPU.
    """
    c_out = int(weight.shape[2])
    with mx.stream(device or mx.gpu):
        out = mx.zeros((rel.n_out, c_out), dtype=mx.float32)
        # MLX's CUDA backend fails on kernels over zero elements: empty offsets are skipped.
        if rel.n_edges == 0 or rel.n_out == 0:
            return out.astype(feats.dtype)
        w = weight.astype(feats.dtype)
        bounds = rel.edge_offsets_host
        for k in range(rel.spec.volume):
            a, b = bounds[k], bounds[k + 1]
            if a == b:
                continue
            rows_in, rows_out = rel.grouped_edges.in_rows[a:b], rel.grouped_edges.out_rows[a:b]
            part = mx.matmul(mx.take(feats, rows_in, axis=0), w[k])
            out = out.at[rows_out].add(part.astype(mx.float32))
        return out.astype(feats.dtype)


@implements(routes.POINTWISE_MATMUL)
def pointwise_matmul(feats: mx.array, weight: mx.array, rel: KernelRelation, *, device=None) -> mx.array:
    """1x1x1 convolution on the same support: one GPU matmul."""
    with mx.stream(device or mx.gpu):
        if feats.shape[0] == 0:
            return mx.zeros((0, int(weight.shape[2])), dtype=feats.dtype)
        return mx.matmul(feats, weight[0].astype(feats.dtype))


implements(routes.DEQUANT_GATHER_MATMUL_SCATTER)(dequantized(gather_matmul_scatter))
implements(routes.DEQUANT_POINTWISE_MATMUL)(dequantized(pointwise_matmul))


@implements(routes.GPU_CONV_THEN_AFFINE)
def conv_then_affine(plan, scale, shift, residual, relu: bool, concat) -> mx.array:
    """The convolution (its own route: lattice's kernels or MLX's), then the affine map as one
    compiled GPU function and ``concat``'s columns after it (``affine_then_concat``)."""
    return affine_then_concat(plan.run().feats, scale, shift, residual, relu, concat)
