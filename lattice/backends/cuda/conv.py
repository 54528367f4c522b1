"""Convolution on the GPU (``cuda/conv.cu``, ``kernels/conv.inc``): an implicit GEMM over
the relation's dense map (tensor cores where the rows allow), float32 accumulation, no
atomics; its VJP runs the same kernel over the inverse map with W transposed per offset
(input gradient) and a weight-gradient kernel over the map (float32 atomics). The
``implicit_gemm`` route and its packed-weight form."""

from __future__ import annotations

import mlx.core as mx

from lattice import settings
from lattice.backends import kernels
from lattice.backends.cuda.launch import THREADS, check_index_range, int_params, launch
from lattice.backends.cuda.relations import in_major_map, row_order
from lattice.core.buffers import arange
from lattice.core.quantized import dequantized
from lattice.routing import conv as routes
from lattice.routing.registry import implements

_TM = 64  # output rows per threadgroup (kernels/conv.inc)
_MMA_MAX_OFFSETS = 1024  # LT_CONV_KCAP: the tensor-core kernel's list of used offsets


def _tile_order(rel, key: str, nmap: mx.array) -> mx.array:
    """The row order the convolution kernels take ``nmap``'s rows in: as they are on the
    first convolution over the map, sorted by ``row_order`` (kept with the relation) from
    the second on — the sort (0.27 ms on the spconv shape) pays back from the second use
    (0.1-0.8 ms per forward there), and a one-off convolution does not pay it. The results
    are the same bits either way."""
    state = rel.cached(key, dict)
    if "order" not in state:
        if not state.get("used"):
            state["used"] = True
            return arange(int(nmap.shape[0]), dtype=mx.int32)
        state["order"] = row_order(nmap)
    return state["order"]


