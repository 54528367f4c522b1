"""spconv 2.3.8 (CPU) kernel-map building on the same inputs as bench_relations.py.

Run in a separate environment that has torch and spconv (never a lattice
dependency):  /path/to/peer-venv/bin/python benchmarks/peers/spconv_relations.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from _spconv import nonnegative
from spconv.pytorch import ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import dense_block, kitti_voxels, median_ms, report  # noqa: E402


def bench(name, coords_np, repeats):
    idx, shape = nonnegative(coords_np, margin=3)
    rows = []
    for label, kw in (
        ("submanifold k=3", dict(ksize=[3, 3, 3], stride=[1, 1, 1], padding=[1, 1, 1], subm=True)),
        ("forward k=2 s=2", dict(ksize=[2, 2, 2], stride=[2, 2, 2], padding=[0, 0, 0], subm=False)),
    ):

        def run(kw=kw):
            return ops.get_indice_pairs(
                idx,
                1,
                shape,
                ops.ConvAlgo.Native,
                dilation=[1, 1, 1],
                out_padding=[0, 0, 0],
                transpose=False,
                **kw,
            )

        out = run()
        rows.append(
            {
                "input": name,
                "relation": label,
                "N_in": len(idx),
                "N_out": int(out[0].shape[0]),
                "edges": int(out[2].sum()),
                "median_ms": median_ms(run, repeats),
            }
        )
    return rows


if __name__ == "__main__":
    torch.set_num_threads(2)
    kitti = kitti_voxels(0.05)
    rows = bench("kitti 0.05 m", kitti, 5) + bench("dense block", dense_block(len(kitti)), 5)
    report(rows, f"spconv {__import__('spconv').__version__} CPU kernel maps")
