"""Convolution on the GPU (``cuda/conv.cu``, ``kernels/conv.inc``): an implicit GEMM over
the relation's dense map (tensor cores where the rows allow), float32 accumulation, no
atomics; its VJP runs the same kernel over the inverse map with W transposed per offset
(input gradient; over a submanifold relation that is its own map with W's offsets
reversed, so no inverse map is built) and a weight-gradient kernel over the map (float32 atomics: on tensor
cores in TF32 for float32 features whose channel counts are multiples of 4 while TF32 is
allowed, else float32 FMAs). Rows are taken in an order sorted by the offsets they read,
made on a map's first convolution when it is wide, on its second otherwise. The
``implicit_gemm`` route and its packed-weight form."""

from __future__ import annotations

import functools

import mlx.core as mx

from lattice import settings
from lattice.backends import kernels
from lattice.backends.cuda.launch import THREADS, check_index_range, int_params, launch
from lattice.backends.cuda.relations import in_major_map, row_order
from lattice.backends.gpu.features import affine_then_concat
from lattice.core.buffers import arange
from lattice.core.quantized import dequantized
from lattice.routing import conv as routes
from lattice.routing.registry import dispatch, implements

_TM = 64  # output rows per threadgroup of the FMA kernel (LT_CONV_TM, kernels/conv.inc)
_MMA_MAX_OFFSETS = 1024  # LT_CONV_KCAP: the tensor-core kernel's list of used offsets
# C_in * C_out from which a map's rows are sorted on its first convolution (a 64 x 32 layer
# and wider), not on its second
_SORT_FIRST_WORK = 64 * 32
_STATIC_SMEM = 44 * 1024  # static shared memory the tensor-core weight gradient's stages may fill
# The tensor-core forward kernel's stages for 16-bit features (dynamic shared memory): at most
# this much a group, so that two groups of 256 threads share an SM (228 KiB on sm_90)
_MMA_SMEM = 96 * 1024
# Output rows from which the tensor-core forward kernel takes tiles of 128 rows instead of 64
# for float32 features (each weight fragment then feeds two products: half its shared-memory
# reads per product), while there are still enough tiles to fill the GPU's SMs several times over
# (a guess: timed at 484,637 rows only, docs/performance.md)
_MMA_WIDE_ROWS = 65536


def _tile_order(rel, key: str, nmap: mx.array, c_in: int, c_out: int) -> mx.array:
    """The row order the convolution kernels take ``nmap``'s rows in: sorted by
    ``row_order`` (kept with the relation) at once when the convolution is wide
    (C_in * C_out >= ``_SORT_FIRST_WORK``), else as they are on the first convolution over
    the map and sorted from the second on. The sort (0.27 ms on the spconv shape) pays back
    from the second use of a narrow map (0.1-0.8 ms per forward there), so a one-off narrow
    convolution does not pay it; a wide convolution's kernels cost more with the channel
    product while the sort does not, so it sorts for the first use already (not measured on
    a GPU alone; rows grouped by a counting sort on every first use instead made MinkUNet14
    slower on an H100, docs/performance.md). The results are the same bits either way (each
    row sums its offsets in order in any tile; the weight gradient's float32 atomics round as
    they do run to run)."""
    state = rel.cached(key, dict)
    if "order" not in state:
        if c_in * c_out < _SORT_FIRST_WORK and not state.get("used"):
            state["used"] = True
            return arange(int(nmap.shape[0]), dtype=mx.int32)
        state["order"] = row_order(nmap)
    return state["order"]


