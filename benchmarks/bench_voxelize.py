"""Voxelize (points -> voxels with mean features) against Open3D's ``voxel_down_sample``.

Inputs (all real scans from ``../shared/data``):

- ``kitti``: the SemanticKITTI scan ``seq00_000000.bin``, 123,389 points, at 0.05 m;
- ``kitti x2``: that scan plus ``kitti_01_points_000000.npy`` (90,404 points), 213,793
  points at 0.05 m: the issue's "200k points" case (about 181k voxels);
- ``mug rgb``: the finite points of ``indoor/table_scene_mug_stereo_textured.pcd``
  (209,280 of 307,200) with their colours, at 5 mm.

Calls, timed side by side (interleaved round by round, so machine load hits all of them
alike): ``lattice.ops.voxelize(points, feats, v, reduction="mean")`` with feats = xyz
(plus rgb for the mug: the same averages Open3D computes), ``lattice.sparse_quantize``
(coordinates and the point->voxel index only) and, when ``open3d`` is importable,
``open3d.geometry.PointCloud.voxel_down_sample(v)``. Each library gets its own container
built before timing: Open3D a ``PointCloud`` (its ``Vector3dVector`` copies), lattice
``mx.array``s. ``voxelize mean, NumPy in`` times the same call on the NumPy arrays, the
copy into MLX included.
Reports median ms, input and output rows, and the Open3D / lattice ratio (of the
medians, and the median of the per-round ratios). Output rows differ slightly because
Open3D's origin is ``min_bound - v / 2`` and lattice's default is 0; with Open3D's origin
the counts match exactly (checked below).

Also checks that the KITTI voxel set equals the NumPy reference
``np.unique(np.floor(p.astype(float64) / v))``.

    python benchmarks/bench_voxelize.py [--repeats 15] [--json out.json] [--no-open3d] [--stages]
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
import numpy as np
from _common import DATA, kitti_points, report

import lattice
from lattice.io import read_points
from lattice.ops import voxelize

VOXEL = 0.05


def _inputs() -> list[tuple[str, np.ndarray, np.ndarray | None, float]]:
    """(name, points float32 (N, 3), colours float32 (N, 3) or None, voxel size)."""
    kitti = kitti_points()
    out = [("kitti", kitti, None, VOXEL)]
    second = DATA / "semantickitti" / "kitti_01_points_000000.npy"
    if second.exists():
        both = np.concatenate([kitti, np.load(second).astype(np.float32)])
        out.append(("kitti x2", both, None, VOXEL))
    mug = DATA / "indoor" / "table_scene_mug_stereo_textured.pcd"
    if mug.exists():
        cloud = read_points(mug).drop_nan()
        out.append(("mug rgb", np.ascontiguousarray(cloud.points, np.float32), cloud.colors(), 0.005))
    return out


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1e3


def check_reference(points: np.ndarray, v: float) -> bool:
    """Our voxel set for ``points`` equals ``np.unique(np.floor(p.astype(float64) / v))``."""
    ref = np.unique(np.floor(points.astype(np.float64) / v).astype(np.int64), axis=0)
    ours = np.asarray(voxelize(points, points, v).coords)[:, 1:].astype(np.int64)
    ours = ours[np.lexsort(ours.T[::-1])]
    return ours.shape == ref.shape and bool(np.array_equal(ours, ref))


def bench(name, points, colors, v, repeats: int, o3d) -> list[dict]:
    feats = points if colors is None else np.concatenate([points, colors], axis=1)
    n = len(points)
    points_mx, feats_mx = mx.array(points), mx.array(feats)  # as Open3D's PointCloud: built once
    mx.eval(points_mx, feats_mx)

    def lattice_voxelize():
        t = voxelize(points_mx, feats_mx, v, reduction="mean")
        mx.eval(t.coords, t.feats)
        return t

    def lattice_voxelize_numpy():
        t = voxelize(points, feats, v, reduction="mean")
        mx.eval(t.coords, t.feats)
        return t

    def lattice_quantize():
        q = lattice.sparse_quantize(points_mx, v)
        mx.eval(q.coords, q.inverse_rows, q.counts)
        return q

    calls = {
        "lattice voxelize mean": lattice_voxelize,
        "lattice voxelize mean, NumPy in": lattice_voxelize_numpy,
        "lattice sparse_quantize": lattice_quantize,
    }
    n_out = {k: fn().coords.shape[0] for k, fn in calls.items()}
    if o3d is not None:
        pc = o3d.geometry.PointCloud(o3d.utility.Vector3dVector(points.astype(np.float64)))
        if colors is not None:
            pc.colors = o3d.utility.Vector3dVector(colors.astype(np.float64))

        def open3d_down():
            return pc.voxel_down_sample(v)

        calls["open3d voxel_down_sample"] = open3d_down
        n_out["open3d voxel_down_sample"] = len(open3d_down().points)
        # Same voxel set as Open3D when lattice uses Open3D's origin (min_bound - v / 2).
        same = lattice.sparse_quantize(points, v, origin=points.min(0).astype(np.float64) - v / 2)
        assert same.active_count == n_out["open3d voxel_down_sample"], (same.active_count, n_out)

    times: dict[str, list[float]] = {k: [] for k in calls}
    for fn in calls.values():  # warm-up
        fn()
    names = list(calls)
    for r in range(repeats):
        for k in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order
            times[k].append(_timed(calls[k]))

    med = {k: statistics.median(t) for k, t in times.items()}
    rows = []
    for k in names:
        row = {
            "input": name,
            "call": k,
            "N_in": n,
            "N_out": int(n_out[k]),
            "voxel_m": f"{v:g}",
            "median_ms": med[k],
            "o3d_ratio": "",
            "o3d_ratio_per_round": "",
        }
        if o3d is not None and not k.startswith("open3d"):
            o = times["open3d voxel_down_sample"]
            row["o3d_ratio"] = f"{med['open3d voxel_down_sample'] / med[k]:.1f}x"
            per_round = [a / b for a, b in zip(o, times[k], strict=True)]
            row["o3d_ratio_per_round"] = f"{statistics.median(per_round):.1f}x"
        rows.append(row)
    return rows


def stages(name, points, colors, v, repeats: int) -> list[dict]:
    """Where ``voxelize`` spends its time: quantize, the feature mean (both paths), the rest."""
    from lattice.ops.points import _voxelize_features, voxelize_features

    feats = mx.array(points if colors is None else np.concatenate([points, colors], axis=1))
    points = mx.array(points)
    q = lattice.sparse_quantize(points, v)

    def quantize():
        r = lattice.sparse_quantize(points, v)
        mx.eval(r.coords, r.inverse_rows, r.counts)

    def mean_host():
        mx.eval(_voxelize_features(feats, q, "mean", host_sums=True))

    def mean_mlx():
        mx.eval(voxelize_features(feats, q, "mean"))

    def whole():
        t = voxelize(points, feats, v)
        mx.eval(t.coords, t.feats)

    calls = {
        "sparse_quantize (native)": quantize,
        "feature mean, native segment sum (voxelize)": mean_host,
        "feature mean, MLX .at[].add (voxelize_features)": mean_mlx,
        "voxelize (all)": whole,
    }
    times: dict[str, list[float]] = {k: [] for k in calls}
    for fn in calls.values():
        fn()
    for _ in range(repeats):
        for k, fn in calls.items():
            times[k].append(_timed(fn))
    c = int(feats.shape[1])
    return [
        {"input": name, "stage": k, "N_in": int(points.shape[0]), "C": c, "median_ms": statistics.median(t)}
        for k, t in times.items()
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-open3d", action="store_true", help="skip the Open3D peer")
    ap.add_argument("--stages", action="store_true", help="also time the stages of voxelize")
    args = ap.parse_args()
    o3d = None
    if not args.no_open3d:
        try:
            import open3d as o3d
        except (ImportError, OSError) as e:
            print(f"open3d not importable ({e}); pip install 'lattice[open3d]' to compare")
    points = kitti_points()
    ok = check_reference(points, VOXEL)
    print(f"kitti {len(points)} points at {VOXEL} m: voxel set == NumPy floor+unique reference: {ok}")
    if not ok:
        raise SystemExit("voxel set differs from the NumPy reference")
    rows, stage_rows = [], []
    for name, pts, colors, v in _inputs():
        rows += bench(name, pts, colors, v, args.repeats, o3d)
        if args.stages:
            stage_rows += stages(name, pts, colors, v, args.repeats)
    ver = f", open3d {o3d.__version__}" if o3d is not None else ""
    report(
        rows,
        f"voxelize, median of {args.repeats} interleaved rounds (lattice {lattice.__version__}{ver})",
        args.json,
    )
    report(stage_rows, "voxelize stages, median ms")


if __name__ == "__main__":
    main()
