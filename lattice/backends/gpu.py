"""GPU routes built from MLX's own kernels: they run wherever MLX runs its GPU stream
(the CUDA backend on NVIDIA, Metal on Apple silicon).

The relation (kernel map) is still built by the CPU core and its edge arrays travel to
the GPU (a host round trip per new relation; cached relations are reused). The
convolution itself is: gather the input rows of every edge, one ``gather_mm`` that
multiplies each gathered row by its offset's weight (edges are grouped by offset, so
the indices are sorted), and a float32 scatter-add onto the output rows. MLX
differentiates all three.
"""

from __future__ import annotations

import mlx.core as mx

from lattice.core.quantized import QuantizedWeight, dequantize_mapped
from lattice.core.relation import KernelRelation


def gather_mm_scatter(feats: mx.array, weight: mx.array, rel: KernelRelation, *, device=None) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out) on the GPU stream.

    ``device`` (default ``mx.gpu``) lets the tests run the same code on the CPU.
    """
    c_out = int(weight.shape[2])
    with mx.stream(device or mx.gpu):
        # MLX's CUDA backend fails on kernels over zero elements: empty inputs return early.
        if rel.edge_count == 0 or rel.out_count == 0:
            return mx.zeros((rel.out_count, c_out), dtype=feats.dtype)
        gathered = mx.take(feats, rel.edges.in_rows, axis=0)[:, None, :]
        w = weight.astype(feats.dtype)
        per_edge = mx.gather_mm(gathered, w, rhs_indices=rel.edges.kernel_ids_sorted, sorted_indices=True)
        out = mx.zeros((rel.out_count, c_out), dtype=mx.float32)
        out = out.at[rel.edges.out_rows].add(per_edge[:, 0, :].astype(mx.float32))
        return out.astype(feats.dtype)


def pointwise_matmul(feats: mx.array, weight: mx.array, rel: KernelRelation, *, device=None) -> mx.array:
    """1x1x1 convolution on the same support: one GPU matmul."""
    with mx.stream(device or mx.gpu):
        if feats.shape[0] == 0:
            return mx.zeros((0, int(weight.shape[2])), dtype=feats.dtype)
        return mx.matmul(feats, weight[0].astype(feats.dtype))


def dequant_gather_mm_scatter(
    feats: mx.array, qweight: QuantizedWeight, rel: KernelRelation, *, device=None
) -> mx.array:
    with mx.stream(device or mx.gpu):
        w = dequantize_mapped(qweight)
    return gather_mm_scatter(feats, w, rel, device=device)


def dequant_pointwise_matmul(
    feats: mx.array, qweight: QuantizedWeight, rel: KernelRelation, *, device=None
) -> mx.array:
    with mx.stream(device or mx.gpu):
        w = dequantize_mapped(qweight)
    return pointwise_matmul(feats, w, rel, device=device)


CONV = {
    "gather_mm_scatter": gather_mm_scatter,
    "pointwise_matmul": pointwise_matmul,
    "dequant_gather_mm_scatter": dequant_gather_mm_scatter,
    "dequant_pointwise_matmul": dequant_pointwise_matmul,
}
