"""The other op families on the GPU against the CPU route, side by side in one run:
local pooling, pool transpose, trilinear upsampling, global pooling, voxelize and
devoxelize, on the spconv benchmark shape (about 484,637 voxels on spherical shells in a
256^3 grid; 8 batch members of consecutive rows for global pooling; one point inside
each voxel for voxelize / devoxelize at voxel size 1).

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


def cases(v: np.ndarray, feats: np.ndarray, points: np.ndarray):
    """name -> (rows in, explain name, op(device) -> result), on fresh tensors per call."""
    down = np.unique(v // [1, 2, 2, 2], axis=0)
    grouped = v.copy()
    grouped[:, 0] = np.arange(len(v)) * 8 // len(v)  # 8 members of consecutive rows
    x = lattice.SparseTensor(v, mx.array(feats))
    coarse = lattice.SparseTensor(down, mx.array(feats[: len(down)]), stride=2)
    members = lattice.SparseTensor(grouped, mx.array(feats))
    pts, pf = mx.array(points), mx.array(feats)
    voxels = ops.voxelize(pts, pf, 1.0)
    return {
        "max_pool3d k2 s2": (x, lambda d: ops.max_pool3d(x, kernel_size=2, stride=2, device=d).feats),
        "avg_pool3d k3 s2": (x, lambda d: ops.avg_pool3d(x, kernel_size=3, stride=2, device=d).feats),
        "pool_transpose3d k2 s2": (coarse, lambda d: ops.pool_transpose3d(coarse, device=d).feats),
        "trilinear_upsample3d s2": (coarse, lambda d: ops.trilinear_upsample3d(coarse, device=d).feats),
        "global_avg_pool": (members, lambda d: ops.global_avg_pool(members, device=d)),
        "global_max_pool": (members, lambda d: ops.global_max_pool(members, device=d)),
        "voxelize mean": (pts, lambda d: ops.voxelize(pts, pf, 1.0, device=d).feats),
        "devoxelize linear": (pts, lambda d: ops.devoxelize(pts, voxels, 1.0, device=d)),
    }


def _explain(name: str, first, device: str) -> str:
    """The route ``lattice explain`` names for the case ``name`` (first argument ``first``)."""
    op = name.split()[0]
    if op == "voxelize":
        return lattice.explain(op, first, mx.zeros((first.shape[0], 1)), 1.0, device=device).name
    if op == "devoxelize":
        voxels = ops.voxelize(first, None, 1.0, reduction="count")
        return lattice.explain(op, first, voxels, 1.0, device=device).name
    kw = {"kernel_size": 2, "stride": 2} if op == "max_pool3d" else {}
    return lattice.explain(op, first, **kw, device=device).name


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
    points = (v[:, 1:] + rng.random((len(v), 3))).astype(np.float32)  # one point per voxel, inside it

    rows = []
    cpu_cases = cases(v, feats, points)
    gpu_cases = cases(v, feats, points) if has_gpu else {}  # one coordinate manager per device
    for name, (first, fn) in cpu_cases.items():
        out = fn("cpu")
        mx.eval(out)
        row = {
            "op": name,
            "rows_in": int(first.shape[0]),
            "rows_out": int(out.shape[0]),
            "cpu_ms": round(median_ms(lambda fn=fn: mx.eval(fn("cpu")), args.repeats), 3),
        }
        if has_gpu:
            g = gpu_cases[name][1]
            mx.eval(g("gpu"))
            row["gpu_ms"] = round(median_ms(lambda g=g: mx.eval(g("gpu")), args.repeats), 3)
            row["route"] = _explain(name, gpu_cases[name][0], "gpu")
        rows.append(row)
    report(rows, f"GPU vs CPU routes, C={c}, float32 ({lattice.backend_info().gpu or 'no GPU'})", args.json)


if __name__ == "__main__":
    main()
