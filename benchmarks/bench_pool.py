"""Pooling by public input shape: the SemanticKITTI scan voxelized at 0.05 m, 32 channels.

Cases: MaxPool3d(2, 2) forward (the spconv comparison), AvgPool3d(2, 2), the
overlapping MaxPool3d(3, 2, padding 1), global max pooling, pool transpose and
trilinear upsampling back onto the input, and the backward passes (the
input-exclusive gather and the general per-offset scatter side by side). Each row
reports what the op's plan builds (fresh, caches cleared: the downsample's window map
on the window_reduce route, else the relation) apart from the compute (cached), and
their sum; backward rows time the gradient primitive alone and the full ``mx.grad``
(forward + backward, relation cached).

    python benchmarks/bench_pool.py [--repeats 7] [--json out.json] [--stages]
        [--peer-python /path/to/peer-venv/bin/python] [--rounds 1]

``--peer-python`` runs this file again under an interpreter that has torch and
spconv 2.3.8 (never a lattice dependency) and reports spconv's SparseMaxPool3d(2, 2)
forward, indices included, measured in the same run. With ``--rounds R`` the fresh
MaxPool3d(2, 2) and spconv are measured alternately R times (median of ``--repeats``
each) and the ratio of every round is printed. ``--stages`` times the stages of the
fresh MaxPool3d(2, 2) call one by one.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

import numpy as np
from _common import kitti_voxels, median_ms, report

CHANNELS = 32


def _features(n: int, channels: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((n, channels)).astype(np.float32)


# ---- lattice -------------------------------------------------------------------------------


def lattice_rows(coords_np: np.ndarray, channels: int, repeats: int) -> list[dict]:
    import mlx.core as mx

    from lattice import _ext, ops
    from lattice.core import KernelSpec, RelationKind, SparseTensor

    coords = mx.array(coords_np)
    feats = mx.array(_features(len(coords_np), channels))
    x = SparseTensor(coords, feats)
    manager = x.coord_manager
    rows: list[dict] = []

    def clear():  # drop every cached relation and downsample, and the sets they registered
        manager._relations.clear()
        manager._downsampled.clear()
        for key_id in [k for k in manager._tables if k != x.coord_key.id]:
            del manager._tables[key_id], manager._keys[key_id]

    def add(case, rel_fn, compute_fn, n_in, out):
        relation = median_ms(lambda: (clear(), rel_fn()), repeats) if rel_fn else None
        rel_fn and rel_fn()  # leave the relation cached for the compute timing
        compute = median_ms(compute_fn, repeats)
        rows.append(
            {
                "case": case,
                "N_in": n_in,
                "N_out": out[0],
                "edges": out[1],
                "relation_ms": relation if relation is not None else "-",
                "compute_ms": compute,
                "total_ms": compute + (relation or 0.0),
            }
        )

    def forward_rel(spec):  # what the pooling plan builds: the window map, else the relation
        return lambda: (
            manager.windows(x.coord_key, spec) or manager.relation(RelationKind.FORWARD, x.coord_key, spec)
        )

    def run(fn):
        return lambda: mx.eval(fn().feats)

    n = len(coords_np)
    for label, spec, fn in (
        ("MaxPool3d(2, 2) forward", KernelSpec(2, 2), lambda: ops.max_pool3d(x)),
        ("AvgPool3d(2, 2) forward", KernelSpec(2, 2), lambda: ops.avg_pool3d(x)),
        ("MaxPool3d(3, 2) forward", KernelSpec(3, 2), lambda: ops.max_pool3d(x, kernel_size=3)),
    ):
        rel = forward_rel(spec)()
        add(label, forward_rel(spec), run(fn), n, (rel.out_count, rel.edge_count))

    rows.append(
        {
            "case": "MaxPool3d(2, 2) forward, fresh tensor (hash + downsample + pool)",
            "N_in": n,
            "N_out": rows[0]["N_out"],
            "edges": rows[0]["edges"],
            "relation_ms": "-",
            "compute_ms": "-",
            "total_ms": median_ms(fresh_max_fn(coords, feats), repeats),
        }
    )

    # backward: the gradient primitive alone, exclusive gather vs general scatter, and mx.grad
    for label, spec, mode in (
        ("max k2 s2", KernelSpec(2, 2), "max"),
        ("avg k2 s2", KernelSpec(2, 2), "avg"),
        ("max k3 s2", KernelSpec(3, 2), "max"),
    ):
        rel = manager.relation(RelationKind.FORWARD, x.coord_key, spec)
        dy = mx.ones((rel.out_count, channels))
        mx.eval(dy)
        walks = (
            ("input_exclusive_gather", "scatter_general") if spec.size == (2, 2, 2) else ("scatter_general",)
        )
        for walk in walks:

            def grad_only(rel=rel, dy=dy, mode=mode, walk=walk):
                mx.eval(
                    _ext.sparse_pool_grad(
                        dy,
                        rel.edges.in_rows,
                        rel.edges.out_rows,
                        list(rel.edge_offsets_host),
                        n,
                        mode,
                        walk,
                        None,
                        feats if mode == "max" else None,
                        distinct=True,
                        stream=mx.cpu,
                    )
                )

            add(f"{label} backward, {walk}", None, grad_only, n, (rel.out_count, rel.edge_count))

        def pool(f, s=spec, m=mode):
            return ops.pool3d(
                x.replace(feats=f), mode=m, kernel_size=s.size, stride=s.stride, padding=s.padding
            ).feats.sum()

        add(
            f"{label} mx.grad (forward + backward)",
            None,
            lambda p=pool: mx.eval(mx.grad(p)(feats)),
            n,
            (rel.out_count, rel.edge_count),
        )

    # global max pooling to (1, C)
    add("global max forward", None, lambda: mx.eval(ops.global_max_pool(x)), n, (1, n))
    add(
        "global max mx.grad (forward + backward)",
        None,
        lambda: mx.eval(mx.grad(lambda f: ops.global_max_pool(x.replace(feats=f)).sum())(feats)),
        n,
        (1, n),
    )

    # upsampling from the pooled level back onto the input rows
    coarse = ops.avg_pool3d(x)
    mx.eval(coarse.feats)
    nc = coarse.active_count
    for label, kind, spec, fn in (
        (
            "PoolTranspose3d(2, 2) onto input",
            RelationKind.TRANSPOSED,
            KernelSpec(2, 2),
            lambda f: ops.pool_transpose3d(coarse.replace(feats=f), x),
        ),
        (
            "TrilinearUpsample3d(2) onto input",
            RelationKind.GENERATIVE,
            KernelSpec(3, 2),
            lambda f: ops.trilinear_upsample3d(coarse.replace(feats=f), x),
        ),
    ):

        def rel_fn(kind=kind, spec=spec):
            return manager.relation(kind, coarse.coord_key, spec, x.coord_key)

        def keep_coarse():  # clearing the caches must not drop the coarse level
            manager._relations.clear()

        relation = median_ms(lambda rf=rel_fn: (keep_coarse(), rf()), repeats)
        rel = rel_fn()
        compute = median_ms(lambda fn=fn: mx.eval(fn(coarse.feats).feats), repeats)
        rows.append(
            {
                "case": f"{label} forward",
                "N_in": nc,
                "N_out": rel.out_count,
                "edges": rel.edge_count,
                "relation_ms": relation,
                "compute_ms": compute,
                "total_ms": relation + compute,
            }
        )
        add(
            f"{label} mx.grad (forward + backward)",
            None,
            lambda fn=fn: mx.eval(mx.grad(lambda f: fn(f).feats.sum())(coarse.feats)),
            nc,
            (rel.out_count, rel.edge_count),
        )
    return rows


def fresh_max_fn(coords, feats):
    """What spconv's call does: hash the coordinates, build the output and its map, pool."""
    import mlx.core as mx

    from lattice import ops
    from lattice.core import SparseTensor

    return lambda: mx.eval(ops.max_pool3d(SparseTensor(coords, feats)).feats)


