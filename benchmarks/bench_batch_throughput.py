"""Batch throughput on real scans: files/s of the installed ``lattice`` command over 200
KITTI-size scans, ``voxelize`` and ``model-run``, on each executor (issue 18).

The scans are copies of the three SemanticKITTI scans of ``../shared/data/semantickitti``
(``sqsv3_*.bin``, 121–125 k points with remission), cycled to ``--files`` files in a
temporary folder. Each configuration runs the whole command as a user does, into a fresh
output folder, and is timed from start to exit (start-up included: Python, MLX, the pool or
the Dask cluster); ``--repeats`` runs each, the median and the range are printed. The
configurations run one after the other in one process, so their ratios share the machine's
state.

    python -P benchmarks/bench_batch_throughput.py [--files 200] [--repeats 1] [--commands voxelize,model-run]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "semantickitti"
BUNDLE = ROOT / "examples" / "models" / "minkunet14-semantickitti"
CONFIGS = {
    "--workers 1": ["--workers", "1"],
    "--workers 2": ["--workers", "2"],
    "local:2": ["--scheduler", "local:2"],
}


def _scans(folder: Path, n: int) -> Path:
    sources = sorted(DATA.glob("sqsv3_*.bin"))
    if not sources:
        raise SystemExit(f"no sqsv3_*.bin scans in {DATA}")
    d = folder / "scans"
    d.mkdir()
    for i in range(n):
        shutil.copy(sources[i % len(sources)], d / f"scan{i:04d}.bin")
    return d


def _command(name: str, scans: Path, out: Path) -> list[str]:
    if name == "voxelize":
        return ["lattice", "voxelize", str(scans), "-d", str(out), "-s", "0.05"]
    return ["lattice", "model-run", str(BUNDLE), str(scans), "-d", str(out)]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--files", type=int, default=200)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--commands", default="voxelize,model-run")
    p.add_argument("--configs", default=",".join(CONFIGS))
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        scans = _scans(Path(tmp), a.files)
        print(f"{a.files} scans of {sum(f.stat().st_size for f in scans.iterdir()) / 1e6:.0f} MB")
        print("| command | executor | wall (median) | range | files/s |")
        print("| --- | --- | ---: | ---: | ---: |")
        for command in a.commands.split(","):
            for config in a.configs.split(","):
                times = []
                for r in range(a.repeats):
                    out = Path(tmp) / f"out-{command}-{config.replace(' ', '')}-{r}"
                    start = time.perf_counter()
                    done = subprocess.run(
                        [*_command(command, scans, out), *CONFIGS[config]], capture_output=True, text=True
                    )
                    times.append(time.perf_counter() - start)
                    if done.returncode != 0 or f"done {a.files}," not in done.stdout:
                        raise SystemExit(
                            f"{command} {config} failed: {done.stdout[-500:]} {done.stderr[-2000:]}"
                        )
                    shutil.rmtree(out)
                med = statistics.median(times)
                print(
                    f"| {command} | {config} | {med:.1f} s | {min(times):.1f}–{max(times):.1f} s | {a.files / med:.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
