"""Kernel-level timings of the CUDA routes on the spconv shape (no op layers): table
build, submanifold map, both, CoordinateManager.relation on fresh tensors, the inverse
map; then per channel count and dtype the convolution kernel alone and the three parts
of its backward (input gradient = the kernel over the inverse map, weight gradient).
Medians, ms.

    python benchmarks/profile_cuda.py
"""

from __future__ import annotations

import statistics
import time

import mlx.core as mx
from _common import median_ms
from bench_conv_gpu import shells

import lattice
from lattice.backends import cuda
from lattice.core.kernel import KernelSpec


def med(fn, repeats: int = 20) -> float:
    return round(median_ms(fn, repeats, warmup=2), 3)


def main() -> None:
    coords = mx.array(shells())
    spec = KernelSpec(3, op="profile")
    offsets = spec.offsets()
    mx.eval(coords, offsets)
    table = cuda.build_table(coords)
    nmap = cuda.submanifold_map(table, offsets)
    mx.eval(table.slots, nmap)
    print("build_table", med(lambda: mx.eval(cuda.build_table(coords).slots)))
    print("submanifold_map", med(lambda: mx.eval(cuda.submanifold_map(table, offsets))))
    print("both", med(lambda: mx.eval(cuda.submanifold_map(cuda.build_table(coords), offsets))))
    tensors = [lattice.SparseTensor(coords, mx.zeros((coords.shape[0], 1))) for _ in range(25)]
    times = []
    for x in tensors:
        t0 = time.perf_counter()
        rel = x.coord_manager.relation("submanifold", x.coord_key, spec, device="gpu")
        mx.eval(rel.neighbor_map)
        times.append((time.perf_counter() - t0) * 1e3)
    print("manager.relation", round(statistics.median(times[2:]), 3))
    inv = cuda.invert_map(nmap, coords.shape[0])
    print("invert_map", med(lambda: mx.eval(cuda.invert_map(nmap, coords.shape[0]))))
    n = coords.shape[0]
    for c in (32, 64):
        for dtype in (mx.float32, mx.float16):
            x = mx.random.normal((n, c)).astype(dtype)
            w = (mx.random.normal((27, c, c)) * 0.05).astype(dtype)
            mx.eval(x, w)
            tag = f"C={c} {str(dtype).split('.')[-1]}"
            print(f"conv kernel {tag}", med(lambda x=x, w=w: mx.eval(cuda._conv_kernel(x, w, nmap))))
            wt = w.swapaxes(1, 2)
            print(f"input grad kernel {tag}", med(lambda x=x, wt=wt: mx.eval(cuda._conv_kernel(x, wt, inv))))
            print(f"weight grad {tag}", med(lambda x=x: mx.eval(cuda._weight_grad(x, x, nmap))))


if __name__ == "__main__":
    main()
