"""Kernel-level timings of the CUDA routes on the spconv shape (no op layers): table
build, submanifold map, both, CoordinateManager.relation on fresh tensors, the inverse
map, the row order of the convolution kernels; where the reused forward's time goes; then per channel count and dtype the convolution kernel alone and the three parts
of its backward (input gradient = the kernel over the inverse map, weight gradient), the
kernel with its rows unsorted, and the tensor-core kernel at each pipeline depth.
Medians, ms.

    python benchmarks/profile_cuda.py
    python benchmarks/profile_cuda.py --layers [--repeats 30]

``--layers``: only the forward kernel (rows sorted) at the channel counts of MinkUNet14
w32's convolutions, on the spconv shape's 3^3 map (and its 5^3 map for the 4-channel stem),
with a digest of each output's bytes: run in two trees (``PYTHONPATH=build/base``) it is a
kernel-level before / after, and equal digests say the two kernels give the same bits.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time

import mlx.core as mx
import numpy as np
from _common import median_ms
from bench_conv_gpu import shells

import lattice
from lattice.backends.cuda import conv as cuda_conv
from lattice.backends.cuda import coords as cuda_coords
from lattice.backends.cuda import relations as cuda_relations
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


def layers(repeats: int) -> None:
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
        y = cuda_conv._conv_kernel(x, w, nmap, order)
        mx.eval(y)
        digest = hashlib.sha256(np.array(y.astype(mx.float32)).tobytes()).hexdigest()[:16]
        ms = med(
            lambda x=x, w=w, nmap=nmap, order=order: mx.eval(cuda_conv._conv_kernel(x, w, nmap, order)),
            repeats,
        )
        pairs = int((nmap >= 0).sum())
        tflops = 2 * pairs * c_in * c_out / ms / 1e9
        tag = f"{c_in}->{c_out} k{k} {str(dtype).split('.')[-1]}"
        print(f"layer {tag:<22} {ms:8.3f} ms  {tflops:6.1f} TFLOP/s (useful)  digest {digest}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--layers", action="store_true", help="only the forward kernel at MinkUNet14's layer shapes"
    )
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    if args.layers:
        layers(args.repeats)
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
    """The tensor-core kernel at each pipeline depth from 2 to its default
    (cuda_conv._mma_stages: the most that fit static shared memory, at most 4)."""
    default = cuda_conv._mma_stages
    deepest = default(x.dtype.size, cuda_conv.tile_n(int(w.shape[2]), True))
    try:
        for p in range(2, deepest + 1):
            cuda_conv._mma_stages = lambda *_, p=p: p
            print(
                f"  conv kernel {tag} P={p}", med(lambda: mx.eval(cuda_conv._conv_kernel(x, w, nmap, order)))
            )
    finally:
        cuda_conv._mma_stages = default


if __name__ == "__main__":
    main()
