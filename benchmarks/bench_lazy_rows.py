"""A MinkUNet on new coordinates every call, on the GPU: sets sized by host reads (the
default) against upper-bound buffers with lazy counts (``CoordinateManager(lazy_rows=True)``).

    python benchmarks/bench_lazy_rows.py [--repeats 9] [--json out.json]

Inputs by public shape: the spconv shape of ../shared/tools/gpu/README.md (484,637 voxels
on spherical shells in a 256^3 grid) and a tenth of it (the first 48,464 of those rows),
4 input channels, MinkUNet14 at width 32 (32-256 channels, 4 downsample levels), float32.
Each timed call gets a tensor on its own coordinate manager, built and evaluated before
the clock starts, so every relation and every coarse set is built inside the call, as on
a new scan. Modes: "exact" = the default (each coarse set's size read back once);
"lazy_rows" = the input's manager made with ``lazy_rows=True``: upper-bound buffers, no
read. (The history's "exact + edges" mode, every relation's edge count read too, went with
the ``counting_edges`` context: edge counts are now read only by ``explain``.)
Columns (medians, ms): forward_ms = inference (eval mode) up to the evaluated logits;
train_ms = loss + gradients (train mode: batch statistics). The modes are timed
interleaved, call by call. reads = lattice's host reads per forward (``host_reads``);
live / buffer = rows of the coarsest level's set against the buffer its ops run over.
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
from _common import report
from bench_conv_gpu import shells

import lattice
from lattice.models import minkunet

MODES = ("exact", "lazy_rows")


def _inputs(coords: np.ndarray, count: int, seed: int = 0) -> list[lattice.SparseTensor]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        with mx.stream(mx.gpu):
            c = mx.array(coords) + 0
        f = mx.array(rng.normal(size=(len(coords), 4)).astype(np.float32))
        x = lattice.SparseTensor(c, f)  # own manager: nothing cached between calls
        mx.eval(x.coords, x.feats)
        out.append(x)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    full = shells()
    mx.random.seed(0)
    model = minkunet(14, 4, 20, width=32)
    mx.eval(model.parameters())
    rows = []
    for coords in (full, full[: len(full) // 10]):
        n = len(coords)
        labels = mx.array(np.arange(n) % 20)

        def loss(m, x, labels=labels):
            return mnn.losses.cross_entropy(m(x).feats, labels, reduction="mean")

        grad = mnn.value_and_grad(model, loss)
        times = {(mode, kind): [] for mode in MODES for kind in ("forward", "train")}
        reads, coarse = {}, {}
        for kind in ("forward", "train"):
            model.train(kind == "train")
            xs = _inputs(coords, len(MODES) * (args.repeats + 1))
            for i in range(args.repeats + 1):
                for j, mode in enumerate(MODES):
                    x = xs[len(MODES) * i + j]
                    x.coord_manager.lazy_rows = mode == "lazy_rows"
                    counter = lattice.host_reads()
                    t0 = time.perf_counter()
                    if kind == "forward":
                        mx.eval(model(x).feats)
                    else:
                        mx.eval(grad(model, x))
                    dt = (time.perf_counter() - t0) * 1e3
                    if i:  # the first round compiles the kernels
                        times[(mode, kind)].append(dt)
                        reads[(mode, kind)] = counter.count
                    if kind == "forward":
                        m = x.coord_manager
                        last = max(m.keys, key=lambda k: k.stride)
                        coarse[mode] = (last.stride[0], m.size(last), m.capacity(last))
        for mode in MODES:
            stride, live, buffer = coarse[mode]
            rows.append(
                {
                    "N": n,
                    "mode": mode,
                    "forward_ms": round(statistics.median(times[(mode, "forward")]), 2),
                    "train_ms": round(statistics.median(times[(mode, "train")]), 2),
                    "reads": reads[(mode, "forward")],
                    "coarsest_stride": stride,
                    "live / buffer": f"{live} / {buffer}",
                }
            )
    report(rows, f"MinkUNet14 w32 on new coordinates ({lattice.backend_info().gpu})", args.json)


if __name__ == "__main__":
    main()
