"""Where a MinkUNet14 forward on new coordinates spends its time on the GPU: each module
evaluated on its own (``mx.eval`` after it), so the parts add up to more than the
unsynchronised forward of ``bench_lazy_rows.py`` but rank the costs.

    python benchmarks/profile_unet_gpu.py [--repeats 5] [--rows 484637]

Input: the spconv shape (``bench_conv_gpu.shells``), 4 channels, float32, eval mode,
width 32. Per module: median ms over the repeats, each call on a new coordinate manager
(relations built inside the module that first needs them), and the same module again on
the same manager (relations cached): the difference is relation building; and per module the convolutions'
GFLOP, GB moved (``_common.counting_convs``: no reuse, an upper bound) and GFLOP/s cached.
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
import numpy as np
from _common import counting_convs, report
from bench_conv_gpu import shells

import lattice
from lattice.models import minkunet


def _steps(model):
    """(name, fn(state) -> state) for each module of the forward; state = (y, skips)."""

    def stem(s):
        y = model.stem(s[0])
        return y, [y]

    steps = [("stem", stem)]
    for i, (down, blocks) in enumerate(zip(model.down, model.encoder, strict=True)):
        steps.append((f"down{i + 1}", lambda s, d=down: (d(s[0]), s[1])))
        for j, b in enumerate(blocks):
            steps.append((f"enc{i + 1}.block{j}", lambda s, b=b: (b(s[0]), s[1])))
        steps.append((f"enc{i + 1}.skip", lambda s: (s[0], [*s[1], s[0]])))
    for i, up in enumerate(model.decoder):
        steps.append((f"up{i + 1}", lambda s, u=up, i=i: (u(s[0], s[1][-2 - i]), s[1])))
    steps.append(("head", lambda s: (model.head(s[0]), s[1])))
    return steps


def _cprofile(model, coords: np.ndarray, repeats: int) -> None:
    import cProfile
    import pstats

    rng = np.random.default_rng(1)
    xs = [
        lattice.SparseTensor(coords, rng.normal(size=(len(coords), 4)).astype(np.float32))
        for _ in range(2 * repeats + 1)
    ]
    mx.eval([x.feats for x in xs])
    mx.eval(model(xs[0]).feats)  # compiles
    build, run = [], []
    for x in xs[1 : repeats + 1]:
        t0 = time.perf_counter()
        y = model(x)
        t1 = time.perf_counter()
        mx.eval(y.feats)
        build.append((t1 - t0) * 1e3)
        run.append((time.perf_counter() - t1) * 1e3)
    print(
        f"{len(coords)} voxels: graph building {statistics.median(build):.2f} ms, "
        f"evaluation {statistics.median(run):.2f} ms (medians of {repeats})"
    )
    prof = cProfile.Profile()
    prof.enable()
    for x in xs[repeats + 1 :]:
        mx.eval(model(x).feats)
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(20)
    pstats.Stats(prof).sort_stats("cumulative").print_stats(40)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rows", type=int, default=484_637)
    ap.add_argument(
        "--cprofile",
        action="store_true",
        help="instead: whole fresh forwards split into graph building (Python, host reads) "
        "and evaluation, and a cProfile of the building",
    )
    args = ap.parse_args()
    coords = shells()[: args.rows]
    mx.random.seed(0)
    model = minkunet(14, 4, 20, width=32)
    model.eval()
    mx.eval(model.parameters())
    if args.cprofile:
        _cprofile(model, coords, args.repeats)
        return
    steps = _steps(model)
    fresh = {name: [] for name, _ in steps}
    cached = {name: [] for name, _ in steps}
    rows_at = {}
    rng = np.random.default_rng(0)
    # The convolutions' GFLOP and GB moved per module, from an untimed forward of its own
    # (edge counts of GPU-built relations are host reads).
    work = {}
    state = (lattice.SparseTensor(coords, mx.array(rng.normal(size=(len(coords), 4)).astype(np.float32))), [])
    for name, fn in steps:
        with counting_convs() as totals:
            state = fn(state)
            mx.eval(state[0].feats)
        work[name] = totals
    for r in range(args.repeats + 1):
        x = lattice.SparseTensor(coords, mx.array(rng.normal(size=(len(coords), 4)).astype(np.float32)))
        mx.eval(x.coords, x.feats)
        for timing in (fresh, cached):
            state = (x, [])
            for name, fn in steps:
                t0 = time.perf_counter()
                new = fn(state)
                mx.eval(new[0].feats)
                dt = (time.perf_counter() - t0) * 1e3
                if name.endswith(".skip"):
                    state = new
                    continue
                if r:
                    timing[name].append(dt)
                rows_at[name] = (new[0].active_count, new[0].channels)
                state = new
    out = []
    for name, _ in steps:
        if name.endswith(".skip"):
            continue
        f, c = statistics.median(fresh[name]), statistics.median(cached[name])
        out.append(
            {
                "module": name,
                "rows": rows_at[name][0],
                "C_out": rows_at[name][1],
                "fresh_ms": round(f, 2),
                "cached_ms": round(c, 2),
                "relations_ms": round(f - c, 2),
                "GFLOP": round(work[name]["flop"] / 1e9, 2),
                "GB": round(work[name]["bytes"] / 1e9, 2),
                "GFLOP/s cached": round(work[name]["flop"] / c / 1e6, 1) if c > 0 else float("nan"),
            }
        )
    total_f = sum(r["fresh_ms"] for r in out)
    total_c = sum(r["cached_ms"] for r in out)
    out.append(
        {
            "module": "sum",
            "rows": "",
            "C_out": "",
            "fresh_ms": round(total_f, 2),
            "cached_ms": round(total_c, 2),
            "relations_ms": round(total_f - total_c, 2),
            "GFLOP": round(sum(w["flop"] for w in work.values()) / 1e9, 2),
            "GB": round(sum(w["bytes"] for w in work.values()) / 1e9, 2),
            "GFLOP/s cached": round(sum(w["flop"] for w in work.values()) / total_c / 1e6, 1),
        }
    )
    report(out, f"MinkUNet14 w32 forward by module ({lattice.backend_info().gpu}, {len(coords)} voxels)")


if __name__ == "__main__":
    main()
