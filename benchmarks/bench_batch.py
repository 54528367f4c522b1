"""Per-file cost of the batch executors: tiny files, so the executor is what is measured.

Writes N tiny PLY files (200 points) into a temporary folder and voxelizes them with
``lattice.pipeline.run_batch`` (the engine behind ``lattice voxelize DIR -d OUT``) on
``ProcessExecutor(W)`` and on a Dask ``LocalCluster`` of W single-threaded workers, each
run into a fresh output folder. Start-up (spawning the pool, starting the cluster) is
timed apart from the files: the Dask cluster is started once and used warm, and the
per-file overhead is the slope between ``--files`` and ``--more-files`` files (median of
``--repeats``), so neither start-up nor a fixed cost hides in it.

    python benchmarks/bench_batch.py [--files 100] [--more-files 400] [--workers 2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np


def _inputs(folder: Path, n: int) -> Path:
    from lattice.io import PointCloud, write_points

    d = folder / f"in{n}"
    d.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        write_points(d / f"t{i:04d}.ply", PointCloud(rng.uniform(0, 10, (200, 3)).astype(np.float32), {}))
    return d


def _time(job, src: Path, out: Path, executor) -> float:
    from lattice.pipeline import run_batch

    start = time.perf_counter()
    s = run_batch(job, [src], out, executor=executor)
    assert s.failed == 0 and s.done == len(s.files), s.to_dict()
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=100)
    p.add_argument("--more-files", type=int, default=400)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    from distributed import Client, LocalCluster

    from lattice.pipeline import (
        DaskExecutor,
        InProcessExecutor,
        ProcessExecutor,
        VoxelizeOptions,
        voxelize_file,
    )

    job = functools.partial(voxelize_file, options=VoxelizeOptions(0.5))
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        sizes = (a.files, a.more_files)
        inputs = {n: _inputs(root, n) for n in sizes}
        t0 = time.perf_counter()
        cluster = LocalCluster(n_workers=a.workers, threads_per_worker=1, dashboard_address=None)
        client = Client(cluster)
        print(f"LocalCluster({a.workers}) start: {time.perf_counter() - t0:.2f} s")
        runs = {"in-process": InProcessExecutor, "ProcessExecutor": lambda: ProcessExecutor(a.workers)}
        runs["Dask (warm cluster)"] = lambda: DaskExecutor(client)
        k = 0
        for name, make in runs.items():
            times = {}
            for n in sizes:
                samples = []
                for _ in range(a.repeats):
                    k += 1
                    samples.append(_time(job, inputs[n], root / f"out{k}", make()))
                times[n] = statistics.median(samples)
            slope = (times[sizes[1]] - times[sizes[0]]) / (sizes[1] - sizes[0])
            w = 1 if name == "in-process" else a.workers
            print(
                f"{name:22} {sizes[0]} files {times[sizes[0]]:.2f} s, {sizes[1]} files {times[sizes[1]]:.2f} s, "
                f"per file {1e3 * slope:.1f} ms wall ({1e3 * slope * w:.1f} ms of a worker)"
            )
        client.close()
        cluster.close()


if __name__ == "__main__":
    main()
