"""Kernel-level timings of the CUDA routes on the spconv shape (no op layers): table
build, submanifold map, both, CoordinateManager.relation on fresh tensors, the inverse
map, the row order of the convolution kernels; where the reused forward's time goes; then per channel count and dtype the convolution kernel alone and the three parts
of its backward (input gradient = the kernel over the inverse map, weight gradient), the
kernel with its rows unsorted, and the tensor-core kernel at each pipeline depth.
Medians, ms.

    python benchmarks/profile_cuda.py
    python benchmarks/profile_cuda.py --layers [--repeats 30]
    python benchmarks/profile_cuda.py --launches

``--layers``: only the forward kernel (rows sorted) at the channel counts of MinkUNet14
w32's convolutions, on the spconv shape's 3^3 map (and its 5^3 map for the 4-channel stem),
with a digest of each output's bytes: run in two trees (``PYTHONPATH=build/base``) it is a
kernel-level before / after, and equal digests say the two kernels give the same bits.
``--shapes`` adds, per float32 layer, the tensor-core kernel at other tile shapes (TM rows, TN
columns, P stages; ``cuda_conv._mma_config`` picks the default) — the first of them the
shape of the kernel before tiles of 128 rows and dynamic shared memory (64 rows, TN 32 / 64
/ 96, the stages that fit 44 KiB of static shared memory).

``--launches``: what queueing one kernel costs on the host (graphs built, nothing evaluated;
microseconds a call): the 32 -> 32 float32 tensor-core convolution through lattice's
``launch`` and through its ``mx.fast.cuda_kernel`` object directly (each call hands MLX the
kernel's whole source, ``kernels/conv.inc`` with it), the table insert (a short source), an
MLX element-wise op, and the byte counts of those sources. Written 2026-12-08 after a
cProfile put about 20 µs in each ``launch``; not yet run on a GPU.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import statistics
import time

import mlx.core as mx
import numpy as np
from _common import median_ms, timed_ms
from bench_conv_gpu import shells

import lattice
from lattice.backends import kernels
from lattice.backends.cuda import conv as cuda_conv
from lattice.backends.cuda import coords as cuda_coords
from lattice.backends.cuda import relations as cuda_relations
from lattice.backends.cuda.launch import THREADS, int_params, launch
from lattice.core.kernel import KernelSpec
from lattice.ops import subm_conv3d


def med(fn, repeats: int = 20) -> float:
    return round(median_ms(fn, repeats, warmup=2), 3)


# (C_in, C_out, kernel size, dtype) of MinkUNet14 w32's convolutions (the stem, the encoder's
# and decoder's widths, a decoder block's first convolution after the concatenation)
LAYERS = [
    (4, 32, 5, mx.float32),
    (32, 32, 3, mx.float32),
    (64, 64, 3, mx.float32),
    (128, 128, 3, mx.float32),
    (128, 96, 3, mx.float32),
    (96, 96, 3, mx.float32),
    (32, 32, 3, mx.float16),
    (96, 96, 3, mx.float16),
]


def _digest(y: mx.array) -> str:
    """The first 16 hex digits of the SHA-256 of ``y``'s float32 bytes."""
    return hashlib.sha256(np.array(y.astype(mx.float32)).tobytes()).hexdigest()[:16]


@contextlib.contextmanager
def forced_shape(shape: tuple[int, int, int]):
    """The tensor-core forward kernel at tile ``shape`` (TM, TN, P) instead of the one
    ``cuda_conv._mma_config`` picks, inside the block."""
    default = cuda_conv._mma_config
    cuda_conv._mma_config = lambda *_: shape
    try:
        yield
    finally:
        cuda_conv._mma_config = default


