"""Train a small sparse U-Net for semantic segmentation on one real LiDAR scan.

    python examples/train_unet.py [--scan path/to/scan.bin] [--voxel-size 0.2] [--steps 20]

Reads a SemanticKITTI scan (``.bin``: float32 x, y, z, remission) and its ``.label``
file, voxelizes it, gives every voxel the majority label of its points (raw ids mapped
to the 19 learning classes, 0 = ignored), and fits a sparse U-Net with Adam:

- encoder: ``SubmConv3d`` blocks and strided ``Conv3d`` (k=2, s=2) down two levels;
- decoder: ``ConvTranspose3d`` (k=2, s=2) back onto the encoder's support (``target=``
  the skip tensor, so rows and order match) and a skip connection by channel
  concatenation, then ``SubmConv3d``;
- a pointwise ``Conv3d`` (k=1) head.

All relations are built once (on the first step) and cached by the coordinate
manager that the tensors share. The loss goes down; per-step time is printed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

import lattice
from lattice import ops
from lattice.nn.conv import Conv3d, ConvTranspose3d, SubmConv3d
from lattice.nn.feature import BatchNorm, ReLU

DEFAULT_SCAN = Path(__file__).resolve().parents[1].parent / "shared/data/semantickitti/seq00_000000.bin"

# SemanticKITTI raw id -> learning id (0 = unlabeled / ignored), as in semantic-kitti.yaml.
LEARNING_MAP = {
    0: 0, 1: 0, 10: 1, 11: 2, 13: 5, 15: 3, 16: 5, 18: 4, 20: 5, 30: 6, 31: 7, 32: 8, 40: 9, 44: 10,
    48: 11, 49: 12, 50: 13, 51: 14, 52: 0, 60: 9, 70: 15, 71: 16, 72: 17, 80: 18, 81: 19, 99: 0,
    252: 1, 253: 7, 254: 6, 255: 8, 256: 5, 257: 5, 258: 4, 259: 5,
}  # fmt: skip
N_CLASSES = 20


def cat(a: lattice.SparseTensor, b: lattice.SparseTensor) -> lattice.SparseTensor:
    """Channel concatenation of two tensors on the same coordinates."""
    if hasattr(ops, "cat"):
        return ops.cat([a, b])
    return a.replace(feats=mx.concatenate([a.feats, b.feats], axis=1))  # identical rows and order


class Block(nn.Module):
    """SubmConv3d (k=3) -> BatchNorm -> ReLU."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = SubmConv3d(c_in, c_out, kernel_size=3, bias=False)
        self.norm = BatchNorm(c_out)
        self.act = ReLU()

    def __call__(self, x: lattice.SparseTensor) -> lattice.SparseTensor:
        return self.act(self.norm(self.conv(x)))


class Down(Block):
    """Conv3d (k=2, s=2) -> BatchNorm -> ReLU: the next level, ``unique(floor(c / 2))``."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__(c_in, c_out)
        self.conv = Conv3d(c_in, c_out, kernel_size=2, stride=2, bias=False)


class Up(nn.Module):
    """ConvTranspose3d (k=2, s=2) onto the skip's support, concatenation, then a Block."""

    def __init__(self, c_in: int, c_skip: int) -> None:
        super().__init__()
        self.up = ConvTranspose3d(c_in, c_skip, kernel_size=2, stride=2, bias=False)
        self.norm = BatchNorm(c_skip)
        self.act = ReLU()
        self.block = Block(2 * c_skip, c_skip)

    def __call__(self, x: lattice.SparseTensor, skip: lattice.SparseTensor) -> lattice.SparseTensor:
        u = self.act(self.norm(self.up(x, target=skip)))
        return self.block(cat(u, skip))


