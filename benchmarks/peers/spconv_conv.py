"""spconv 2.3.8 (CPU) convolutions on the voxelized SemanticKITTI scan, for comparison with
bench_conv.py. Run in a separate environment with torch + spconv (never a lattice
dependency):  /path/to/peer-venv/bin/python benchmarks/peers/spconv_conv.py

Reports SubMConv3d(C, C, 3) forward with the kernel map built in the call and with it
cached (indice_key reused: the map found in the indice_dict of an earlier call's output,
where spconv stores it — before 2026-12-06 this script handed over the input's dict,
which never holds it, so its "map cached" row rebuilt the map), SparseConv3d(C, 2C, 3,
s=2) and SparseMaxPool3d(2, 2) forward, median of 5. spconv's CPU build has no backward pass.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from _spconv import nonnegative
from spconv import pytorch as spconv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import kitti_voxels, median_ms, report  # noqa: E402


def bench_channels(idx, shape, c: int) -> list[dict]:
    feats = torch.randn(len(idx), c)

    def tensor():
        return spconv.SparseConvTensor(feats, idx, shape, 1)

    subm = spconv.SubMConv3d(c, c, 3, bias=False, indice_key="s1", algo=spconv.ConvAlgo.Native)
    strided = spconv.SparseConv3d(c, 2 * c, 3, 2, bias=False, algo=spconv.ConvAlgo.Native)
    pool = spconv.SparseMaxPool3d(2, 2, algo=spconv.ConvAlgo.Native)
    with torch.no_grad():
        fresh = median_ms(lambda: subm(tensor()), 5)
        # spconv copies the input's indice_dict and stores the map it builds under
        # indice_key "s1" in the copy, which the *output* carries: reuse the output's
        out = subm(tensor())
        assert "s1" in out.indice_dict

        def cached():
            x = tensor()
            x.indice_dict = out.indice_dict
            return subm(x)

        cached_ms = median_ms(cached, 5)
        s2 = median_ms(lambda: strided(tensor()), 5)
        mp = median_ms(lambda: pool(tensor()), 5)
    n = len(idx)
    return [
        {"op": f"SubMConv3d({c},{c},3) incl. map", "N_in": n, "median_ms": fresh},
        {"op": f"SubMConv3d({c},{c},3) map cached", "N_in": n, "median_ms": cached_ms},
        {"op": f"SparseConv3d({c},{2 * c},3,s2)", "N_in": n, "median_ms": s2},
        {"op": f"SparseMaxPool3d(2,2) {c}ch", "N_in": n, "median_ms": mp},
    ]


def main() -> None:
    torch.set_num_threads(2)
    coords = kitti_voxels(0.05)
    idx, shape = nonnegative(coords, margin=3)
    rows = bench_channels(idx, shape, 32) + bench_channels(idx, shape, 64)
    report(rows, f"spconv {__import__('spconv').__version__} CPU, kitti 0.05 m")


if __name__ == "__main__":
    main()
