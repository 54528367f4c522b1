"""The other op families on the GPU against the CPU route, side by side in one run:
local max pooling, pool transpose, trilinear upsampling, global pooling (and voxelize /
devoxelize where their GPU routes exist), on the spconv benchmark shape (about 484,637
voxels on spherical shells in a 256^3 grid, one batch member per 4 shells' worth of
rows for global pooling).

    python benchmarks/bench_gpu_ops.py [--repeats 20] [--channels 32] [--json out.json]

Medians, ms, of the op with its relation cached (``gpu_ms`` on MLX's GPU through
lattice's CUDA routes, ``cpu_ms`` through the CPU routes on this machine's cores) and
the rows in and out. Where MLX has no GPU, only the CPU column is measured.
"""

from __future__ import annotations

import argparse

import mlx.core as mx
import numpy as np
from _common import median_ms, report
from bench_conv_gpu import shells

import lattice
from lattice import ops


def cases(x: lattice.SparseTensor, coarse: lattice.SparseTensor, members: lattice.SparseTensor):
    return {
        "max_pool3d k2 s2": (x, lambda t, d: ops.max_pool3d(t, kernel_size=2, stride=2, device=d).feats),
        "avg_pool3d k3 s2": (x, lambda t, d: ops.avg_pool3d(t, kernel_size=3, stride=2, device=d).feats),
        "pool_transpose3d k2 s2": (coarse, lambda t, d: ops.pool_transpose3d(t, device=d).feats),
        "trilinear_upsample3d s2": (coarse, lambda t, d: ops.trilinear_upsample3d(t, device=d).feats),
        "global_avg_pool": (members, lambda t, d: ops.global_avg_pool(t, device=d)),
        "global_max_pool": (members, lambda t, d: ops.global_max_pool(t, device=d)),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--channels", type=int, default=32)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    has_gpu = hasattr(mx, "cuda") and mx.cuda.is_available()
    c = args.channels
    v = shells()
    rng = np.random.default_rng(0)
    feats = rng.normal(size=(len(v), c)).astype(np.float32)
    down = np.unique(v // [1, 2, 2, 2], axis=0)
    grouped = v.copy()
    grouped[:, 0] = np.arange(len(v)) * 8 // len(v)  # 8 members of consecutive rows

    def tensors():
        return cases(
            lattice.SparseTensor(v, mx.array(feats)),
            lattice.SparseTensor(down, mx.array(feats[: len(down)]), stride=2),
            lattice.SparseTensor(grouped, mx.array(feats)),
        )

    rows = []
    cpu_cases, gpu_cases = tensors(), tensors()  # one coordinate manager per device
    for name, (t, fn) in cpu_cases.items():
        mx.eval(fn(t, "cpu"))
        row = {"op": name, "rows_in": t.active_count, "rows_out": int(fn(t, "cpu").shape[0]),
               "cpu_ms": round(median_ms(lambda t=t, fn=fn: mx.eval(fn(t, "cpu")), args.repeats), 3)}
        if has_gpu:
            tg = gpu_cases[name][0]
            mx.eval(fn(tg, "gpu"))
            row["gpu_ms"] = round(median_ms(lambda tg=tg, fn=fn: mx.eval(fn(tg, "gpu")), args.repeats), 3)
            row["route"] = lattice.explain(name.split()[0], tg, device="gpu").name
        rows.append(row)
    report(rows, f"pooling family, C={c}, float32 ({lattice.backend_info().gpu or 'no GPU'})", args.json)


if __name__ == "__main__":
    main()
