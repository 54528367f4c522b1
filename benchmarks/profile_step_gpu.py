"""One MinkUNet14 training step (or, with ``--forward``, one eval-mode forward) on the GPU,
for a per-kernel profile under Nsight Compute:

    ncu --metrics gpu__time_duration.sum --print-summary per-kernel \
        python3 benchmarks/profile_step_gpu.py [--steps 2] [--rows N] [--forward]

(``tools/gpu_job.sh kernels`` runs exactly that and keeps the summary.) The input is
bench_lazy_rows.py's (its ``_inputs``): the spconv shape (484,637 voxels on spherical shells, or its first
``--rows``), 4 input channels, MinkUNet14 at width 32, train mode, mean cross entropy over 20
classes, loss + gradients evaluated; every step on a new tensor (own coordinate manager),
so every relation is built inside it, as on a new scan. The first step compiles the
kernels; divide the summary's totals by ``--steps`` for one step. Without a profiler it
prints each step's wall time. GPU only (the coordinates start on the GPU).
"""

from __future__ import annotations

import argparse
import time

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
from bench_conv_gpu import shells
from bench_lazy_rows import _inputs

from lattice.models import minkunet


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--rows", type=int, default=None, help="the first ROWS voxels only")
    ap.add_argument("--forward", action="store_true", help="eval-mode forwards (logits) instead of steps")
    args = ap.parse_args()
    coords = shells()[: args.rows]
    n = len(coords)
    mx.random.seed(0)
    model = minkunet(14, 4, 20, width=32)
    model.train(not args.forward)
    mx.eval(model.parameters())
    labels = mx.array(np.arange(n) % 20)

    def loss(m, x):
        return mnn.losses.cross_entropy(m(x).feats, labels, reduction="mean")

    grad = mnn.value_and_grad(model, loss)
    for step, x in enumerate(_inputs(coords, args.steps)):  # each on its own manager
        t0 = time.perf_counter()
        mx.eval(model(x).feats if args.forward else grad(model, x))
        print(
            f"{'forward' if args.forward else 'step'} {step}: {(time.perf_counter() - t0) * 1e3:.1f} ms ({n} voxels)",
            flush=True,
        )


if __name__ == "__main__":
    main()
