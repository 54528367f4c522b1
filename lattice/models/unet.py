"""MinkUNet-style sparse U-Net for per-voxel segmentation.

The layout follows MinkowskiEngine's ``MinkUNet`` (Choy et al. 2019) and its
14/18/34 variants:

- stem: a submanifold convolution (``stem_kernel``, 5 in MinkUNet) -> BN -> ReLU;
- encoder level ``i`` (``depth = len(encoder_channels)`` levels): a ``k=2, s=2`` strided
  convolution (halves the resolution, keeps the width) -> BN -> ReLU, then
  ``encoder_blocks[i]`` basic blocks to ``encoder_channels[i]``;
- decoder level ``i``: a ``k=2, s=2`` transposed convolution onto the support of the
  skip one level up (so rows and order match exactly), concatenation with that skip,
  then ``decoder_blocks[i]`` basic blocks to ``decoder_channels[i]``;
- head: a per-voxel ``Linear`` to ``num_classes`` logits.

The output tensor lives on the input's support (same coordinate key), one row of logits
per input voxel. ``minkunet(14 | 18 | 34, ...)`` builds the presets; ``width`` scales all
channel counts (MinkUNet uses 32).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from lattice.core.tensor import SparseTensor
from lattice.models.blocks import (
    NetConfig,
    StemNet,
    UpBlock,
    preset_fields,
    queue_levels,
    run_blocks,
    started,
    strided_levels,
)
from lattice.nn.feature import Linear

# MinkUNet's PLANES (encoder 4, decoder 4) at INIT_DIM 32, and its LAYERS per preset.
_ENCODER = (32, 64, 128, 256)
_DECODER = (256, 128, 96, 96)
UNET_PRESETS: dict[int, tuple[tuple[int, ...], tuple[int, ...]]] = {
    14: ((1, 1, 1, 1), (1, 1, 1, 1)),
    18: ((2, 2, 2, 2), (2, 2, 2, 2)),
    34: ((2, 3, 4, 6), (2, 2, 2, 2)),
}


@dataclass(frozen=True)
class UNetConfig(NetConfig):
    """Hyper-parameters of :class:`MinkUNet` (what ``model.json`` stores under ``architecture``).

    ``encoder_channels`` / ``encoder_blocks`` and ``decoder_channels`` / ``decoder_blocks``
    have one entry per level; all four lengths are the depth.
    """

    stem_kernel: int = 5  # MinkUNet's stem
    encoder_channels: tuple[int, ...] = _ENCODER
    encoder_blocks: tuple[int, ...] = (1, 1, 1, 1)
    decoder_channels: tuple[int, ...] = _DECODER
    decoder_blocks: tuple[int, ...] = (1, 1, 1, 1)
    name: str = field(default="minkunet", init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        lengths = self._level_lists(
            ("encoder_channels", "encoder_blocks", "decoder_channels", "decoder_blocks")
        )
        if len(set(lengths)) != 1:
            raise ValueError(
                f"[UNetConfig] encoder/decoder channels and blocks need one entry per level, got lengths {lengths}"
            )

    @property
    def depth(self) -> int:
        """Number of resolution halvings."""
        return len(self.encoder_channels)


class MinkUNet(StemNet):
    """Sparse U-Net: ``model(x)`` gives per-voxel logits ``(N, num_classes)`` on ``x``'s support."""

    _config = UNetConfig

    def __init__(self, config: UNetConfig) -> None:
        super().__init__(config)
        c = config
        self.down, self.encoder, widths = strided_levels(
            c.stem_channels, c.encoder_channels, c.encoder_blocks
        )
        skips, width = [c.stem_channels, *widths], widths[-1]
        self.decoder = []
        for i, (ch, n) in enumerate(zip(c.decoder_channels, c.decoder_blocks, strict=True)):
            self.decoder.append(UpBlock(width, skips[-2 - i], ch, n))
            width = ch
        self.head = Linear(width, c.num_classes)

    def __call__(self, x: SparseTensor) -> SparseTensor:
        queue_levels(x, self.down)
        y = started(self.stem(x))
        skips = [y]
        for down, blocks in zip(self.down, self.encoder, strict=True):
            y = started(run_blocks(down(y), blocks))
            skips.append(y)
        for i, up in enumerate(self.decoder):
            y = started(up(y, skips[-2 - i]))
        return self.head(y)


def minkunet(
    preset: int,
    in_channels: int,
    num_classes: int,
    *,
    width: int = 32,
    stem_kernel: int = 5,
) -> MinkUNet:
    """MinkUNet14 / 18 / 34 with all widths scaled by ``width / 32`` (at least 1 channel each)."""
    fields, scaled = preset_fields(
        "minkunet", UNET_PRESETS, preset, in_channels, num_classes, width, stem_kernel
    )
    enc_blocks, dec_blocks = UNET_PRESETS[preset]
    return MinkUNet(
        UNetConfig(
            **fields,
            encoder_channels=scaled(_ENCODER),
            encoder_blocks=enc_blocks,
            decoder_channels=scaled(_DECODER),
            decoder_blocks=dec_blocks,
        )
    )


__all__ = ["UNET_PRESETS", "MinkUNet", "UNetConfig", "minkunet"]