class SparseUNet(nn.Module):
    """Three levels: widths ``w``, ``2w``, ``4w``."""

    def __init__(self, c_in: int, n_classes: int, width: int = 16) -> None:
        super().__init__()
        w1, w2, w3 = width, 2 * width, 4 * width
        self.stem = Block(c_in, w1)
        self.enc1 = Block(w1, w1)
        self.down1 = Down(w1, w2)
        self.enc2 = Block(w2, w2)
        self.down2 = Down(w2, w3)
        self.mid = Block(w3, w3)
        self.up2 = Up(w3, w2)
        self.up1 = Up(w2, w1)
        self.head = Conv3d(w1, n_classes, kernel_size=1)

    def __call__(self, x: lattice.SparseTensor) -> lattice.SparseTensor:
        s1 = self.enc1(self.stem(x))
        s2 = self.enc2(self.down1(s1))
        m = self.mid(self.down2(s2))
        return self.head(self.up1(self.up2(m, s2), s1))


def load_scan(scan: Path, voxel_size: float) -> tuple[lattice.SparseTensor, mx.array]:
    """Voxel features (mean remission, mean height, log point count) and majority labels."""
    pts = np.fromfile(scan, dtype=np.float32).reshape(-1, 4)
    raw = np.fromfile(scan.with_suffix(".label"), dtype=np.uint32) & 0xFFFF
    lut = np.zeros(int(raw.max()) + 1, np.int64)
    for k, v in LEARNING_MAP.items():
        if k < len(lut):
            lut[k] = v
    labels = lut[raw]
    q = lattice.sparse_quantize(pts[:, :3], voxel_size)
    n = q.active_count
    inv = np.asarray(q.inverse_rows).astype(np.int64)
    count = np.bincount(inv, minlength=n).astype(np.float64)
    feats = np.stack(
        [
            np.bincount(inv, pts[:, 3], minlength=n) / count,
            np.bincount(inv, pts[:, 2], minlength=n) / count / 3.0,
            np.log1p(count),
        ],
        axis=1,
    ).astype(np.float32)
    votes = np.bincount(inv * N_CLASSES + labels, minlength=n * N_CLASSES).reshape(n, N_CLASSES)
    votes[:, 0] = np.where(votes[:, 1:].sum(axis=1) > 0, 0, votes[:, 0])  # prefer a real class
    x = lattice.SparseTensor(q.coords[:n], mx.array(feats))
    return x, mx.array(votes.argmax(axis=1).astype(np.int32))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scan", type=Path, default=DEFAULT_SCAN)
    ap.add_argument("--voxel-size", type=float, default=0.2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--width", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-2)
    args = ap.parse_args()
    if not args.scan.is_file():
        raise SystemExit(f"scan not found: {args.scan}")

    mx.random.seed(0)
    x, labels = load_scan(args.scan, args.voxel_size)
    valid = labels > 0
    n_valid = int(valid.sum())
    present = sorted(set(np.asarray(labels).tolist()) - {0})
    print(f"{x.active_count:,} voxels at {args.voxel_size} m, {n_valid:,} labelled, classes {present}")

    model = SparseUNet(x.channels, N_CLASSES, args.width)
    optimizer = optim.Adam(learning_rate=args.lr)

    def loss_fn(model: SparseUNet) -> tuple[mx.array, mx.array]:
        logits = model(x).feats
        ce = nn.losses.cross_entropy(logits, labels, reduction="none")
        loss = mx.sum(mx.where(valid, ce, 0.0)) / n_valid
        return loss, logits

    step = nn.value_and_grad(model, loss_fn)
    first = last = None
    for i in range(args.steps):
        t0 = time.perf_counter()
        (loss, logits), grads = step(model)
        optimizer.update(model, grads)
        mx.eval(loss, logits, model.parameters(), optimizer.state)
        ms = (time.perf_counter() - t0) * 1e3
        acc = float(mx.sum((mx.argmax(logits, axis=1) == labels) & valid)) / n_valid
        first = float(loss) if first is None else first
        last = float(loss)
        note = "  (builds and caches the relations)" if i == 0 else ""
        print(f"step {i + 1:3d}  loss {last:.4f}  accuracy {acc:.3f}  {ms:7.1f} ms{note}")
    print(f"loss {first:.4f} -> {last:.4f}; {x.coord_manager.relation_count} relations cached")


if __name__ == "__main__":
    main()
