"""Sparse convolution on the GPU (lattice's CUDA kernels where MLX runs on CUDA), on the
spconv benchmark shape of ../shared/tools/gpu/README.md: about 484,637 voxels on
spherical shells in a 256^3 grid, submanifold k=3, 32 and 64 channels, float32 and
float16; relation built fresh on the GPU and reused; forward and forward+backward.

    python benchmarks/bench_conv_gpu.py [--repeats 20] [--json out.json] [--save-coords PATH [--save-only]]

``--save-coords PATH`` writes the voxels it times to PATH (.npy, int32 (N, 4) rows of
batch, x, y, z, as ``shells()`` makes them: batch 0, x, y, z in [0, 256)), the file that
peers/spconv_conv_gpu.py and peers/spconv_unet.py read, so spconv runs on the same voxels;
with ``--save-only`` it stops there (NumPy only: MLX and lattice are imported by the
benchmark itself).

Coordinates start on the GPU (as spconv's indices do). Columns (medians, ms):
tensor_ms = SparseTensor from them (GPU hash table + duplicate/batch check, one host
read); relation_ms = the submanifold map from that table; build_ms = tensor + relation
(what spconv's fresh-minus-reused time pays: hashing and the kernel map);
reused_ms = subm_conv3d forward with the relation cached; fwd_bwd_ms = forward +
gradients of features and weight (relation cached); fresh_ms = tensor + relation +
forward, each evaluated before the next starts; fresh_1eval_ms = the same three as user
code runs them, ``subm_conv3d(SparseTensor(coords, feats), w)`` evaluated once (the
tensor's check still reads its numbers back), which is what spconv's fresh time times
(indices to output features, one synchronize).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
from _common import median_ms, report


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


def _median(samples):
    return round(statistics.median(samples), 3)


def save_coords(path: str, coords: np.ndarray) -> None:
    """Writes ``coords`` (int32 (N, 4): batch, x, y, z) to ``path`` as .npy."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    np.save(path, np.ascontiguousarray(coords, dtype=np.int32))
    print(f"wrote {path}: {coords.shape[0]} voxels, int32 (N, 4) batch, x, y, z")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--save-coords",
        metavar="PATH",
        default=None,
        help="write the voxels to PATH (.npy, int32 (N, 4): batch, x, y, z) for the spconv peers",
    )
    ap.add_argument("--save-only", action="store_true", help="write --save-coords and stop")
    args = ap.parse_args()
    if args.save_only and not args.save_coords:
        ap.error("--save-only needs --save-coords PATH")
    voxels = shells()
    if args.save_coords:
        save_coords(args.save_coords, voxels)
    if not args.save_only:
        bench(voxels, args.repeats, args.json)


def bench(voxels: np.ndarray, repeats: int, json_path: str | None) -> None:
    """The table of the module docstring, on ``voxels``."""
    import mlx.core as mx

    import lattice
    from lattice.core.kernel import KernelSpec
    from lattice.ops import subm_conv3d

    with mx.stream(mx.gpu):
        coords = mx.array(voxels) + 0  # written by the GPU: resident there
    mx.eval(coords)
    spec = KernelSpec(3, op="bench")
    rows = []
    for c in (32, 64):
        for dtype in (mx.float32, mx.float16):
            feats = mx.random.normal((coords.shape[0], c)).astype(dtype)
            w = (mx.random.normal((c, 3, 3, 3, c)) * 0.05).astype(dtype)
            mx.eval(feats, w)

            rel_t, tensor_t, build_t, fresh_t = [], [], [], []
            for i in range(repeats + 1):
                t0 = time.perf_counter()
                x = lattice.SparseTensor(coords, feats)
                mx.eval(x.coords)
                t1 = time.perf_counter()
                rel = x.coord_manager.relation(
                    "submanifold", x.coord_key, spec, op="subm_conv3d", device="gpu"
                )
                mx.eval(rel.neighbor_map)
                t2 = time.perf_counter()
                mx.eval(subm_conv3d(x, w, device="gpu").feats)
                t3 = time.perf_counter()
                if i:  # first round compiles the kernels
                    tensor_t.append((t1 - t0) * 1e3)
                    rel_t.append((t2 - t1) * 1e3)
                    build_t.append((t2 - t0) * 1e3)
                    fresh_t.append((t3 - t0) * 1e3)

            one_eval = []
            for i in range(repeats + 1):
                t0 = time.perf_counter()
                y = subm_conv3d(lattice.SparseTensor(coords, feats), w, device="gpu")
                mx.eval(y.feats)
                if i:
                    one_eval.append((time.perf_counter() - t0) * 1e3)

            x = lattice.SparseTensor(coords, feats)

            def reused(x=x, w=w):
                mx.eval(subm_conv3d(x, w, device="gpu").feats)

            def loss(f, wt, x=x):
                y = subm_conv3d(
                    lattice.SparseTensor(x.coords, f, coord_key=x.coord_key, coord_manager=x.coord_manager),
                    wt,
                    device="gpu",
                )
                return y.feats.astype(mx.float32).sum()

            grad = mx.grad(loss, argnums=(0, 1))

            def fwd_bwd(x=x, w=w, grad=grad):
                mx.eval(grad(x.feats, w))

            reused()
            rel = x.coord_manager.relation("submanifold", x.coord_key, spec, device="gpu")
            rows.append(
                {
                    "N": int(coords.shape[0]),
                    "edges": rel.edge_count,
                    "C": f"{c}->{c}",
                    "dtype": str(dtype).split(".")[-1],
                    "tensor_ms": _median(tensor_t),
                    "relation_ms": _median(rel_t),
                    "build_ms": _median(build_t),
                    "reused_ms": round(median_ms(reused, repeats), 3),
                    "fwd_bwd_ms": round(median_ms(fwd_bwd, max(3, repeats // 2)), 3),
                    "fresh_ms": _median(fresh_t),
                    "fresh_1eval_ms": _median(one_eval),
                    "route": lattice.explain(subm_conv3d, x, w, device="gpu").name,
                }
            )
    report(rows, f"subm k=3 on the GPU ({lattice.backend_info().gpu})", json_path)


if __name__ == "__main__":
    main()
