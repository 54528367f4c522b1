"""Packed int8 / int4 weights against float32: weight memory and forward time, side by side.

Input: the SemanticKITTI scan voxelized at 0.05 m (94,444 voxels), 64 -> 64 submanifold
convolution, kernel 3 (also 32 -> 32 and a 64 -> 64 linear on the same rows). The
relation is built once (the coordinate manager caches it) and reported apart; each
round then times float32, int8 and int4 back to back in a rotating order, so the
three see the same machine load. Reported: bytes of the weight (float32 array; packed
data + scales + biases), median / min / max forward ms over the rounds, the median of
the per-round ratio to float32, and the output error against the float32 result.

    python benchmarks/bench_quantized.py [--rounds 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import statistics
import time

import mlx.core as mx
import numpy as np
from _common import kitti_voxels, report

import lattice
from lattice import ops
from lattice.core import SparseTensor
from lattice.core.quantized import dequantize_mapped, quantize_weight


def _timed(fn) -> float:
    t0 = time.perf_counter()
    mx.eval(fn())
    return (time.perf_counter() - t0) * 1e3


def side_by_side(variants: dict, rounds: int) -> dict[str, list[float]]:
    """Times every variant once per round, rotating the order; one warm-up call each."""
    for fn in variants.values():
        mx.eval(fn())
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            times[n].append(_timed(variants[n]))
    return times


def _rows(label: str, weights: dict, times: dict, outputs: dict) -> list[dict]:
    ref = np.asarray(outputs["float32"], dtype=np.float64)
    rows = []
    for name, w in weights.items():
        ratio = statistics.median(t / f for t, f in zip(times[name], times["float32"], strict=True))
        err = np.linalg.norm(np.asarray(outputs[name], dtype=np.float64) - ref) / np.linalg.norm(ref)
        rows.append(
            {
                "op": label,
                "weight": name,
                "bytes": int(w.nbytes),
                "x_smaller": round(weights["float32"].nbytes / w.nbytes, 2),
                "median_ms": statistics.median(times[name]),
                "min_ms": min(times[name]),
                "max_ms": max(times[name]),
                "ratio_to_f32": round(ratio, 3),
                "rel_error": f"{err:.1e}",
            }
        )
    return rows


def bench_conv(x: SparseTensor, c_in: int, c_out: int, rounds: int) -> list[dict]:
    rng = np.random.default_rng(1)
    s = np.sqrt(1.0 / (c_in * 27))
    w = mx.array(rng.uniform(-s, s, (c_out, 3, 3, 3, c_in)).astype(np.float32))
    weights = {"float32": w, "int8": quantize_weight(w, bits=8), "int4": quantize_weight(w, bits=4)}
    variants = {n: (lambda q=q: ops.subm_conv3d(x, q).feats) for n, q in weights.items()}
    times = side_by_side(variants, rounds)
    outputs = {n: fn() for n, fn in variants.items()}
    label = f"subm_conv3d {c_in}->{c_out} k=3"
    rows = _rows(label, weights, times, outputs)
    dq = side_by_side({"dequantize int8": lambda: dequantize_mapped(weights["int8"])}, rounds)
    rows.append(
        {
            "op": label,
            "weight": "int8 dequantize only",
            "bytes": "-",
            "x_smaller": "-",
            "median_ms": statistics.median(dq["dequantize int8"]),
            "min_ms": min(dq["dequantize int8"]),
            "max_ms": max(dq["dequantize int8"]),
            "ratio_to_f32": "-",
            "rel_error": "-",
        }
    )
    return rows


def bench_linear(feats: mx.array, c: int, rounds: int) -> list[dict]:
    rng = np.random.default_rng(2)
    w = mx.array(rng.uniform(-(c**-0.5), c**-0.5, (c, c)).astype(np.float32))
    weights = {"float32": w, "int8": quantize_weight(w, bits=8), "int4": quantize_weight(w, bits=4)}
    variants = {n: (lambda q=q: ops.linear(feats, q)) for n, q in weights.items()}
    times = side_by_side(variants, rounds)
    outputs = {n: fn() for n, fn in variants.items()}
    return _rows(f"linear {c}->{c}", weights, times, outputs)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()

    coords = kitti_voxels(0.05)
    n = len(coords)
    rng = np.random.default_rng(0)
    rows = []
    for c in (64, 32):
        x = SparseTensor(coords, mx.array(rng.standard_normal((n, c)).astype(np.float32)))
        t0 = time.perf_counter()
        route = lattice.explain(
            ops.subm_conv3d, x, mx.zeros((c, 3, 3, 3, c))
        )  # builds and caches the relation
        relation_ms = (time.perf_counter() - t0) * 1e3
        print(
            f"KITTI 0.05 m: N = {n}, submanifold k=3 edges = {route.facts['edges']}, relation {relation_ms:.1f} ms"
        )
        rows += bench_conv(x, c, c, args.rounds)
    feats = mx.array(rng.standard_normal((n, 64)).astype(np.float32))
    rows += bench_linear(feats, 64, args.rounds)
    report(rows, f"quantized vs float32 on the CPU, {args.rounds} rounds side by side", args.json)


if __name__ == "__main__":
    main()
