"""The file-level voxelizer (``lattice.pipeline.voxelize_cloud``: what ``lattice voxelize`` runs)
on real clouds, every attribute carried: reduction by kind (the default since issue 16) against
one reduction for every attribute (``mean``).

Inputs (``../shared/data``), cloud read beforehand (the time is the voxelizer's, not the reader's):

- ``kitti``: ``semantickitti/seq00_000000.bin``, 123,389 points, 1 continuous channel, 0.05 m;
- ``mug``: ``indoor/table_scene_mug_stereo_textured.pcd``, 307,200 points (209,280 finite),
  4 colour channels, 5 mm;
- ``learn0``: ``osd_labeled/learn0.pcd``, 307,200 points, a uint32 label (mode by kind) and
  4 colour channels, 1 cm;
- ``autzen``: ``aerial_lidar/autzen_trim.las``, 110,000 points, 16 dimensions of which 10 are
  categorical (mode by kind), 1 m.

Medians and ranges over interleaved rounds. Run it with an older checkout's interpreter too
(``--modes mean``) to compare before and after in one sitting.

    python benchmarks/bench_voxelize_file.py [--repeats 9] [--modes kind,mean] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from _common import DATA

from lattice.io import read_points
from lattice.pipeline import voxelize_cloud

CASES = (
    ("kitti", "semantickitti/seq00_000000.bin", 0.05),
    ("mug", "indoor/table_scene_mug_stereo_textured.pcd", 0.005),
    ("learn0", "osd_labeled/learn0.pcd", 0.01),
    ("autzen", "aerial_lidar/autzen_trim.las", 1.0),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--modes", default="kind,mean", help="kind (default reductions) and/or mean")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    modes = args.modes.split(",")
    clouds = {name: (read_points(DATA / rel), size) for name, rel, size in CASES if (DATA / rel).exists()}
    times: dict[tuple[str, str], list[float]] = {(c, m): [] for c in clouds for m in modes}
    rows = {}
    for _ in range(args.repeats):
        for name, (cloud, size) in clouds.items():
            for mode in modes:
                kw = {} if mode == "kind" else {"reduction": mode}
                t0 = time.perf_counter()
                sf, s = voxelize_cloud(cloud, size, **kw)
                times[(name, mode)].append((time.perf_counter() - t0) * 1e3)
                rows[name] = (len(cloud), sf.num_rows, sf.num_channels)
    out = []
    print(f"{'input':8} {'points':>8} {'voxels':>8} {'ch':>3} " + " ".join(f"{m + ' ms':>22}" for m in modes))
    for name in clouds:
        n, m, c = rows[name]
        cells = []
        for mode in modes:
            t = times[(name, mode)]
            cells.append(f"{statistics.median(t):8.1f} ({min(t):.1f}-{max(t):.1f})")
            out.append({"input": name, "mode": mode, "points": n, "voxels": m, "channels": c,
                        "median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t)})  # fmt: skip
        print(f"{name:8} {n:8d} {m:8d} {c:3d} " + " ".join(f"{x:>22}" for x in cells))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
