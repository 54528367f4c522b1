"""Sparse convolution on the GPU route (MLX kernels: gather, gather_mm, scatter-add), on the
spconv benchmark shape of ../shared/tools/gpu/README.md: about 484,637 voxels on
spherical shells in a 256^3 grid, submanifold k=3, 32 and 64 channels, float32 and
float16, relation built fresh (on the CPU core) and reused.

    python benchmarks/bench_conv_gpu.py [--repeats 20]
"""

from __future__ import annotations

import argparse

import mlx.core as mx
import numpy as np
from _common import median_ms, report

import lattice
from lattice.ops import subm_conv3d, submanifold_kernel_relation


def shells(target: int = 484_637, size: int = 256, seed: int = 0) -> np.ndarray:
    """Voxels on concentric spherical shells (one voxel thick) centred in a size^3 grid."""
    rng = np.random.default_rng(seed)
    c = (size - 1) / 2
    parts, total = [], 0
    radius = 20.0
    while total < target and radius < c:
        n = int(4 * np.pi * radius**2 * 3)
        d = rng.normal(size=(n, 3))
        d /= np.linalg.norm(d, axis=1, keepdims=True)
        v = np.unique(np.floor(c + radius * d).astype(np.int32), axis=0)
        parts.append(v)
        total += len(v)
        radius += 6.0
    v = np.unique(np.concatenate(parts), axis=0)[:target]
    return np.concatenate([np.zeros((len(v), 1), np.int32), v], axis=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    coords = shells()
    rows = []
    for c in (32, 64):
        for dtype in (mx.float32, mx.float16):
            feats = mx.random.normal((len(coords), c)).astype(dtype)
            w = (mx.random.normal((c, 3, 3, 3, c)) * 0.05).astype(mx.float32)
            mx.eval(feats, w)

            def fresh(feats=feats, w=w):
                x = lattice.SparseTensor(coords, feats)
                mx.eval(subm_conv3d(x, w, device="gpu").feats)

            x = lattice.SparseTensor(coords, feats)
            rel = submanifold_kernel_relation(x)

            def reused(x=x, w=w):
                mx.eval(subm_conv3d(x, w, device="gpu").feats)

            reused()
            rows.append({
                "N": len(coords), "edges": rel.edge_count, "C": f"{c}->{c}", "dtype": str(dtype).split(".")[-1],
                "fresh_ms": median_ms(fresh, max(3, args.repeats // 4)),
                "relation_reused_ms": median_ms(reused, args.repeats),
                "route": lattice.explain(subm_conv3d, x, w, device="gpu").name,
            })
    report(rows, f"subm k=3 on the GPU route ({lattice.backend_info().gpu})")


if __name__ == "__main__":
    main()
