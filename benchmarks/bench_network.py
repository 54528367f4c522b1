"""Whole networks: MinkUNet14 forward (fresh and cached relations) and a per-module profile,
with spconv's same U-Net side by side (issue 20).

    python benchmarks/bench_network.py [--preset 14] [--tiles 1] [--repeats 5] [--rounds 3]
        [--peer-python /path/to/peer-venv/bin/python] [--cpu-gemm avx512,avx512_bf16] [--profile]
        [--json out.json]

Input by public shape: the SemanticKITTI scan ``seq00_000000.bin`` voxelized at 0.05 m
(94,444 voxels, first point's features per voxel), or ``--tiles T`` copies of it side by
side in x; 4 input channels (x, y, z, remission). Model: ``minkunet(14, 4, 19)`` at width 32
(stem k5 to 32, encoder 32/64/128/256, decoder 256/128/96/96), eval mode, float32;
``--preset 18``: MinkUNet18, two basic blocks per level (spconv's U-Net the same).

Rows (medians of ``--repeats`` per round, the range over rounds):
- ``fresh``: every call gets a new tensor on its own coordinate manager, so every relation of
  every level is built inside the call — a new scan;
- ``cached``: the same tensor every call: relations come from its manager's cache.
With ``--peer-python`` the spconv U-Net (``peers/spconv_unet.py``, the same layout) runs on
the same voxels in that interpreter, alternating with lattice round by round; the threads are
``LATTICE_NUM_THREADS`` for lattice and ``--threads`` (default: the same number) for torch.
``--train``: also a training step (train mode, cross-entropy against fixed random labels,
backward, Adam update ``mx.compile``d over the model and optimizer state as MLX's docs write
a training loop; a new tensor every step, so relations are built inside it), timed from the
call to the evaluated parameters and optimizer state.
``--cpu-gemm K1,K2``: the lattice rows once per CPU GEMM kernel (``LATTICE_CPU_GEMM``: e.g.
``avx512,avx512_bf16``), the kernels alternating within each round.
``--profile``: the time of each top-level module of one fresh forward, evaluated one after the
other (stem, down/encoder per level, decoder per level, head), its share of their sum, and its
convolutions' GFLOP, GB moved (every edge reading its input row and adding into its output
row, plus the weights: no reuse, an upper bound) and GFLOP/s.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import mlx.core as mx
import numpy as np
from _common import report

import lattice
from lattice import ops
from lattice.models import minkunet
from lattice.routing.device import capability

SCAN = Path(__file__).resolve().parents[2] / "shared" / "data" / "semantickitti" / "seq00_000000.bin"
PEER = Path(__file__).resolve().parent / "peers" / "spconv_unet.py"


def voxels(tiles: int) -> tuple[np.ndarray, np.ndarray]:
    """(coords (N, 4) int32, feats (N, 4) float32) of the scan at 0.05 m, ``tiles`` copies in x."""
    pts = np.fromfile(SCAN, np.float32).reshape(-1, 4)
    x = ops.voxelize(mx.array(pts[:, :3]), mx.array(pts), 0.05, reduction="first")
    c = np.asarray(x.coords[: x.active_count])
    f = np.asarray(x.feats[: x.active_count])
    span = int(c[:, 1].max() - c[:, 1].min()) + 2
    cs = [c + np.array([0, k * span, 0, 0], np.int32) for k in range(tiles)]
    return np.concatenate(cs).astype(np.int32), np.concatenate([f] * tiles)


def lattice_times(model, coords, feats, repeats: int, fresh: bool) -> list[float]:
    x0 = lattice.SparseTensor(coords, feats)
    mx.eval(model(x0).feats)  # warm: kernels, allocator
    times = []
    for _ in range(repeats):
        x = lattice.SparseTensor(coords, feats) if fresh else x0
        mx.eval(x.coords, x.feats)
        t0 = time.perf_counter()
        mx.eval(model(x).feats)
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def train_times(coords, feats, repeats: int, compiled_update: bool = True, preset: int = 14) -> list[float]:
    """Training steps of a fresh train-mode MinkUNet (``preset`` 14 or 18) w32 (the first one untimed). The Adam
    update is ``mx.compile``d with the model and optimizer state as its inputs and outputs,
    as MLX's documentation writes a training loop (``compiled_update=False``: called plain;
    on the CPU the plain update of the 11.6 M parameters is a dozen one-thread MLX passes)."""
    from functools import partial

    import mlx.nn as nn
    import mlx.optimizers as optim

    mx.random.seed(0)
    model = minkunet(preset, 4, 19, width=32)
    mx.eval(model.parameters())
    labels = mx.array(np.random.default_rng(0).integers(0, 19, len(coords)).astype(np.int32))
    opt = optim.Adam(learning_rate=1e-3)
    opt.init(model.trainable_parameters())
    state = [model.state, opt.state]

    def update(grads):
        opt.update(model, grads)

    apply = partial(mx.compile, inputs=state, outputs=state)(update) if compiled_update else update

    def loss_fn(model, x):
        return nn.losses.cross_entropy(model(x).feats, labels, reduction="mean")

    step = nn.value_and_grad(model, loss_fn)
    times = []
    for i in range(repeats + 1):
        x = lattice.SparseTensor(coords, feats)
        mx.eval(x.coords, x.feats)
        t0 = time.perf_counter()
        loss, grads = step(model, x)
        apply(grads)
        mx.eval(loss, model.parameters(), opt.state)
        if i:
            times.append((time.perf_counter() - t0) * 1e3)
    return times


def peer_times(python: str, coords_file: str, repeats: int, threads: int, preset: int = 14) -> list[float]:
    cmd = [python, str(PEER), coords_file, "--repeats", str(repeats), "--threads", str(threads)]
    cmd += ["--preset", str(preset)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=True)
    return json.loads(r.stdout.splitlines()[-1])["times"]


def _walk(model, x, visit) -> None:
    """The forward of ``model`` on ``x`` module by module: ``visit(name, fn, *args)`` runs
    each top-level module and returns its output."""
    y = visit("stem (subm k5)", model.stem, x)
    skips = [y]
    for i, (down, blocks) in enumerate(zip(model.down, model.encoder, strict=True)):
        y = visit(f"down {i} (conv k2 s2)", down, y)
        for j, block in enumerate(blocks):
            y = visit(f"encoder {i}.{j} (basic block)", block, y)
        skips.append(y)
    for i, up in enumerate(model.decoder):
        y = visit(f"decoder {i} (up + cat + block)", up, y, skips[-2 - i])
    visit("head (linear)", model.head, y)


def profile(model, coords, feats) -> list[dict]:
    """One fresh forward, module by module, each evaluated before the next starts; the
    convolutions' GFLOP and GB moved per module (``_common.counting_convs``) from another
    fresh forward, untimed."""
    from _common import counting_convs

    mx.eval(model(lattice.SparseTensor(coords, feats)).feats)  # warm
    work = {}

    def count(name, fn, *args):
        with counting_convs() as totals:
            y = fn(*args)
            mx.eval(y.feats)
        work[name] = totals
        return y

    _walk(model, lattice.SparseTensor(coords, feats), count)
    rows, t = [], {}

    def timed(name, fn, *args):
        t0 = time.perf_counter()
        y = fn(*args)
        mx.eval(y.feats)
        t[name] = (time.perf_counter() - t0) * 1e3
        rows.append({"module": name, "rows_out": y.active_count, "channels": y.channels})
        return y

    _walk(model, lattice.SparseTensor(coords, feats), timed)
    total = sum(t.values())
    for r in rows:
        ms, w = t[r["module"]], work[r["module"]]
        r["ms"] = round(ms, 2)
        r["share"] = round(ms / total, 3)
        r["GFLOP"] = round(w["flop"] / 1e9, 2)
        r["GB"] = round(w["bytes"] / 1e9, 2)
        r["GFLOP/s"] = round(w["flop"] / ms / 1e6, 1) if ms > 0 else float("nan")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", type=int, default=14, choices=(14, 18), help="MinkUNet14 or 18")
    ap.add_argument("--tiles", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peer-python", default=None)
    ap.add_argument("--threads", type=int, default=None, help="torch threads of the peer")
    ap.add_argument("--train", action="store_true", help="also time a training step")
    ap.add_argument("--cpu-gemm", default=None, help="comma-separated LATTICE_CPU_GEMM kernels to alternate")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    kernels = args.cpu_gemm.split(",") if args.cpu_gemm else [None]
    coords, feats = voxels(args.tiles)
    mx.random.seed(0)
    model = minkunet(args.preset, 4, 19, width=32)
    model.eval()
    mx.eval(model.parameters())
    threads = int(os.environ.get("LATTICE_NUM_THREADS", "0")) or os.cpu_count()
    peer_threads = args.threads or threads
    tag = {k: f" [{k}]" if k else "" for k in kernels}
    results: dict[str, list[float]] = {}
    for row in ("fresh", "cached", "train step"):
        for k in kernels:
            results[f"lattice {row}{tag[k]}"] = []
    results["spconv fresh"] = []
    with tempfile.TemporaryDirectory() as tmp:
        coords_file = str(Path(tmp) / "coords.npy")
        np.save(coords_file, coords)
        for r in range(args.rounds):
            order = ("lattice", "peer") if r % 2 == 0 else ("peer", "lattice")
            for who in order:
                for k in kernels if who == "lattice" else ():
                    if k:
                        os.environ["LATTICE_CPU_GEMM"] = k
                        capability.cache_clear()
                    results[f"lattice fresh{tag[k]}"].append(
                        statistics.median(lattice_times(model, coords, feats, args.repeats, True))
                    )
                    results[f"lattice cached{tag[k]}"].append(
                        statistics.median(lattice_times(model, coords, feats, args.repeats, False))
                    )
                    if args.train:
                        results[f"lattice train step{tag[k]}"].append(
                            statistics.median(train_times(coords, feats, args.repeats, preset=args.preset))
                        )
                if who == "peer" and args.peer_python:
                    results["spconv fresh"].append(
                        statistics.median(
                            peer_times(args.peer_python, coords_file, args.repeats, peer_threads, args.preset)
                        )
                    )
    rows = []
    peer = statistics.median(results["spconv fresh"]) if results["spconv fresh"] else None
    for name, per_round in results.items():
        if not per_round:
            continue
        med = statistics.median(per_round)
        rows.append(
            {
                "N": len(coords),
                "run": name,
                "threads": peer_threads if name.startswith("spconv") else threads,
                "ms": round(med, 1),
                "range_ms": f"{min(per_round):.1f}-{max(per_round):.1f}",
                "spconv / this": "" if peer is None or "train" in name else round(peer / med, 2),
            }
        )
    name = f"MinkUNet{args.preset} w32"
    title = f"{name} forward (and training step), CPU, {args.rounds} rounds x {args.repeats} repeats"
    report(rows, title, args.json)
    if args.profile:
        report(profile(model, coords, feats), f"{name}, one fresh forward by module (CPU)", None)


if __name__ == "__main__":
    main()
