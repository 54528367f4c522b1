"""spconv 2.3.8 (CPU) MinkUNet14 / 18 built like lattice's ``minkunet(14 | 18, ...)``, for bench_network.py.

Run in a separate environment with torch + spconv (never a lattice dependency); bench_network.py
calls it with ``--peer-python``:

    /path/to/peer-venv/bin/python benchmarks/peers/spconv_unet.py COORDS.npy --repeats 5 --threads 1 [--preset 18]

The layout is lattice's (lattice/models/unet.py): stem SubMConv3d k5 -> BN -> ReLU; four levels
of SparseConv3d(k2, s2) -> BN -> ReLU and basic blocks (two SubMConv3d k3 with BN, ReLU,
a 1x1 projection where the width changes, the residual add); four decoder levels of
SparseInverseConv3d(k2) -> BN -> ReLU onto the skip's indices, the features concatenated with
the skip's, basic blocks; a Linear head. One block per level (MinkUNet14) or two (18). Widths 32 / (32, 64, 128, 256) / (256, 128, 96, 96).
Eval mode. Each timed call builds a new SparseConvTensor from the coordinates (its kernel
maps built in the call: "fresh"); ``indice_key`` shares a level's maps inside one forward, as
lattice's coordinate manager does. Prints one JSON object: the medians and all times in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import torch
from spconv import pytorch as spconv
from torch import nn

ALGO = spconv.ConvAlgo.Native  # the CPU build's algorithm


def subm(c_in, c_out, k, key):
    return spconv.SubMConv3d(c_in, c_out, k, bias=False, indice_key=key, algo=ALGO)


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, key):
        super().__init__()
        self.conv1, self.norm1 = subm(c_in, c_out, 3, key), nn.BatchNorm1d(c_out)
        self.conv2, self.norm2 = subm(c_out, c_out, 3, key), nn.BatchNorm1d(c_out)
        self.proj = None if c_in == c_out else subm(c_in, c_out, 1, key + "p")
        self.proj_norm = None if c_in == c_out else nn.BatchNorm1d(c_out)

    def forward(self, x):
        y = self.conv1(x)
        y = y.replace_feature(torch.relu(self.norm1(y.features)))
        y = self.conv2(y)
        y = y.replace_feature(self.norm2(y.features))
        s = x.features if self.proj is None else self.proj_norm(self.proj(x).features)
        return y.replace_feature(torch.relu(y.features + s))


class UNet(nn.Module):
    def __init__(self, c_in=4, classes=19, stem=32, enc=(32, 64, 128, 256), dec=(256, 128, 96, 96), blocks=1):
        super().__init__()
        self.stem, self.stem_norm = subm(c_in, stem, 5, "stem"), nn.BatchNorm1d(stem)
        self.down, self.down_norm, self.enc = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        width, skips = stem, [stem]
        for i, c in enumerate(enc):
            self.down.append(
                spconv.SparseConv3d(width, width, 2, 2, bias=False, indice_key=f"d{i}", algo=ALGO)
            )
            self.down_norm.append(nn.BatchNorm1d(width))
            self.enc.append(
                nn.Sequential(*[BasicBlock(width if b == 0 else c, c, f"s{i + 1}") for b in range(blocks)])
            )
            width = c
            skips.append(c)
        self.up, self.up_norm, self.dec = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for i, c in enumerate(dec):
            level = len(enc) - 1 - i
            self.up.append(
                spconv.SparseInverseConv3d(width, c, 2, bias=False, indice_key=f"d{level}", algo=ALGO)
            )
            self.up_norm.append(nn.BatchNorm1d(c))
            self.dec.append(
                nn.Sequential(
                    *[BasicBlock(c + skips[level] if b == 0 else c, c, f"s{level}") for b in range(blocks)]
                )
            )
            width = c
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        y = self.stem(x)
        y = y.replace_feature(torch.relu(self.stem_norm(y.features)))
        skips = [y]
        for down, norm, block in zip(self.down, self.down_norm, self.enc, strict=True):
            y = down(y)
            y = block(y.replace_feature(torch.relu(norm(y.features))))
            skips.append(y)
        for i, (up, norm, block) in enumerate(zip(self.up, self.up_norm, self.dec, strict=True)):
            skip = skips[-2 - i]
            y = up(y)
            y = y.replace_feature(torch.cat([torch.relu(norm(y.features)), skip.features], dim=1))
            y = block(y)
        return self.head(y.features)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("coords", help="(N, 4) int32 .npy: batch, x, y, z")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--preset", type=int, default=14, choices=(14, 18))
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    idx = torch.from_numpy(np.load(args.coords).astype(np.int32))
    idx[:, 1:] -= idx[:, 1:].min(0).values  # spconv needs non-negative indices
    shape = (idx[:, 1:].max(0).values + 2).tolist()
    torch.manual_seed(0)
    feats = torch.randn(len(idx), 4)
    model = UNet(blocks={14: 1, 18: 2}[args.preset]).eval()
    times = []
    with torch.no_grad():
        for i in range(args.repeats + 1):
            t0 = time.perf_counter()
            out = model(spconv.SparseConvTensor(feats, idx, shape, 1))
            assert out.shape == (len(idx), 19)
            if i:  # the first call warms the allocator
                times.append((time.perf_counter() - t0) * 1e3)
    print(json.dumps({"forward_ms": statistics.median(times), "times": times, "N": len(idx)}))


if __name__ == "__main__":
    main()
