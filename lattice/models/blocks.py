"""Building blocks shared by the sparse networks of :mod:`lattice.models`.

Every block is an ``mlx.nn.Module`` made only of :mod:`lattice.nn` modules and takes and
returns a :class:`~lattice.core.SparseTensor`:

- :class:`ConvBNReLU` — one convolution (submanifold, or strided ``k=2, s=2``) -> BatchNorm -> ReLU;
- :class:`BasicBlock` — the ResNet basic block on one support: two submanifold ``k=3``
  convolutions with BatchNorm, a residual connection (a pointwise projection + BatchNorm
  when the width changes) and ReLU;
- :class:`UpBlock` — the decoder step of a U-Net: a ``k=2, s=2`` transposed convolution
  onto the skip tensor's support (rows and order of the skip), BatchNorm, ReLU, channel
  concatenation with the skip, then :class:`BasicBlock` s.

The transposed step uses ``GenerativeConvTranspose3d`` called with the skip as target:
with ``k = s = 2`` and no padding it sums exactly the terms of ``ConvTranspose3d`` onto
that target (each fine voxel is reached from its parent ``floor(c / 2)`` only), and its
packed-weight twin accepts an explicit target, so a whole U-Net can be quantized by
:func:`lattice.nn.quantize`.
"""

from __future__ import annotations

from dataclasses import asdict

import mlx.nn as nn

from lattice.core.tensor import SparseTensor
from lattice.nn.conv import Conv3d, GenerativeConvTranspose3d, SubmConv3d
from lattice.nn.feature import BatchNorm, ReLU
from lattice.ops import cat, sparse_add


def positive_int(value, name: str, op: str) -> int:
    """``value`` if it is a positive int (not a bool), else ``ValueError`` naming ``op`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"[{op}] {name} must be a positive int, got {value!r}")
    return value


def config_dict(config) -> dict:
    """A model config dataclass as JSON-ready hyper-parameters (lists for tuples, without
    ``name``): the ``architecture.config`` object of a bundle."""
    d = asdict(config)
    d.pop("name")
    return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def positive_ints(value, name: str, op: str) -> tuple[int, ...]:
    """A non-empty list or tuple of positive ints as a tuple, else ``ValueError``."""
    items = tuple(value) if isinstance(value, list | tuple) else None
    if not items or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in items):
        raise ValueError(f"[{op}] {name} must be a non-empty list of positive ints, got {value!r}")
    return items


class ConvBNReLU(nn.Module):
    """Convolution -> BatchNorm -> ReLU.

    ``stride == 1``: a submanifold convolution (same support, odd ``kernel_size``);
    ``stride > 1``: a forward ``Conv3d`` with ``kernel_size`` (``unique(floor(c / stride))``).
    """

    def __init__(self, c_in: int, c_out: int, *, kernel_size: int = 3, stride: int = 1) -> None:
        super().__init__()
        positive_int(c_in, "c_in", "ConvBNReLU")
        positive_int(c_out, "c_out", "ConvBNReLU")
        positive_int(stride, "stride", "ConvBNReLU")
        if stride == 1:
            self.conv = SubmConv3d(c_in, c_out, kernel_size=kernel_size, bias=False)
        else:
            self.conv = Conv3d(c_in, c_out, kernel_size=kernel_size, stride=stride, bias=False)
        self.norm = BatchNorm(c_out)
        self.act = ReLU()

    def __call__(self, x: SparseTensor) -> SparseTensor:
        return self.act(self.norm(self.conv(x)))


class BasicBlock(nn.Module):
    """``relu(bn(subm(relu(bn(subm(x))))) + shortcut(x))`` on ``x``'s support."""

    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        positive_int(c_in, "c_in", "BasicBlock")
        positive_int(c_out, "c_out", "BasicBlock")
        self.conv1 = SubmConv3d(c_in, c_out, kernel_size=3, bias=False)
        self.norm1 = BatchNorm(c_out)
        self.conv2 = SubmConv3d(c_out, c_out, kernel_size=3, bias=False)
        self.norm2 = BatchNorm(c_out)
        self.act = ReLU()
        if c_in != c_out:
            self.proj = SubmConv3d(c_in, c_out, kernel_size=1, bias=False)
            self.proj_norm = BatchNorm(c_out)

    def __call__(self, x: SparseTensor) -> SparseTensor:
        y = self.norm2(self.conv2(self.act(self.norm1(self.conv1(x)))))
        shortcut = self.proj_norm(self.proj(x)) if "proj" in self else x
        return self.act(sparse_add(y, shortcut))


def basic_blocks(c_in: int, c_out: int, count: int) -> list[BasicBlock]:
    """``count`` basic blocks: the first maps ``c_in -> c_out``, the rest keep ``c_out``."""
    return [BasicBlock(c_in if i == 0 else c_out, c_out) for i in range(count)]


class UpBlock(nn.Module):
    """Transposed ``k=2, s=2`` onto the skip's support -> BN -> ReLU -> cat(skip) -> blocks."""

    def __init__(self, c_in: int, c_skip: int, c_out: int, blocks: int) -> None:
        super().__init__()
        positive_int(blocks, "blocks", "UpBlock")
        self.up = GenerativeConvTranspose3d(c_in, c_out, kernel_size=2, stride=2, bias=False)
        self.norm = BatchNorm(c_out)
        self.act = ReLU()
        self.blocks = basic_blocks(c_out + c_skip, c_out, blocks)

    def __call__(self, x: SparseTensor, skip: SparseTensor) -> SparseTensor:
        y = cat([self.act(self.norm(self.up(x, skip))), skip])
        for block in self.blocks:
            y = block(y)
        return y


__all__ = ["BasicBlock", "ConvBNReLU", "UpBlock", "basic_blocks", "positive_int", "positive_ints"]
