"""spconv 2.3.8 MinkUNet14 / 18 built like lattice's ``minkunet(14 | 18, ...)``, for bench_network.py (CPU)
and tools/gpu_job.sh (CUDA).

Run in a separate environment with torch + spconv (never a lattice dependency); bench_network.py
calls it with ``--peer-python``:

    /path/to/peer-venv/bin/python benchmarks/peers/spconv_unet.py COORDS.npy --repeats 5 --threads 1 [--preset 18]

On a GPU (spconv-cu126; tools/gpu_job.sh ``peer``), on the voxels bench_conv_gpu.py
``--save-coords`` wrote, with bench_lazy_rows.py's head and loss:

    python3 benchmarks/peers/spconv_unet.py --coords build/shells.npy --device cuda --classes 20 [--train]

COORDS is an (N, 4) int32 .npy of batch, x, y, z (shifted here to be non-negative, as spconv
needs); ``--rows N`` takes its first N rows.

The layout is lattice's (lattice/models/unet.py): stem SubMConv3d k5 -> BN -> ReLU; four levels
of SparseConv3d(k2, s2) -> BN -> ReLU and basic blocks (two SubMConv3d k3 with BN, ReLU,
a 1x1 projection where the width changes, the residual add); four decoder levels of
SparseInverseConv3d(k2) -> BN -> ReLU onto the skip's indices, the features concatenated with
the skip's, basic blocks; a Linear head. One block per level (MinkUNet14) or two (18). Widths 32 / (32, 64, 128, 256) / (256, 128, 96, 96).
Each timed call builds a new SparseConvTensor from the coordinates (its kernel maps built in
the call: "fresh"); ``indice_key`` shares a level's maps inside one forward, as lattice's
coordinate manager does. Default: eval mode, the forward. ``--train``: train mode (batch
statistics), mean cross-entropy against labels ``arange(N) % classes`` and ``loss.backward()``
(gradients only, no optimiser step: bench_lazy_rows.py's train_ms). Untimed warm-up calls
first (``--warmup``: 1 on the CPU, 3 on CUDA, where spconv also tunes its kernels on the
first calls); on CUDA each timed call is bracketed by ``torch.cuda.synchronize()``. The
convolution algorithm is spconv's default on CUDA (MaskImplicitGemm) and Native on the CPU
(the only one its CPU build has); float32 without TF32 unless ``--tf32``. spconv's CPU build
has no backward pass (2.3.8: "Torch not compiled with CUDA enabled"), so ``--train`` needs CUDA.
Prints one JSON object on its last line: the median (``forward_ms`` or ``train_ms``), all
times in ms (``times``, which bench_network.py reads), ``N``, then ``range_ms`` and the setup.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from _spconv import add_input_args, algorithm, check_input_args, load_indices
from spconv import __version__ as spconv_version
from spconv import constants as spconv_constants
from spconv import pytorch as spconv
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import timed_ms  # noqa: E402


def subm(c_in, c_out, k, key, algo):
    return spconv.SubMConv3d(c_in, c_out, k, bias=False, indice_key=key, algo=algo)


class BasicBlock(nn.Module):
    def __init__(self, c_in, c_out, key, algo):
        super().__init__()
        self.conv1, self.norm1 = subm(c_in, c_out, 3, key, algo), nn.BatchNorm1d(c_out)
        self.conv2, self.norm2 = subm(c_out, c_out, 3, key, algo), nn.BatchNorm1d(c_out)
        self.proj = None if c_in == c_out else subm(c_in, c_out, 1, key + "p", algo)
        self.proj_norm = None if c_in == c_out else nn.BatchNorm1d(c_out)

    def forward(self, x):
        y = self.conv1(x)
        y = y.replace_feature(torch.relu(self.norm1(y.features)))
        y = self.conv2(y)
        y = y.replace_feature(self.norm2(y.features))
        s = x.features if self.proj is None else self.proj_norm(self.proj(x).features)
        return y.replace_feature(torch.relu(y.features + s))


class UNet(nn.Module):
    def __init__(
        self,
        c_in=4,
        classes=19,
        stem=32,
        enc=(32, 64, 128, 256),
        dec=(256, 128, 96, 96),
        blocks=1,
        algo=spconv.ConvAlgo.Native,
        stem_algo=None,
    ):
        super().__init__()
        self.stem = subm(c_in, stem, 5, "stem", stem_algo or algo)
        self.stem_norm = nn.BatchNorm1d(stem)
        self.down, self.down_norm, self.enc = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        width, skips = stem, [stem]
        for i, c in enumerate(enc):
            self.down.append(
                spconv.SparseConv3d(width, width, 2, 2, bias=False, indice_key=f"d{i}", algo=algo)
            )
            self.down_norm.append(nn.BatchNorm1d(width))
            self.enc.append(
                nn.Sequential(
                    *[BasicBlock(width if b == 0 else c, c, f"s{i + 1}", algo) for b in range(blocks)]
                )
            )
            width = c
            skips.append(c)
        self.up, self.up_norm, self.dec = nn.ModuleList(), nn.ModuleList(), nn.ModuleList()
        for i, c in enumerate(dec):
            level = len(enc) - 1 - i
            self.up.append(
                spconv.SparseInverseConv3d(width, c, 2, bias=False, indice_key=f"d{level}", algo=algo)
            )
            self.up_norm.append(nn.BatchNorm1d(c))
            self.dec.append(
                nn.Sequential(
                    *[
                        BasicBlock(c + skips[level] if b == 0 else c, c, f"s{level}", algo)
                        for b in range(blocks)
                    ]
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


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_input_args(ap, "cpu")
    ap.add_argument("--rows", type=int, default=None, help="only the first N rows of COORDS")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=None, help="untimed calls first (1 CPU, 3 CUDA)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--preset", type=int, default=14, choices=(14, 18))
    ap.add_argument("--classes", type=int, default=19, help="output classes of the head")
    ap.add_argument("--train", action="store_true", help="time loss + backward in train mode")
    ap.add_argument(
        "--stem-algo",
        default=None,
        choices=[a.name for a in spconv.ConvAlgo],
        help="the k=5 stem's algorithm (default: --algo's)",
    )
    args = ap.parse_args()
    check_input_args(ap, args)
    if args.train and args.device == "cpu":
        ap.error("--train needs --device cuda: spconv's CPU build has no backward pass")
    if args.warmup is None:
        args.warmup = 3 if args.device == "cuda" else 1
    return args


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    if args.tf32:
        spconv_constants.SPCONV_ALLOW_TF32 = True
        torch.backends.cuda.matmul.allow_tf32 = True
    algo = algorithm(args)
    idx, shape = load_indices(args.coords, margin=2, rows=args.rows)  # room for the stride-2 levels
    n = len(idx)
    torch.manual_seed(0)
    feats = torch.randn(n, 4).to(device)
    idx = idx.to(device)
    stem_algo = spconv.ConvAlgo[args.stem_algo] if args.stem_algo else algo
    blocks = {14: 1, 18: 2}[args.preset]
    model = UNet(classes=args.classes, blocks=blocks, algo=algo, stem_algo=stem_algo).to(device)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)

    def tensor():
        return spconv.SparseConvTensor(feats, idx, shape, 1)

    if args.train:
        model.train()
        labels = torch.arange(n, device=device) % args.classes

        def step():
            loss = nn.functional.cross_entropy(model(tensor()), labels)
            loss.backward()

        times = timed_ms(
            step, args.repeats, args.warmup, sync, reset=lambda: model.zero_grad(set_to_none=True)
        )
    else:
        model.eval()

        def step():
            with torch.no_grad():
                out = model(tensor())
            assert out.shape == (n, args.classes)

        times = timed_ms(step, args.repeats, args.warmup, sync)
    key = "train_ms" if args.train else "forward_ms"
    result = {key: statistics.median(times), "times": times, "N": n, "range_ms": [min(times), max(times)]}
    result.update(
        device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        classes=args.classes,
        preset=args.preset,
        algo=algo.name,
        stem_algo=stem_algo.name,
        tf32=args.tf32,
        warmup=args.warmup,
        torch=torch.__version__,
        spconv=spconv_version,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