def stage_rows(coords_np: np.ndarray, channels: int, repeats: int) -> list[dict]:
    """The fresh MaxPool3d(2, 2) call taken apart: each stage timed on its own, fresh."""
    import mlx.core as mx

    from lattice import _ext, ops
    from lattice.backends.cpu import pool as cpu_pool
    from lattice.core import KernelSpec, SparseTensor

    coords = mx.array(coords_np)
    feats = mx.array(_features(len(coords_np), channels))
    mx.eval(coords, feats)
    x = SparseTensor(coords, feats)
    table = x.coord_manager.table(x.coord_key)
    windows = x.coord_manager.windows(x.coord_key, KernelSpec(2, 2))
    stages = (
        (
            "SparseTensor(coords, feats): checks (hash deferred: rows sorted)",
            lambda: SparseTensor(coords, feats),
        ),
        ("native downsample + window map (_ext.downsample)", lambda: _ext.downsample(table, (2, 2, 2))),
        (
            "window_reduce max, map cached (eval)",
            lambda: mx.eval(cpu_pool.window_reduce(feats, windows, "max", backward="input_exclusive_gather")),
        ),
        (
            "max_pool3d on a tensor whose map is cached (plan + eval)",
            lambda: mx.eval(ops.max_pool3d(x).feats),
        ),
        ("fresh total: SparseTensor + max_pool3d + eval", fresh_max_fn(coords, feats)),
    )
    return [{"stage": name, "median_ms": median_ms(fn, repeats)} for name, fn in stages]


