"""MinkUNet14's eval forward with the convolutions' epilogue fused (``lattice.ops.conv_affine``:
``cpu.fused_epilogue`` / ``cuda.fused_epilogue``) against the same network with the two ops
(the convolution, then ``lattice.ops.affine``, then ``lattice.ops.cat``), alternating call by
call in one process.

    python benchmarks/bench_epilogue.py [--device cpu|gpu] [--rounds 9] [--json out.json]

Inputs by public shape: on the CPU the KITTI scan at 0.05 m (94,444 voxels,
``bench_network.voxels``), on the GPU the spconv shape of ../shared/tools/gpu/README.md
(484,637 voxels on spherical shells, ``bench_conv_gpu.shells``); 4 input channels,
MinkUNet14 at width 32, float32, eval mode (BatchNorm as its running-statistics map). Each
call gets a tensor on its own coordinate manager (fresh relations, as on a new scan),
evaluated before the clock starts. The first round of each form is a warm-up and not
counted. Columns: median, min, max ms of the rest; ``max_abs_diff`` between the two forms'
logits of the last round (rounding only: on the CPU the same bits, on CUDA the kernel's
multiply-add may round once less); ``fused_convs`` the convolutions whose route was the fused
epilogue in one forward.
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
import numpy as np
from _common import report

import lattice
from lattice.models import blocks, minkunet

_FUSED = blocks.conv_normed


def _inputs(device: str) -> tuple[np.ndarray, np.ndarray]:
    if device == "gpu":
        from bench_conv_gpu import shells

        coords = shells()
        feats = np.random.default_rng(0).normal(size=(len(coords), 4)).astype(np.float32)
        return coords, feats
    from bench_network import voxels

    return voxels(1)


def _count_fused(model, x) -> int:
    """Convolutions of one forward whose conv_affine route is a fused epilogue."""
    names = []
    real = blocks.conv_affine

    def spy(plan, *args, **kwargs):
        names.append(lattice.explain(real, plan, *args, **kwargs).name)
        return real(plan, *args, **kwargs)

    blocks.conv_affine = spy
    try:
        mx.eval(model(x).feats)
    finally:
        blocks.conv_affine = real
    return sum(n.endswith(".fused_epilogue") for n in names)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    mx.set_default_device(getattr(mx, args.device))
    coords, feats = _inputs(args.device)

    def tensor() -> lattice.SparseTensor:
        x = lattice.SparseTensor(coords, mx.array(feats))  # own manager: fresh relations
        mx.eval(x.coords, x.feats)
        return x

    mx.random.seed(0)
    model = minkunet(14, 4, 20, width=32)
    model.eval()
    mx.eval(model.parameters())
    fused_convs = _count_fused(model, tensor())
    times = {"fused": [], "separate": []}
    last = {}
    for r in range(args.rounds + 1):
        order = [("fused", _FUSED), ("separate", blocks.conv_then_normed)]
        for name, fn in order if r % 2 == 0 else order[::-1]:
            blocks.conv_normed = fn
            x = tensor()
            t = time.perf_counter()
            y = model(x).feats
            mx.eval(y)
            if r > 0:
                times[name].append((time.perf_counter() - t) * 1e3)
            last[name] = np.asarray(y)
    blocks.conv_normed = _FUSED
    diff = float(np.abs(last["fused"] - last["separate"]).max())
    rows = [
        {
            "device": args.device,
            "voxels": len(coords),
            "form": name,
            "median_ms": round(statistics.median(v), 2),
            "min_ms": round(min(v), 2),
            "max_ms": round(max(v), 2),
            "max_abs_diff": f"{diff:.3g}",
            "fused_convs": fused_convs if name == "fused" else 0,
        }
        for name, v in times.items()
    ]
    report(rows, "MinkUNet14 eval forward: fused epilogue vs the two ops", args.json)


if __name__ == "__main__":
    main()
