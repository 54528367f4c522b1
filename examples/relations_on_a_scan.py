"""Build the kernel maps of a small sparse U-Net level on a real LiDAR scan.

    python examples/relations_on_a_scan.py [path/to/scan.bin] [--voxel-size 0.05]

Reads a KITTI-format scan (float32 x, y, z, intensity), voxelizes it, and prints
the relation statistics a sparse CNN would use: submanifold k=3 at full
resolution, a k=2 s=2 downsampling map, and the transposed map back onto the
fine support. Relations are cached by the coordinate manager, so asking twice
costs nothing.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import mlx.core as mx
import numpy as np

import lattice
from lattice.ops import kernel_relation, submanifold_kernel_relation, transposed_kernel_relation

DEFAULT = Path(__file__).resolve().parents[1].parent / "shared/data/semantickitti/seq00_000000.bin"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scan", nargs="?", default=str(DEFAULT))
    ap.add_argument("--voxel-size", type=float, default=0.05)
    args = ap.parse_args()

    points = np.fromfile(args.scan, dtype=np.float32).reshape(-1, 4)
    q = lattice.sparse_quantize(points[:, :3], args.voxel_size)
    feats = mx.ones((q.active_count, 1))
    x = lattice.SparseTensor(q.coords, feats)
    print(f"{len(points):,} points -> {x.active_count:,} voxels at {args.voxel_size} m")

    for label, build in (
        ("submanifold k=3", lambda: submanifold_kernel_relation(x)),
        ("forward k=2 s=2", lambda: kernel_relation(x, kernel_size=2, stride=2)),
    ):
        t0 = time.perf_counter()
        rel = build()
        ms = (time.perf_counter() - t0) * 1e3
        print(
            f"{label:18} out {rel.out_count:>8,}  edges {rel.edge_count:>9,}  "
            f"avg neighbours {rel.average_neighbors:5.2f}  {ms:7.1f} ms"
        )
    down = kernel_relation(x, kernel_size=2, stride=2)
    coarse = lattice.SparseTensor(
        down.out_coords,
        mx.ones((down.out_count, 1)),
        2,
        coord_key=down.out_key,
        coord_manager=x.coord_manager,
    )
    up = transposed_kernel_relation(coarse, x, kernel_size=2, stride=2)
    print(
        f"{'transposed k=2 s=2':18} out {up.out_count:>8,}  edges {up.edge_count:>9,}  (onto the fine support)"
    )
    print(f"cached relations: {x.coord_manager.relation_count}")


if __name__ == "__main__":
    main()
