"""Building blocks shared by the sparse networks of :mod:`lattice.models`.

Every block is an ``mlx.nn.Module`` made only of :mod:`lattice.nn` modules and takes and
returns a :class:`~lattice.core.SparseTensor`. Each convolution with the BatchNorm, the
residual add and the ReLU after it is one op in eval mode (:func:`conv_normed`:
``lattice.ops.conv_affine``, fused into the native convolution on the CPU), and each BatchNorm
with what follows it one op in training (:func:`normed`: ``lattice.ops.batch_norm_act``):

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

from dataclasses import asdict, dataclass

import mlx.nn as nn

from lattice.core.buffers import start
from lattice.core.tensor import SparseTensor
from lattice.nn.conv import Conv3d, GenerativeConvTranspose3d, SubmConv3d
from lattice.nn.feature import BatchNorm, ReLU
from lattice.ops import cat, conv_affine, sparse_add
from lattice.routing.coords import queue_downsamples
from lattice.routing.device import requested_device


def positive_int(value, name: str, op: str) -> int:
    """``value`` if it is a positive int (not a bool), else ``ValueError`` naming ``op`` and the value."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"[{op}] {name} must be a positive int, got {value!r}")
    return value


@dataclass(frozen=True)
class NetConfig:
    """The fields every network config starts with; a subclass adds its own (each with a
    default) and ``name: str = field(default=..., init=False)``, the architecture name."""

    in_channels: int
    num_classes: int
    stem_channels: int = 32
    stem_kernel: int = 3

    def __post_init__(self) -> None:
        """Checks the fields above: positive ints, ``stem_kernel`` odd."""
        op = type(self).__name__
        for key in ("in_channels", "num_classes", "stem_channels", "stem_kernel"):
            positive_int(getattr(self, key), key, op)
        if self.stem_kernel % 2 == 0:
            raise ValueError(f"[{op}] stem_kernel must be odd, got {self.stem_kernel}")

    def _level_lists(self, keys: tuple[str, ...]) -> list[int]:
        """Stores the per-level fields ``keys`` as tuples (each must be a non-empty list of
        positive ints); returns their lengths."""
        for key in keys:
            object.__setattr__(self, key, positive_ints(getattr(self, key), key, type(self).__name__))
        return [len(getattr(self, k)) for k in keys]

    def to_dict(self) -> dict:
        """JSON-ready hyper-parameters (lists for tuples, without ``name``): the
        ``architecture.config`` object of a bundle."""
        d = asdict(self)
        d.pop("name")
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}


def positive_ints(value, name: str, op: str) -> tuple[int, ...]:
    """A non-empty list or tuple of positive ints as a tuple, else ``ValueError``."""
    items = tuple(value) if isinstance(value, list | tuple) else None
    if not items or any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in items):
        raise ValueError(f"[{op}] {name} must be a non-empty list of positive ints, got {value!r}")
    return items