def rounds_rows(coords_np: np.ndarray, channels: int, repeats: int, rounds: int, python: str) -> list[dict]:
    """Fresh MaxPool3d(2, 2) and spconv's SparseMaxPool3d(2, 2) measured alternately.

    spconv runs in a peer process started once and kept waiting on a pipe, so neither side
    measures just after the other's interpreter start; the side measured first alternates.
    """
    import mlx.core as mx

    coords = mx.array(coords_np)
    feats = mx.array(_features(len(coords_np), channels))
    fresh = fresh_max_fn(coords, feats)
    peer = subprocess.Popen(
        [python, __file__, "--spconv-serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    out = []
    try:
        if not peer.stdout.readline():  # the peer's ready line
            print(f"peer run failed ({python})", file=sys.stderr)
            return []

        def theirs() -> float:
            time.sleep(0.2)
            peer.stdin.write(f"{repeats}\n")
            peer.stdin.flush()
            return float(peer.stdout.readline())

        def ours() -> float:
            time.sleep(0.2)  # let the other side's worker threads go idle
            return median_ms(fresh, repeats)

        for r in range(rounds):
            if r % 2:
                t_peer, t_ours = theirs(), ours()
            else:
                t_ours, t_peer = ours(), theirs()
            out.append({"round": r + 1, "lattice_ms": t_ours, "spconv_ms": t_peer, "ratio": t_peer / t_ours})
    finally:
        peer.stdin.close()
        peer.wait()
    return out


# ---- spconv (peer interpreter) ---------------------------------------------------------------


def spconv_call(coords_np: np.ndarray, channels: int):
    """spconv's SparseMaxPool3d(2, 2) forward on the scan, indices included: (call, version)."""
    import spconv
    import spconv.pytorch as spconv_torch
    import torch

    torch.set_num_threads(2)
    idx = torch.from_numpy(coords_np.copy()).int()
    idx[:, 1:] -= (
        torch.div(idx[:, 1:].min(0).values, 2, rounding_mode="floor") * 2
    )  # keep the 2-cells aligned
    shape = (idx[:, 1:].max(0).values + 2).tolist()
    feats = torch.from_numpy(_features(len(coords_np), channels))
    pool = spconv_torch.SparseMaxPool3d(2, 2)

    def run():
        with torch.no_grad():
            return pool(spconv_torch.SparseConvTensor(feats, idx, shape, 1))

    return run, spconv.__version__


def spconv_rows(coords_np: np.ndarray, channels: int, repeats: int) -> list[dict]:
    run, version = spconv_call(coords_np, channels)
    out = run()
    return [
        {
            "case": f"spconv {version} SparseMaxPool3d(2, 2) forward (incl. indices)",
            "N_in": len(coords_np),
            "N_out": int(out.indices.shape[0]),
            "edges": "-",
            "relation_ms": "-",
            "compute_ms": "-",
            "total_ms": median_ms(run, repeats),
        }
    ]


def spconv_serve(coords_np: np.ndarray, channels: int) -> None:
    """Peer loop of --rounds: prints a ready line, then for each stdin line (a repeat count) the median ms."""
    run, _ = spconv_call(coords_np, channels)
    run()
    print("ready", flush=True)
    for line in sys.stdin:
        print(median_ms(run, int(line)), flush=True)


def peer_rows(python: str, repeats: int) -> list[dict]:
    cmd = [python, __file__, "--spconv-only", "--repeats", str(repeats)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"peer run failed ({python}):\n{done.stderr.strip()[-2000:]}", file=sys.stderr)
        return []
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None)
    ap.add_argument("--peer-python", default=None, help="an interpreter with torch + spconv 2.3.8")
    ap.add_argument(
        "--rounds", type=int, default=1, help="alternate fresh MaxPool3d(2, 2) and spconv R times"
    )
    ap.add_argument("--stages", action="store_true", help="time the stages of the fresh MaxPool3d(2, 2)")
    ap.add_argument("--spconv-only", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--spconv-serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    coords = kitti_voxels(0.05)
    if args.spconv_serve:
        spconv_serve(coords, CHANNELS)
        return
    if args.spconv_only:
        print(json.dumps(spconv_rows(coords, CHANNELS, args.repeats)))
        return
    import lattice

    if args.stages:
        report(stage_rows(coords, CHANNELS, args.repeats), "fresh MaxPool3d(2, 2) stages, median ms")
    if args.peer_python and args.rounds > 1:
        per_round = rounds_rows(coords, CHANNELS, args.repeats, args.rounds, args.peer_python)
        report(per_round, "fresh MaxPool3d(2, 2) vs spconv SparseMaxPool3d(2, 2), alternating rounds")
        if per_round:
            ratios = sorted(r["ratio"] for r in per_round)
            print(
                f"spconv / lattice: median {statistics.median(ratios):.1f}x, "
                f"min {ratios[0]:.1f}x, max {ratios[-1]:.1f}x over {len(ratios)} rounds"
            )
    rows = lattice_rows(coords, CHANNELS, args.repeats)
    if args.peer_python:
        peer = peer_rows(args.peer_python, args.repeats)
        rows += peer
        if peer:
            ours = next(r for r in rows if r["case"].startswith("MaxPool3d(2, 2) forward, fresh"))["total_ms"]
            print(
                f"MaxPool3d(2, 2) forward on a fresh tensor: lattice {ours:.1f} ms, "
                f"spconv {peer[0]['total_ms']:.1f} ms ({peer[0]['total_ms'] / ours:.1f}x)"
            )
    info = lattice.backend_info()
    report(
        rows,
        f"pooling, kitti 0.05 m, {CHANNELS} channels float32 (CPU, {info.cpu_threads} threads, "
        f"lattice {info.version})",
        args.json,
    )


if __name__ == "__main__":
    main()
