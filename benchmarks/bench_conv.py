"""Sparse convolution by public shape, with a plain BLAS sgemm of the same work side by side.

Inputs: the SemanticKITTI scan voxelized at 0.05 m, a dense block and random voxels
(10 % occupancy of a cube) with the same N. Ops: submanifold k=3, forward k=2 s=2,
and transposed k=2 s=2 from the stride-2 level back onto the input support (a U-Net
decoder). Channels C_in = C_out = 16 / 32 / 64; float32 and float16 features.

Per row: N in / out and the relation's edge count; ``relation_ms`` — building the
relation alone (cache cleared, input table kept); ``fwd_ms`` — the convolution with
the relation cached; ``fwd_bwd_ms`` — value and gradients for features and weight;
``gemm_ms`` — a plain OpenBLAS sgemm (the linked scipy-openblas32, its own threads, output
preallocated) of (edges x C_in) @ (C_in x C_out) float32: the same multiply-adds as the
convolution without the gather / scatter; ``sgemm_share`` — gemm_ms / fwd_ms, the conv's
throughput as a fraction of that sgemm's; ``fwd/gemm``
their ratio; ``GFLOP/s`` of the forward pass. Medians.

    python benchmarks/bench_conv.py [--quick] [--repeats 5] [--json out.json]
        [--input kitti] [--op subm] [--channels 32] [--dtype float32]

``--input`` / ``--op`` keep the rows whose input / op name contains the text;
``--channels`` and ``--dtype`` pick those (e.g. the subm k=3 32->32 row on the scan alone).

``--quick``: the scan at 0.2 m, 8k-voxel block and random inputs, 16 / 32 channels.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import mlx.core as mx
import numpy as np
from _common import dense_block, kitti_voxels, median_ms, openblas_sgemm_ms, report

from lattice import ops
from lattice.core import KernelSpec, RelationKind, SparseTensor

DTYPES = {"float32": mx.float32, "float16": mx.float16}


def random_voxels(n: int, occupancy: float = 0.1, seed: int = 0) -> np.ndarray:
    """About ``n`` unique random voxels in a cube filled to ``occupancy`` (batch 0)."""
    side = max(2, round((n / occupancy) ** (1 / 3)))
    rng = np.random.default_rng(seed)
    pts = np.unique(rng.integers(0, side, size=(int(n * 1.1), 3)), axis=0)[:n]
    return np.concatenate([np.zeros((len(pts), 1), np.int64), pts], axis=1).astype(np.int32)


def _clear(x: SparseTensor, *, downsampled: bool) -> None:
    """Drops cached relations (and downsampled sets) so the next call builds them again."""
    x.coord_manager._relations.clear()
    if downsampled:
        x.coord_manager._downsampled.clear()


class Case:
    """One op on one input: its call, the relation it builds, and the timing closures."""

    def __init__(self, label: str, x: SparseTensor, c_out: int, target: SparseTensor | None = None) -> None:
        self.label = label
        self.x = x
        self.target = target
        c_in = x.channels
        rng = np.random.default_rng(1)
        size = 3 if label.startswith("subm") else 2
        self.w = mx.array(rng.uniform(-0.1, 0.1, (c_out, size, size, size, c_in)).astype(np.float32))

    def call(self, feats: mx.array, w: mx.array) -> SparseTensor:
        x = self.x.replace(feats=feats)
        if self.label.startswith("subm"):
            return ops.subm_conv3d(x, w, kernel_size=3)
        if self.label.startswith("forward"):
            return ops.conv3d(x, w, kernel_size=2, stride=2)
        return ops.conv_transpose3d(x, w, kernel_size=2, stride=2, coordinates=self.target)

    def relation(self):
        m, key = self.x.coord_manager, self.x.coord_key
        if self.label.startswith("subm"):
            return m.relation(RelationKind.SUBMANIFOLD, key, KernelSpec(3))
        if self.label.startswith("forward"):
            return m.relation(RelationKind.FORWARD, key, KernelSpec(2, 2))
        return m.relation(RelationKind.TRANSPOSED, key, KernelSpec(2, 2), self.target.coord_key)

    def build_fresh(self) -> None:
        _clear(self.x, downsampled=self.label.startswith("forward"))
        self.relation()


def _timed(fn: Callable[[], object]) -> Callable[[], None]:
    def run() -> None:
        out = fn()
        mx.eval(out)

    return run


def bench_case(name: str, case: Case, dtype: str, repeats: int) -> dict:
    feats = case.x.feats.astype(DTYPES[dtype])
    mx.eval(feats)
    relation_ms = median_ms(case.build_fresh, repeats)
    rel = case.relation()  # cached from here on
    c_in, c_out = case.x.channels, int(case.w.shape[0])

    def loss(f, w):
        return mx.sum(case.call(f, w).feats.astype(mx.float32))

    grad = mx.value_and_grad(loss, argnums=(0, 1))
    fwd_ms = median_ms(_timed(lambda: case.call(feats, case.w).feats), repeats)
    fwd_bwd_ms = median_ms(_timed(lambda: grad(feats, case.w)), repeats)
    gemm_ms = openblas_sgemm_ms(max(rel.edge_count, 1), c_in, c_out, repeats)
    flops = 2.0 * rel.edge_count * c_in * c_out
    return {
        "input": name,
        "op": case.label,
        "C": f"{c_in}->{c_out}",
        "dtype": dtype,
        "N_in": case.x.active_count,
        "N_out": rel.out_count,
        "edges": rel.edge_count,
        "relation_ms": relation_ms,
        "fwd_ms": fwd_ms,
        "fwd_bwd_ms": fwd_bwd_ms,
        "gemm_ms": gemm_ms,
        "fwd/gemm": fwd_ms / gemm_ms if gemm_ms > 0 else float("nan"),
        "sgemm_share": gemm_ms / fwd_ms if fwd_ms > 0 else float("nan"),
        "GFLOP/s": flops / fwd_ms / 1e6 if fwd_ms > 0 else float("nan"),
    }


def inputs(quick: bool) -> list[tuple[str, np.ndarray]]:
    scan = kitti_voxels(0.2 if quick else 0.05)
    n = 8000 if quick else len(scan)
    voxel = "0.2" if quick else "0.05"
    return [(f"kitti@{voxel}m", scan), ("dense block", dense_block(n)), ("random 10%", random_voxels(n))]


def cases_for(coords: np.ndarray, c: int) -> list[Case]:
    rng = np.random.default_rng(0)
    fine = SparseTensor(coords, mx.array(rng.standard_normal((len(coords), c)).astype(np.float32)))
    coarse_rel = ops.kernel_relation(fine, kernel_size=2, stride=2)
    coarse = SparseTensor(
        coarse_rel.out_coords,
        mx.array(rng.standard_normal((coarse_rel.out_count, c)).astype(np.float32)),
        2,
        coord_key=coarse_rel.out_key,
        coord_manager=fine.coord_manager,
    )
    return [
        Case("subm k=3", fine, c),
        Case("forward k=2 s=2", fine, c),
        Case("transposed k=2 s=2 onto skip", coarse, c, target=fine),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small inputs, 16/32 channels")
    ap.add_argument("--repeats", type=int, default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--input", default="", help="only inputs whose name contains this")
    ap.add_argument("--op", default="", help="only ops whose name contains this")
    ap.add_argument("--channels", type=int, nargs="*", default=None, help="only these channel counts")
    ap.add_argument("--dtype", choices=sorted(DTYPES), nargs="*", default=None, help="only these dtypes")
    args = ap.parse_args()
    repeats = args.repeats or (3 if args.quick else 5)
    channels = args.channels or ((16, 32) if args.quick else (16, 32, 64))
    rows = []
    for name, coords in inputs(args.quick):
        if args.input not in name:
            continue
        for c in channels:
            for case in cases_for(coords, c):
                if args.op not in case.label:
                    continue
                for dtype in args.dtype or DTYPES:
                    rows.append(bench_case(name, case, dtype, repeats))
                    r = rows[-1]
                    print(
                        f"  {name:12} {r['op']:30} {r['C']:7} {dtype:8} fwd {r['fwd_ms']:8.2f} ms  "
                        f"gemm {r['gemm_ms']:7.2f} ms",
                        flush=True,
                    )
    report(rows, f"sparse convolution, CPU, median of {repeats}", args.json)


if __name__ == "__main__":
    main()