def preset_fields(op: str, presets: dict, preset: int, in_channels, num_classes, width, stem_kernel):
    """What the preset builders share: ``preset`` checked against ``presets``, the
    :class:`NetConfig` fields (a stem 32 wide, scaled) and ``scaled(channels)``: channel
    counts times ``width / 32``, at least 1 each."""
    if preset not in presets:
        raise ValueError(f"[{op}] preset must be one of {sorted(presets)}, got {preset!r}")
    scale = positive_int(width, "width", op) / 32

    def scaled(channels: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(max(1, round(v * scale)) for v in channels)

    fields = {
        "in_channels": in_channels,
        "num_classes": num_classes,
        "stem_channels": scaled((32,))[0],
        "stem_kernel": stem_kernel,
    }
    return fields, scaled


def normed(
    norm: BatchNorm, y: SparseTensor, act: ReLU | None, residual: SparseTensor | None = None
) -> SparseTensor:
    """``act(norm(y) + residual)`` (``act`` None: no activation) as one fused op,
    ``norm.normalize`` (``lattice.ops.affine`` with the running statistics in eval mode,
    ``lattice.ops.batch_norm_act`` with ``y``'s batch statistics in training). Where it is not
    one (``normalize`` gives None: e.g. a lazily counted set in training, or a residual on
    another support): the BatchNorm, the add and the activation one after another."""
    fused = norm.normalize(y, residual=residual, activation=None if act is None else "relu")
    if fused is not None:
        return fused
    out = norm(y)
    if residual is not None:
        out = sparse_add(out, residual)
    return out if act is None else act(out)


def conv_normed(
    conv,
    x: SparseTensor,
    norm: BatchNorm,
    act: ReLU | None,
    residual: SparseTensor | None = None,
    *,
    concat: SparseTensor | None = None,
    **support,
) -> SparseTensor:
    """``act(norm(conv(x, **support)) + residual)``, with ``concat``'s channels after it where
    given (``cat([..., concat])``). Under running statistics (eval mode) all of it is one op,
    ``lattice.ops.conv_affine`` (the convolution's kernel applies the map to its output rows
    itself and writes the concatenated channels after them, where its route allows: the
    ``cpu.fused_epilogue`` and ``cuda.fused_epilogue`` routes); otherwise (training, a lazily
    counted set, a tensor on another support) :func:`conv_then_normed`."""
    if norm.uses_running_stats and not x.lazy:
        plan = conv.plan(x, **support)
        if all(t is None or plan.on_output(t) for t in (residual, concat)):
            scale, shift = norm.affine()
            activation = None if act is None else "relu"
            return conv_affine(plan, scale, shift, residual=residual, activation=activation, concat=concat)
    return conv_then_normed(conv, x, norm, act, residual, concat=concat, **support)


def conv_then_normed(
    conv,
    x: SparseTensor,
    norm: BatchNorm,
    act: ReLU | None,
    residual: SparseTensor | None = None,
    *,
    concat: SparseTensor | None = None,
    **support,
) -> SparseTensor:
    """What :func:`conv_normed` computes, as separate ops: the convolution, then
    :func:`normed`, then :func:`lattice.ops.cat` (its form outside eval mode, and the
    reference the fused form is measured and tested against)."""
    y = normed(norm, conv(x, **support), act, residual)
    return y if concat is None else cat([y, concat])


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
        return conv_normed(self.conv, x, self.norm, self.act)


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
        y = conv_normed(self.conv1, x, self.norm1, self.act)
        shortcut = conv_normed(self.proj, x, self.proj_norm, None) if "proj" in self else x
        return conv_normed(self.conv2, y, self.norm2, self.act, residual=shortcut)


def basic_blocks(c_in: int, c_out: int, count: int) -> list[BasicBlock]:
    """``count`` basic blocks: the first maps ``c_in -> c_out``, the rest keep ``c_out``."""
    return [BasicBlock(c_in if i == 0 else c_out, c_out) for i in range(count)]


class StemNet(nn.Module):
    """Base of the networks: built from a config of class ``_config`` (kept as ``config``),
    starting with ``stem``, a :class:`ConvBNReLU` of ``stem_kernel`` to ``stem_channels``."""

    _config: type[NetConfig]

    def __init__(self, config: NetConfig) -> None:
        super().__init__()
        name, want = type(self).__name__, self._config.__name__
        if not isinstance(config, self._config):
            raise TypeError(f"[{name}] config must be a {want}, got {type(config).__name__}")
        self.config = config
        self.stem = ConvBNReLU(config.in_channels, config.stem_channels, kernel_size=config.stem_kernel)


def started(x: SparseTensor) -> SparseTensor:
    """``x``, its features queued for evaluation at once (``mx.async_eval``) where MLX's
    default device is the GPU: the GPU computes this stage while Python builds the next
    one's graph, instead of everything waiting for the graph to be whole. A network calls
    it between stages. Inside a transformation (``mx.grad``, ``mx.compile``, ``mx.vmap``)
    MLX refuses ``async_eval``; the stage then evaluates with the rest, as without it. Not
    on the CPU, where the stage's kernels and Python compete for the same cores (a 2,000-
    voxel MinkUNet14 forward measured 41.8 ms without it, 43.2 with)."""
    if requested_device(None) == "gpu":
        start(x.feats)
    return x


def queue_levels(x: SparseTensor, down) -> None:
    """The coordinate sets the strided convolutions ``down`` (one per level, each on the
    output of the one before, all of one stride: ``strided_levels``) will ask for, made or
    queued ahead from ``x``'s set (``lattice.routing.coords.queue_downsamples``). On the GPU
    their sizes then cost one host read, made once their kernels ran, instead of one per
    level, each waiting for every stage queued before it. A network calls it first."""
    if down:
        queue_downsamples(x.coord_manager, x.coord_key, down[0].conv.spec.stride, len(down))


def run_blocks(x: SparseTensor, blocks) -> SparseTensor:
    """``x`` through ``blocks`` in order."""
    for block in blocks:
        x = block(x)
    return x


def strided_levels(width: int, channels, blocks) -> tuple[list, list[list[BasicBlock]], list[int]]:
    """The encoder levels of the networks: per level a ``k=2, s=2`` :class:`ConvBNReLU` that
    keeps the width, then ``blocks[i]`` basic blocks to ``channels[i]``. Returns the strided
    convolutions, the block lists and the width after each level."""
    down, levels, widths = [], [], []
    for ch, n in zip(channels, blocks, strict=True):
        down.append(ConvBNReLU(width, width, kernel_size=2, stride=2))
        levels.append(basic_blocks(width, ch, n))
        width = ch
        widths.append(ch)
    return down, levels, widths


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
        joined = conv_normed(self.up, x, self.norm, self.act, coordinates=skip, concat=skip)
        return run_blocks(joined, self.blocks)


__all__ = [
    "BasicBlock",
    "ConvBNReLU",
    "NetConfig",
    "StemNet",
    "UpBlock",
    "basic_blocks",
    "conv_normed",
    "normed",
    "positive_int",
    "positive_ints",
    "queue_levels",
]