def _conv_kernel(x: mx.array, w: mx.array, nmap: mx.array, order: mx.array) -> mx.array:
    """y (n_out, C_out) = sum_k gather(x, nmap[:, k]) @ w[k]; w (K, C_in, C_out); the
    output rows taken in tiles of 64 in ``order`` (``row_order(nmap)``).

    Features whose rows are whole 16-byte chunks (C_in % 8 == 0 for 16-bit, % 4 for
    float32 while TF32 is allowed) take the tensor-core kernel (W cast to the feature
    dtype, read as (C_out, K, C_in); float32 multiplies in TF32, as MLX's own float32
    matmul does on CUDA by default) when there are at most 1024 kernel offsets;
    everything else the float32-FMA kernel."""
    n_out, kv = int(nmap.shape[0]), int(nmap.shape[1])
    c_in, c_out = int(w.shape[1]), int(w.shape[2])
    if n_out == 0 or int(x.shape[0]) == 0 or c_in == 0 or c_out == 0:
        return mx.zeros((n_out, c_out), dtype=x.dtype)
    check_index_range(
        "implicit_gemm",
        features=int(x.shape[0]) * c_in,
        output=n_out * c_out,
        neighbor_map=n_out * kv,
        weight=kv * c_in * c_out,
    )
    tn = 32 if c_out <= 32 else 64
    params = int_params(n_out, kv, c_in, c_out)
    threads, tiles_n = -(-n_out // _TM) * THREADS, -(-c_out // tn)
    if kv <= _MMA_MAX_OFFSETS and uses_tensor_cores(x.dtype, c_in):
        # (C_out, K, C_in): a view of MLX's dense conv weight (no copy for those)
        wt = w.astype(x.dtype).transpose(2, 0, 1)
        name, inputs = "conv_implicit_gemm_mma", [x, wt, nmap, order, params]
        template = [("T", x.dtype), ("TN", tn), ("P", _mma_stages(x.dtype.size, tn))]
    else:
        name, inputs = "conv_implicit_gemm", [x, w, nmap, order, params]
        template = [("T", x.dtype), ("TW", w.dtype), ("TN", tn)]
    (y,) = launch(
        "conv", name, inputs, [(n_out, c_out)], [x.dtype], threads, template=template, grid_y=tiles_n
    )
    return y


def _mma_stages(itemsize: int, tn: int) -> int:
    """Pipeline stages of the tensor-core kernel: as many (64 + TN) x (32 + one 16-byte
    pad) tiles as fit 44 KiB of static shared memory, at most 4 (kernels/conv.inc)."""
    stage = (_TM + tn) * (32 + 16 // itemsize) * itemsize
    return max(2, min(4, 44 * 1024 // stage))


def uses_tensor_cores(dtype, c_in: int) -> bool:
    """Tensor cores (mma.sync) when feature rows are whole 16-byte chunks; float32 only
    while TF32 is allowed — MLX's own switch, ``MLX_ENABLE_TF32`` (default on; ``0``
    keeps float32 convolutions in full float32 on the FMA kernel, as it does MLX's
    matmuls)."""
    if kernels.dialect() != "cuda":  # mma.sync: CUDA only
        return False
    if dtype in (mx.float16, mx.bfloat16):
        return c_in % 8 == 0
    return dtype == mx.float32 and c_in % 4 == 0 and settings.tf32_enabled()


_WGRAD_ROWS = 512  # output rows per threadgroup of the weight-gradient kernel


def _weight_grad(x: mx.array, dy: mx.array, nmap: mx.array, order: mx.array) -> mx.array:
    """dW[k] = gather(x, nmap[:, k])^T @ dy, float32 (K, C_in, C_out): one kernel, each
    threadgroup a run of rows of ``order`` x a 32 x 32 tile (64 x 64 when both channel
    counts exceed 32) of one offset, float32 atomics; 32-row chunks that do not read the
    offset are skipped (about half with sorted rows)."""
    n_in, c_in = int(x.shape[0]), int(x.shape[1])
    n_out, kv = int(nmap.shape[0]), int(nmap.shape[1])
    c_out = int(dy.shape[1])
    if n_out == 0 or n_in == 0 or c_in == 0 or c_out == 0:
        return mx.zeros((kv, c_in, c_out), dtype=mx.float32)
    check_index_range(
        "conv_weight_grad",
        features=n_in * c_in,
        output_grad=n_out * c_out,
        neighbor_map=n_out * kv,
        weight=kv * c_in * c_out,
    )
    tt = 64 if min(c_in, c_out) > 32 else 32
    tiles = -(-c_in // tt) * -(-c_out // tt)
    (dw,) = launch(
        "conv",
        "conv_weight_grad",
        [x, dy.astype(x.dtype), nmap, order, int_params(n_out, kv, c_in, c_out, _WGRAD_ROWS)],
        [(kv, c_in, c_out)],
        [mx.float32],
        -(-n_out // _WGRAD_ROWS) * THREADS,
        template=[("T", x.dtype), ("TT", tt)],
        init=0,
        grid_y=kv * tiles,
    )
    return dw


def _conv_fn(rel, transposed: bool = False):
    """The differentiable convolution over ``rel``'s map (``transposed``: over its inverse
    map, W transposed per offset — the input gradient). One pair per relation, kept on
    it. The VJP of each is the other plus the weight-gradient kernel, whose own VJP is
    the two convolutions again (it is bilinear in x and dY), so second derivatives work;
    the inverse map is built on the first backward pass only."""

    def make():
        def the_map():  # built on first use: the in-major map on the first backward pass
            return in_major_map(rel) if transposed else rel.neighbor_map

        def order():
            return _tile_order(rel, "in_major_row_order" if transposed else "row_order", the_map())

        @mx.custom_function
        def conv(x, w):
            return _conv_kernel(x, w, the_map(), order())

        @mx.custom_function
        def weight_grad(x, dy):
            return _weight_grad(x, dy, the_map(), order())

        @weight_grad.vjp
        def weight_grad_vjp(primals, cotangent, output):
            # dW[k] = sum_o x[map[o, k]]^T dy[o]: bilinear, so its VJP is the convolution of
            # dY over the other map with G^T (for x) and of x with G (for dY)
            x, dy = primals
            dx = _conv_fn(rel, not transposed)(dy, cotangent.swapaxes(1, 2))
            ddy = _conv_fn(rel, transposed)(x, cotangent)
            return dx.astype(x.dtype), ddy.astype(dy.dtype)

        @conv.vjp
        def conv_vjp(primals, cotangent, output):
            x, w = primals
            dy = cotangent.astype(x.dtype)
            dx = _conv_fn(rel, not transposed)(dy, w.swapaxes(1, 2))
            return dx, weight_grad(x, dy).astype(w.dtype)

        return conv

    return rel.cached("cuda_conv_t" if transposed else "cuda_conv", make)


@implements(routes.IMPLICIT_GEMM.cuda)
def implicit_gemm(feats: mx.array, weight: mx.array, rel) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out) over the relation's dense
    neighbour map (differentiable, also twice)."""
    with mx.stream(mx.gpu):
        return _conv_fn(rel)(feats, weight)


implements(routes.DEQUANT_IMPLICIT_GEMM.cuda)(dequantized(implicit_gemm))