def _conv_kernel(x: mx.array, w: mx.array, nmap: mx.array, order: mx.array, epilogue=None) -> mx.array:
    """y (n_out, C_out) = sum_k gather(x, nmap[:, k]) @ w[k]; w (K, C_in, C_out); the
    output rows taken in tiles (64 or 128 rows) in ``order`` (``_tile_order``). ``epilogue``
    (float32 features only; ``_fused_conv``): ``(scale, shift, residual | None, relu,
    concat | None)`` applied to the float32 sums before they are stored, ``concat``'s rows
    written after them (the ``*_affine`` entries: y (n_out, C_out + C_concat)).

    Features whose rows are whole 16-byte chunks (C_in % 8 == 0 for 16-bit, % 4 for
    float32 while TF32 is allowed) take the tensor-core kernel (W cast to the feature
    dtype, read as (C_out, K, C_in); float32 multiplies in TF32, as MLX's own float32
    matmul does on CUDA by default) when there are at most 1024 kernel offsets — where
    C_in divides 32 and is below it (a k=5 stem's 4 channels) it puts 32 / C_in offsets
    side by side in each 32-wide step (``kernels/conv.inc``); everything else the
    float32-FMA kernel."""
    n_out, kv = int(nmap.shape[0]), int(nmap.shape[1])
    c_in, c_out = int(w.shape[1]), int(w.shape[2])
    scale, shift, residual, relu, concat = epilogue or (None, None, None, False, None)
    c_cat = 0 if concat is None else int(concat.shape[1])
    if n_out == 0 or int(x.shape[0]) == 0 or c_in == 0 or c_out == 0:
        y = mx.zeros((n_out, c_out), dtype=x.dtype)
        return y if epilogue is None else affine_then_concat(y, *epilogue)
    check_index_range(
        "implicit_gemm",
        features=int(x.shape[0]) * c_in,
        output=n_out * (c_out + c_cat),
        neighbor_map=n_out * kv,
        weight=kv * c_in * c_out,
    )
    params = int_params(n_out, kv, c_in, c_out, *([c_out + c_cat, c_cat] if epilogue is not None else []))
    mma = kv <= _MMA_MAX_OFFSETS and uses_tensor_cores(x.dtype, c_in)
    shared = 0
    if mma:
        tm, tn, stages = _mma_config(x.dtype.size, c_in, c_out, n_out)
        shared = mma_shared_bytes(x.dtype.size, tm, tn, stages)
        # (C_out, K, C_in): a view of MLX's dense conv weight (no copy for those)
        wt = w.astype(x.dtype).transpose(2, 0, 1)
        name, inputs = "conv_implicit_gemm_mma", [x, wt, nmap, order, params]
        template = [("T", x.dtype), ("TM", tm), ("TN", tn), ("P", stages)]
    else:
        tm, tn = _TM, tile_n(c_out, False)
        name, inputs = "conv_implicit_gemm", [x, w, nmap, order, params]
        template = [("T", x.dtype), ("TW", w.dtype), ("TN", tn)]
    threads, tiles_n = -(-n_out // tm) * THREADS, -(-c_out // tn)
    if epilogue is not None:
        unused = _one_float()  # the inputs a form does not read
        inputs += [
            scale.astype(mx.float32),
            shift.astype(mx.float32),
            unused if residual is None else residual.astype(mx.float32),
            unused if concat is None else concat.astype(mx.float32),
        ]
        name += "_affine"
        template += [("RES", int(residual is not None)), ("RELU", int(relu))]
    (y,) = launch(
        "conv",
        name,
        inputs,
        [(n_out, c_out + c_cat)],
        [x.dtype],
        threads,
        template=template,
        grid_y=tiles_n,
        shared=shared,
    )
    return y


@functools.cache
def _one_float() -> mx.array:
    return mx.zeros((1,), dtype=mx.float32)


def tile_n(c_out: int, mma: bool) -> int:
    """Output channels per tile: 32 up to 32 channels, else 64 — and on the tensor-core
    kernel 96 or 128 where that computes no more padded columns than tiles of 64, the
    widest of those (65 to 96 channels: one 96-wide tile instead of two, the second half
    empty; 128 or 256: tiles of 128), so the rows are gathered fewer times."""
    if c_out <= 32:
        return 32
    if not mma:
        return 64
    padded = {tn: -(-c_out // tn) * tn for tn in (64, 96, 128)}
    least = min(padded.values())
    return max(tn for tn, cols in padded.items() if cols == least)


def _mma_config(itemsize: int, c_in: int, c_out: int, n_out: int) -> tuple[int, int, int]:
    """(TM, TN, P) of the tensor-core forward kernel: float32 (TF32) features take tiles of
    128 output rows from ``_MMA_WIDE_ROWS`` rows unless C_in is a divisor of 32 below it
    (offsets grouped 32 / C_in a step: a 128-row tile reads more groups — the k=5 stem, 4 ->
    32, took 0.97-1.18 ms with 128 rows against 0.88 with 64 on an H100); everything else
    64 rows (16-bit features: 128-row tiles not measured against 64 yet). ``tile_n``
    columns, and ``_mma_stages`` pipeline stages."""
    grouped = c_in < 32 and 32 % c_in == 0
    tm = 128 if itemsize == 4 and n_out >= _MMA_WIDE_ROWS and not grouped else 64
    tn = tile_n(c_out, True)
    return tm, tn, _mma_stages(itemsize, tm, tn)


def _mma_stages(itemsize: int, tm: int, tn: int) -> int:
    """Pipeline stages of the tensor-core forward kernel with (TM, TN) tiles: 2 for float32
    (TF32) features, else as many as fit ``_MMA_SMEM``, at least 2, at most 4. Two float32
    stages (a quarter to half the shared memory of 3 or 4, so more groups share an SM) ran
    MinkUNet14 at 484,637 voxels on an H100 at 20.38 / 21.04 ms forward against 21.44 / 21.57
    with 4 or 3, at 48,463 rows 11.92 / 12.47 against 16.15 / 13.30 (two alternating rounds,
    docs/performance.md); 16-bit features were not tried with fewer."""
    if itemsize == 4:
        return 2
    return max(2, min(4, _MMA_SMEM // mma_shared_bytes(itemsize, tm, tn, 1)))


def mma_shared_bytes(itemsize: int, tm: int, tn: int, stages: int) -> int:
    """Dynamic shared memory of the tensor-core forward kernel: ``stages`` stages of (TM +
    TN) rows of 32 values and a 16-byte pad (lt_mma_shape in kernels/conv.inc)."""
    return stages * (tm + tn) * (32 + 16 // itemsize) * itemsize


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


_WGRAD_ROWS = 512  # output rows per threadgroup of the FMA weight-gradient kernel
_WGRAD_RUN = 1024  # LT_WGRAD_RUN: positions of the row order per tensor-core weight-gradient group
_WGRAD_CHUNK = 32  # LT_WGRAD_CHUNK: listed rows per pipeline stage of that kernel
_WGRAD_PAD = 8  # floats of padding per shared row of a stage (fragment loads bank-conflict-free)


def _wgrad_mma_stages(tt: int) -> int:
    """Pipeline stages of the tensor-core weight gradient: as many stages (a 32-row x (TT +
    8) float32 tile of x and one of dY) as fit 44 KiB of static shared memory beside the row
    list (``_WGRAD_RUN`` (o, i) int pairs, 8 KiB), at least 2, at most 4: 3 for TT = 32, 2
    for TT = 64 (kernels/conv.inc)."""
    stage = 2 * _WGRAD_CHUNK * (tt + _WGRAD_PAD) * 4
    return max(2, min(4, (_STATIC_SMEM - 2 * _WGRAD_RUN * 4) // stage))


def _weight_grad_kernel(dtype, c_in: int, c_out: int) -> str:
    """The weight-gradient kernel for features of ``dtype``: ``conv_weight_grad_mma``
    (tensor cores) for float32 under the forward's TF32 rule (``uses_tensor_cores``: CUDA,
    ``MLX_ENABLE_TF32`` not ``0``, C_in % 4 == 0) with C_out % 4 == 0 too (its x and dY
    rows are copied in whole 16-byte pieces); else ``conv_weight_grad`` (float32 FMAs),
    16-bit features included (their rows are summed in float32 there)."""
    if dtype == mx.float32 and c_out % 4 == 0 and uses_tensor_cores(mx.float32, c_in):
        return "conv_weight_grad_mma"
    return "conv_weight_grad"


def _weight_grad(x: mx.array, dy: mx.array, nmap: mx.array, order: mx.array) -> mx.array:
    """dW[k] = gather(x, nmap[:, k])^T @ dy, float32 (K, C_in, C_out): one kernel, each
    threadgroup a run of rows of ``order`` x a 32 x 32 tile (64 x 64 when both channel
    counts exceed 32) of one offset, float32 atomics at the end.

    Which kernel (``_weight_grad_kernel``): float32 features whose channel counts are
    multiples of 4, while TF32 is allowed (the forward's rule), take the tensor-core kernel
    — runs of 1024 positions, the rows that read the offset listed first, then multiplied
    32 at a time in TF32 (mma.sync) with the next 32 rows' gathers in flight (cp.async).
    It was the training step's largest GPU cost on the FMA kernel. Everything else takes
    the FMA kernel (full float32 products): runs of 512 rows walked 32 at a time, chunks
    that do not read the offset skipped (about half with sorted rows)."""
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
    name = _weight_grad_kernel(x.dtype, c_in, c_out)
    if name == "conv_weight_grad_mma":
        run, template = _WGRAD_RUN, [("T", x.dtype), ("TT", tt), ("P", _wgrad_mma_stages(tt))]
    else:
        run, template = _WGRAD_ROWS, [("T", x.dtype), ("TT", tt)]
    (dw,) = launch(
        "conv",
        name,
        [x, dy.astype(x.dtype), nmap, order, int_params(n_out, kv, c_in, c_out, run)],
        [(kv, c_in, c_out)],
        [mx.float32],
        -(-n_out // run) * THREADS,
        template=template,
        init=0,
        grid_y=kv * tiles,
    )
    return dw


def _conv_over(rel, transposed: bool):
    """The differentiable convolution (x, w) -> y over ``rel``'s map, or its inverse map
    (``transposed``). Over a mirrored relation the inverse-map convolution is the forward
    one with W's offsets reversed — sum_k dy[inv[i, k]] W[k]^T = sum_j dy[map[i, j]]
    W[K-1-j]^T — so a submanifold convolution's input gradient runs over the forward map
    and its row order: no inverse map (0.30 ms on the spconv shape) and no second row order
    (0.35 ms) per relation and backward pass, and no (N, K) inverse held. (Each row sums
    its offsets in the other order than over the inverse map: equal up to float32
    rounding.)"""
    if transposed and rel.mirrored:
        forward = _conv_fn(rel)
        return lambda x, w: forward(x, w[::-1])
    return _conv_fn(rel, transposed)


def _conv_fn(rel, transposed: bool = False):
    """The differentiable convolution over ``rel``'s map (``transposed``: over its inverse
    map, W transposed per offset — the input gradient). One pair per relation, kept on
    it. The VJP of each is the other (``_conv_over``: the forward one again with W's
    offsets reversed over a mirrored relation) plus the weight-gradient kernel, whose own
    VJP is the two convolutions again (it is bilinear in x and dY), so second derivatives
    work; an inverse map is built on the first backward pass that needs one only."""

    def make():
        def the_map():  # built on first use: the in-major map on the first backward pass
            return in_major_map(rel) if transposed else rel.neighbor_map

        def order(c_in, c_out):
            key = "in_major_row_order" if transposed else "row_order"
            return _tile_order(rel, key, the_map(), c_in, c_out)

        @mx.custom_function
        def conv(x, w):
            return _conv_kernel(x, w, the_map(), order(x.shape[1], w.shape[2]))

        @mx.custom_function
        def weight_grad(x, dy):
            return _weight_grad(x, dy, the_map(), order(x.shape[1], dy.shape[1]))

        @weight_grad.vjp
        def weight_grad_vjp(primals, cotangent, output):
            # dW[k] = sum_o x[map[o, k]]^T dy[o]: bilinear, so its VJP is the convolution of
            # dY over the other map with G^T (for x) and of x with G (for dY)
            x, dy = primals
            dx = _conv_over(rel, not transposed)(dy, cotangent.swapaxes(1, 2))
            ddy = _conv_over(rel, transposed)(x, cotangent)
            return dx.astype(x.dtype), ddy.astype(dy.dtype)

        @conv.vjp
        def conv_vjp(primals, cotangent, output):
            x, w = primals
            dy = cotangent.astype(x.dtype)
            dx = _conv_over(rel, not transposed)(dy, w.swapaxes(1, 2))
            return dx, weight_grad(x, dy).astype(w.dtype)

        return conv

    return rel.cached("cuda_conv_t" if transposed else "cuda_conv", make)


def _fused_conv(rel, relu: bool, residual: bool, concat: bool):
    """The differentiable convolution over ``rel``'s map with the fused epilogue:
    (x, w, scale, shift[, residual][, concat]) -> [act(conv * scale + shift + residual),
    concat] from one kernel (``_conv_kernel``'s ``*_affine`` entries). Its VJP / JVP are
    those of ``affine_then_concat`` over the plain convolution (``_conv_fn``): the convolution
    runs again there, unfused (the JVP raises as the plain convolution's does: MLX's custom
    kernels have none). One per relation and form, kept on it."""

    def make():
        conv = _conv_fn(rel)

        def split(args):
            x, w, scale, shift, *rest = args
            res = rest.pop(0) if residual else None
            return x, w, (scale, shift, res, relu, rest.pop(0) if concat else None)

        def unfused(*args):
            x, w, epilogue = split(args)
            return affine_then_concat(conv(x, w), *epilogue)

        @mx.custom_function
        def fused(*args):
            x, w, epilogue = split(args)
            nmap = rel.neighbor_map
            return _conv_kernel(
                x, w, nmap, _tile_order(rel, "row_order", nmap, x.shape[1], w.shape[2]), epilogue
            )

        @fused.vjp
        def fused_vjp(primals, cotangent, output):
            return tuple(mx.vjp(unfused, list(primals), [cotangent])[1])

        @fused.jvp
        def fused_jvp(primals, tangents):  # None: an operand the JVP does not vary
            tangents = [mx.zeros_like(p) if t is None else t for p, t in zip(primals, tangents, strict=True)]
            return mx.jvp(unfused, list(primals), tangents)[1][0]

        return fused

    return rel.cached(f"cuda_conv_affine_{int(relu)}{int(residual)}{int(concat)}", make)


@implements(routes.IMPLICIT_GEMM.cuda)
def implicit_gemm(feats: mx.array, weight: mx.array, rel, epilogue=None) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out) over the relation's dense
    neighbour map (differentiable, also twice); ``epilogue`` (``cuda.fused_epilogue``):
    ``(scale, shift, residual | None, relu, concat | None)`` applied by the kernel."""
    with mx.stream(mx.gpu):
        if epilogue is None:
            return _conv_fn(rel)(feats, weight)
        scale, shift, res, relu, cat = epilogue
        fn = _fused_conv(rel, relu, res is not None, cat is not None)
        return fn(feats, weight, scale, shift, *(a for a in (res, cat) if a is not None))


@implements(routes.CUDA_FUSED_EPILOGUE)
def fused_epilogue(plan, scale, shift, residual, relu: bool, concat) -> mx.array:
    """The convolution's own route (``cuda.implicit_gemm`` or its packed-weight form) with
    the affine map and the concatenation handed to its kernel."""
    return dispatch(
        plan.route,
        plan.x.run_feats,
        plan.weight,
        plan.relation,
        epilogue=(scale, shift, residual, relu, concat),
    )


implements(routes.DEQUANT_IMPLICIT_GEMM.cuda)(dequantized(implicit_gemm))