def _shapes(c_out: int, itemsize: int) -> list[tuple[int, int, int]]:
    """Tile shapes to time a layer at: the former kernel's (64 rows; TN 32, 64 or 96; the
    stages that fit 44 KiB of static memory), then at the default TN 64 rows with 4 stages
    and 128 rows with 2 or 3, and 128 x 64 for outputs wider than 96."""
    old_tn = 32 if c_out <= 32 else 96 if -(-c_out // 96) * 96 < -(-c_out // 64) * 64 else 64
    old = (64, old_tn, max(2, min(4, 44 * 1024 // ((64 + old_tn) * (32 + 16 // itemsize) * itemsize))))
    tn = cuda_conv.tile_n(c_out, True)
    out = [old, (64, tn, 4), (128, tn, 2), (128, tn, 3)]
    if c_out > 96:
        out += [(128, 64, 3)]
    fits = lambda s: cuda_conv.mma_shared_bytes(itemsize, *s) <= 200 * 1024  # noqa: E731
    return list(dict.fromkeys(s for s in out if fits(s)))


def layers(repeats: int, shapes: bool = False) -> None:
    coords = mx.array(shells())
    maps = {}
    for k in (3, 5):
        spec = KernelSpec(k, op="profile")
        offsets = spec.offsets()
        mx.eval(coords, offsets)
        nmap = cuda_relations.submanifold_map(cuda_coords.build_table(coords), offsets)
        order = cuda_relations.row_order(nmap)
        mx.eval(nmap, order)
        maps[k] = (nmap, order)
    n = coords.shape[0]
    for c_in, c_out, k, dtype in LAYERS:
        nmap, order = maps[k]
        rng = mx.random.key(c_in * 1000 + c_out)
        kx, kw = mx.random.split(rng)
        x = mx.random.normal((n, c_in), key=kx).astype(dtype)
        w = (mx.random.normal((k**3, c_in, c_out), key=kw) * 0.05).astype(dtype)
        mx.eval(x, w)
        digest = _digest(cuda_conv._conv_kernel(x, w, nmap, order))
        ms = med(
            lambda x=x, w=w, nmap=nmap, order=order: mx.eval(cuda_conv._conv_kernel(x, w, nmap, order)),
            repeats,
        )
        pairs = int((nmap >= 0).sum())
        tflops = 2 * pairs * c_in * c_out / ms / 1e9
        tag = f"{c_in}->{c_out} k{k} {str(dtype).split('.')[-1]}"
        print(f"layer {tag:<22} {ms:8.3f} ms  {tflops:6.1f} TFLOP/s (useful)  digest {digest}", flush=True)
        if not shapes or dtype != mx.float32 or not cuda_conv.uses_tensor_cores(dtype, c_in):
            continue
        for shape in _shapes(c_out, dtype.size):
            with forced_shape(shape):
                same = _digest(cuda_conv._conv_kernel(x, w, nmap, order)) == digest
                ms = med(
                    lambda x=x, w=w, m=nmap, o=order: mx.eval(cuda_conv._conv_kernel(x, w, m, o)), repeats
                )
            print(f"  shape TM={shape[0]:<3} TN={shape[1]:<3} P={shape[2]}  {ms:8.3f} ms  same bits {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--layers", action="store_true", help="only the forward kernel at MinkUNet14's layer shapes"
    )
    ap.add_argument("--shapes", action="store_true", help="with --layers: other tile shapes too")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--launches", action="store_true", help="only the host cost of queueing a kernel")
    args = ap.parse_args()
    if args.launches:
        launches()
        return
    if args.layers:
        layers(args.repeats, args.shapes)
        return
    coords = mx.array(shells())
    spec = KernelSpec(3, op="profile")
    offsets = spec.offsets()
    mx.eval(coords, offsets)
    table = cuda_coords.build_table(coords)
    nmap = cuda_relations.submanifold_map(table, offsets)
    mx.eval(table.slots, nmap)
    print("build_table", med(lambda: mx.eval(cuda_coords.build_table(coords).slots)))
    print("submanifold_map", med(lambda: mx.eval(cuda_relations.submanifold_map(table, offsets))))
    print(
        "both", med(lambda: mx.eval(cuda_relations.submanifold_map(cuda_coords.build_table(coords), offsets)))
    )
    tensors = [lattice.SparseTensor(coords, mx.zeros((coords.shape[0], 1))) for _ in range(25)]
    times = []
    for x in tensors:
        t0 = time.perf_counter()
        rel = x.coord_manager.relation("submanifold", x.coord_key, spec, device="gpu")
        mx.eval(rel.neighbor_map)
        times.append((time.perf_counter() - t0) * 1e3)
    print("manager.relation", round(statistics.median(times[2:]), 3))
    inv = cuda_relations.invert_map(nmap, coords.shape[0])
    print("invert_map", med(lambda: mx.eval(cuda_relations.invert_map(nmap, coords.shape[0]))))
    n = coords.shape[0]
    order, inv_order, unsorted = (
        cuda_relations.row_order(nmap),
        cuda_relations.row_order(inv),
        mx.arange(n, dtype=mx.int32),
    )
    mx.eval(order, inv_order, unsorted)
    print("row_order", med(lambda: mx.eval(cuda_relations.row_order(nmap))))
    op_path(coords, spec, nmap, order)
    for c in (32, 64):
        for dtype in (mx.float32, mx.float16):
            x = mx.random.normal((n, c)).astype(dtype)
            w = (mx.random.normal((27, c, c)) * 0.05).astype(dtype)
            mx.eval(x, w)
            tag = f"C={c} {str(dtype).split('.')[-1]}"
            print(
                f"conv kernel {tag}", med(lambda x=x, w=w: mx.eval(cuda_conv._conv_kernel(x, w, nmap, order)))
            )
            print(
                f"  conv kernel {tag} rows unsorted",
                med(lambda x=x, w=w: mx.eval(cuda_conv._conv_kernel(x, w, nmap, unsorted))),
            )
            wt = w.swapaxes(1, 2)
            print(
                f"input grad kernel {tag}",
                med(lambda x=x, wt=wt: mx.eval(cuda_conv._conv_kernel(x, wt, inv, inv_order))),
            )
            print(f"weight grad {tag}", med(lambda x=x: mx.eval(cuda_conv._weight_grad(x, x, nmap, order))))
            print(
                f"  weight grad {tag} rows unsorted",
                med(lambda x=x: mx.eval(cuda_conv._weight_grad(x, x, nmap, unsorted))),
            )
            if cuda_conv.uses_tensor_cores(dtype, c):
                stages_sweep(tag, x, w, nmap, order)


def _per_call_us(fn, calls: int = 2000, rounds: int = 5) -> str:
    """Median (range) over ``rounds`` of the mean microseconds of ``calls`` calls of ``fn``
    (``_common.timed_ms`` of the batch, one batch untimed first)."""

    def batch():
        for _ in range(calls):
            fn()

    means = [ms * 1e3 / calls for ms in timed_ms(batch, rounds)]
    return f"{statistics.median(means):.2f} us ({min(means):.2f}-{max(means):.2f})"


def launches() -> None:
    """``--launches``: the host cost of queueing a kernel (nothing is evaluated: the graphs
    are dropped unrun, so the kernels are not even compiled)."""
    n, kv, c = 100_000, 27, 32
    with mx.stream(mx.gpu):
        x, w = mx.zeros((n, c)), mx.zeros((c, kv, c))
        nmap, order = mx.zeros((n, kv), dtype=mx.int32), mx.zeros((n,), dtype=mx.int32)
        coords = mx.zeros((n, 4), dtype=mx.int32)
        mx.eval(x, w, nmap, order, coords)
        params = int_params(n, kv, c, c)
        tm, tn, stages = cuda_conv._mma_config(4, c, c, n)
        shared = cuda_conv.mma_shared_bytes(4, tm, tn, stages)
        template = [("T", mx.float32), ("TM", tm), ("TN", tn), ("P", stages)]
        threads = -(-n // tm) * THREADS
        conv_fn = kernels.kernel("cuda", "conv", "conv_implicit_gemm_mma", shared)
        table_fn = kernels.kernel("cuda", "coords", "table_insert")
        for family, name in (("conv", "conv_implicit_gemm_mma"), ("coords", "table_insert")):
            e = kernels.entries("cuda", family)[name]
            print(
                f"{name}: source handed to MLX per call {len(kernels.header('cuda', e.uses)) + len(e.source):,} bytes"
            )

        def conv_direct():
            return conv_fn(
                inputs=[x, w, nmap, order, params],
                output_shapes=[(n, c)],
                output_dtypes=[mx.float32],
                grid=(threads, 1, 1),
                threadgroup=(THREADS, 1, 1),
                template=template,
                init_value=None,
                stream=mx.gpu,
            )

        def conv_launch():
            return launch(
                "conv",
                "conv_implicit_gemm_mma",
                [x, w, nmap, order, params],
                [(n, c)],
                [mx.float32],
                threads,
                template=template,
                shared=shared,
            )

        def table_direct():
            return table_fn(
                inputs=[
                    coords,
                    int_params(n, cuda_coords._table_capacity(n) - 1),
                ],  # [n, mask] as build_table
                output_shapes=[(4 * n,)],
                output_dtypes=[mx.int32],
                grid=(n, 1, 1),
                threadgroup=(THREADS, 1, 1),
                template=[],
                init_value=-1,
                stream=mx.gpu,
            )

        print("conv kernel through launch()", _per_call_us(conv_launch))
        print("conv kernel, its mx.fast.cuda_kernel called directly", _per_call_us(conv_direct))
        print("table_insert called directly (short source)", _per_call_us(table_direct))
        print("MLX x + 1", _per_call_us(lambda: x + 1))
        print("int_params (cached)", _per_call_us(lambda: int_params(n, kv, c, c)))


def op_path(coords, spec, nmap, order, c: int = 32, dtype=mx.float16) -> None:
    """Where the reused forward's time goes (C=32 float16): the eval floor (a one-element
    op), the kernel alone, the differentiable route function, the whole op; and eight
    kernels in one eval (per kernel: the GPU time without the per-eval sync)."""
    x = lattice.SparseTensor(coords, mx.random.normal((coords.shape[0], c)).astype(dtype))
    w = (mx.random.normal((c, 3, 3, 3, c)) * 0.05).astype(dtype)
    mx.eval(x.feats, w)
    y = subm_conv3d(x, w, device="gpu")
    mx.eval(y.feats)
    rel = x.coord_manager.relation("submanifold", x.coord_key, spec, op="subm_conv3d", device="gpu")
    wm = w.reshape(c, 27, c).transpose(1, 2, 0)
    one = mx.ones((1,))
    mx.eval(one)
    with mx.stream(mx.gpu):
        print("op path: eval floor", med(lambda: mx.eval(one + 1), 50))
        print("op path: kernel", med(lambda: mx.eval(cuda_conv._conv_kernel(x.feats, wm, nmap, order)), 50))
        print("op path: route fn", med(lambda: mx.eval(cuda_conv.implicit_gemm(x.feats, wm, rel)), 50))
        print("op path: subm_conv3d", med(lambda: mx.eval(subm_conv3d(x, w, device="gpu").feats), 50))
        xs = [x.feats * (i + 1) for i in range(8)]
        mx.eval(xs)
        print(
            "op path: kernel x8 / 8",
            round(med(lambda: mx.eval([cuda_conv._conv_kernel(f, wm, nmap, order) for f in xs]), 20) / 8, 3),
        )


def stages_sweep(tag, x, w, nmap, order) -> None:
    """The tensor-core kernel at each pipeline depth from 2 to 4 at its default tile
    (cuda_conv._mma_config)."""
    tm, tn, _ = cuda_conv._mma_config(x.dtype.size, int(w.shape[1]), int(w.shape[2]), int(nmap.shape[0]))
    for p in range(2, 5):
        with forced_shape((tm, tn, p)):
            print(
                f"  conv kernel {tag} TM={tm} TN={tn} P={p}",
                med(lambda: mx.eval(cuda_conv._conv_kernel(x, w, nmap, order))),
            )


if __name__ == "__main__":
    main()
