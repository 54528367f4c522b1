"""Relation (kernel-map) building by public input shape.

Inputs: the SemanticKITTI scan voxelized at 0.05 m (94,444 voxels) and a dense
block with the same N. Reports N in/out, edges and the median time of the
submanifold k=3 relation, the k=2 s=2 forward relation and its transposed
relation, each built fresh (no cache) on a fresh coordinate manager.

    python benchmarks/bench_relations.py [--repeats 7] [--json out.json]
"""

from __future__ import annotations

import argparse

import mlx.core as mx
from _common import dense_block, kitti_voxels, median_ms, report

import lattice
from lattice.core import CoordinateManager, KernelSpec, RelationKind


def _fresh(coords: mx.array, stride=1):
    manager = CoordinateManager()
    return manager, manager.insert(coords, stride)


def bench(name: str, coords_np, repeats: int) -> list[dict]:
    coords = mx.array(coords_np)
    mx.eval(coords)
    rows = []
    n = int(coords.shape[0])

    def table():  # the full hash: rows that arrive sorted (np.unique) would otherwise defer it
        manager, key = _fresh(coords)
        return manager.table(key).capacity

    rows.append(
        {
            "input": name,
            "relation": "hash table build",
            "N_in": n,
            "N_out": n,
            "edges": 0,
            "median_ms": median_ms(table, repeats),
        }
    )

    cases = [
        ("submanifold k=3", RelationKind.SUBMANIFOLD, KernelSpec(3)),
        ("forward k=2 s=2", RelationKind.FORWARD, KernelSpec(2, 2)),
        ("forward k=3 s=2", RelationKind.FORWARD, KernelSpec(3, 2)),
    ]
    for label, kind, spec in cases:
        manager, key = _fresh(coords)

        def build(manager=manager, key=key, kind=kind, spec=spec):
            # A fresh relation every call: clear the cache (and the sets it registered), keep
            # the input table.
            manager._relations.clear()
            manager._downsampled.clear()
            for key_id in [k for k in manager._tables if k != key.id]:
                del manager._tables[key_id], manager._keys[key_id]
            return manager.relation(kind, key, spec)

        rel = build()
        rows.append(
            {
                "input": name,
                "relation": label,
                "N_in": n,
                "N_out": rel.out_count,
                "edges": rel.edge_count,
                "median_ms": median_ms(build, repeats),
            }
        )

    # Transposed k=2 s=2 from the stride-2 level back to stride 1 (generated support).
    manager, key = _fresh(coords)
    coarse = manager.downsample(key, 2)
    spec = KernelSpec(2, 2)

    def transposed():
        manager._relations.clear()
        for key_id in [k for k in manager._tables if k not in (key.id, coarse.id)]:  # generated supports
            del manager._tables[key_id], manager._keys[key_id]
        return manager.relation(RelationKind.TRANSPOSED, coarse, spec)

    def transposed_target():
        manager._relations.clear()
        return manager.relation(RelationKind.TRANSPOSED, coarse, spec, key)

    for label, fn in (
        ("transposed k=2 s=2 (generated)", transposed),
        ("transposed k=2 s=2 (onto input)", transposed_target),
    ):
        rel = fn()
        rows.append(
            {
                "input": name,
                "relation": label,
                "N_in": manager.size(coarse),
                "N_out": rel.out_count,
                "edges": rel.edge_count,
                "median_ms": median_ms(fn, repeats),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    kitti = kitti_voxels(0.05)
    rows = bench("kitti 0.05 m", kitti, args.repeats)
    rows += bench("dense block", dense_block(len(kitti)), args.repeats)
    info = lattice.backend_info()
    report(rows, f"relations (CPU, {info.cpu_threads} threads, lattice {info.version})", args.json)


if __name__ == "__main__":
    main()
