"""Shared helpers for the benchmarks: timing by median, inputs by public shape."""

from __future__ import annotations

import contextlib
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
KITTI_SCAN = DATA / "semantickitti" / "seq00_000000.bin"


def timed_ms(
    fn: Callable[[], object],
    repeats: int,
    warmup: int = 1,
    sync: Callable[[], object] | None = None,
    reset: Callable[[], object] | None = None,
) -> list[float]:
    """Wall times of ``repeats`` calls of ``fn()`` in milliseconds, after ``warmup`` untimed
    ones; ``sync()`` (a device synchronize) before the clock starts and before it stops,
    ``reset()`` untimed before each call."""
    times = []
    for i in range(warmup + repeats):
        if reset is not None:
            reset()
        if sync is not None:
            sync()
        t0 = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        if i >= warmup:
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def median_ms(fn: Callable[[], object], repeats: int = 7, warmup: int = 1) -> float:
    """Median wall time of ``fn()`` in milliseconds."""
    return statistics.median(timed_ms(fn, repeats, warmup))


def kitti_points() -> np.ndarray:
    """The SemanticKITTI scan as (N, 3) float32 xyz."""
    return np.fromfile(KITTI_SCAN, dtype=np.float32).reshape(-1, 4)[:, :3].copy()


def kitti_voxels(voxel_size: float = 0.05) -> np.ndarray:
    """The KITTI scan voxelized at ``voxel_size``: unique (0, x, y, z) int32 rows."""
    pts = kitti_points()
    v = np.floor(pts.astype(np.float64) / voxel_size).astype(np.int32)
    v = np.unique(v, axis=0)
    return np.concatenate([np.zeros((len(v), 1), np.int32), v], axis=1)


def dense_block(n: int) -> np.ndarray:
    """A dense cube of about ``n`` voxels (side = round(n ** (1/3)))."""
    side = max(1, round(n ** (1 / 3)))
    g = np.stack(np.meshgrid(*[np.arange(side)] * 3, indexing="ij"), -1).reshape(-1, 3)
    return np.concatenate([np.zeros((len(g), 1), np.int32), g.astype(np.int32)], axis=1)


def report(rows: list[dict], title: str, json_path: str | None = None) -> None:
    """Prints a table of result rows (and writes them as JSON when asked)."""
    if not rows:
        return
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(_fmt(r[k])) for r in rows)) for k in keys}
    print(f"\n{title}")
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(_fmt(r[k]).ljust(widths[k]) for k in keys))
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(rows, indent=2))


def _fmt(v) -> str:
    return f"{v:.2f}" if isinstance(v, float) else str(v)


def openblas_sgemm_ms(m: int, k: int, n: int, repeats: int = 7, threads: int | None = None) -> float:
    """Median ms of a plain sgemm (m x k) @ (k x n) in the OpenBLAS that lattice links
    (scipy-openblas32), called directly through ctypes into a preallocated output, with
    OpenBLAS's own threads (default: all cores) — the fair "plain sgemm" reference.
    """
    import ctypes
    import glob
    import os

    import scipy_openblas32

    path = glob.glob(os.path.join(scipy_openblas32.get_lib_dir(), "libscipy_openblas*.so"))[0]
    lib = ctypes.CDLL(path)
    a = np.random.default_rng(0).random((m, k), dtype=np.float32)
    b = np.random.default_rng(1).random((k, n), dtype=np.float32)
    c = np.zeros((m, n), np.float32)
    ptr = ctypes.c_void_p
    saved = lib.scipy_openblas_get_num_threads()
    lib.scipy_openblas_set_num_threads(threads or os.cpu_count() or 1)
    try:

        def call() -> None:
            lib.scipy_cblas_sgemm(
                101,
                111,
                111,
                m,
                n,
                k,
                ctypes.c_float(1.0),
                ptr(a.ctypes.data),
                k,
                ptr(b.ctypes.data),
                n,
                ctypes.c_float(0.0),
                ptr(c.ctypes.data),
                n,
            )

        return median_ms(call, repeats)
    finally:
        lib.scipy_openblas_set_num_threads(saved)


@contextlib.contextmanager
def counting_convs():
    """Counts the convolutions run inside the block (patched at their dispatch in
    ``lattice.ops.conv``): yields a dict whose ``flop`` is 2 × edges × C_in × C_out summed
    over the calls (a pointwise call's edges are its rows), and ``bytes`` the traffic of a
    gather-scatter with no reuse — every edge reads its C_in input row and adds into its
    C_out output row (read and written), plus the weights — an upper bound on what the
    convolutions move. Edge counts of relations built on the GPU are host reads: time
    such a block separately."""
    import lattice.ops.conv as conv_ops

    totals = {"flop": 0.0, "bytes": 0.0}
    original = conv_ops.dispatch

    def count(feats, weight, rel, c_out: int) -> None:
        edges, c_in, size = rel.n_edges, int(feats.shape[1]), feats.dtype.size
        totals["flop"] += 2.0 * edges * c_in * c_out
        totals["bytes"] += float(edges * (c_in + 2 * c_out) * size + getattr(weight, "nbytes", 0))

    def counted(route, *args, **kwargs):
        y = original(route, *args, **kwargs)
        if isinstance(args[0], conv_ops.ConvPlan):  # conv_affine: (plan, scale, shift, ...)
            plan = args[0]
            if route.name.endswith(".fused_epilogue"):  # else plan.run() was counted as a convolution
                count(plan.x.run_feats, plan.weight, plan.relation, conv_ops._channels(plan.weight)[1])
        else:  # a convolution: (feats, weight, rel)
            feats, weight, rel = args[:3]
            count(feats, weight, rel, int(y.shape[1]))
        return y

    conv_ops.dispatch = counted
    try:
        yield totals
    finally:
        conv_ops.dispatch = original
