"""Sparse ResNet classifier: one label per point cloud (batch member).

- stem: a submanifold convolution (``stem_kernel``) -> BN -> ReLU;
- stage ``i``: a ``k=2, s=2`` strided convolution (halves the resolution) -> BN -> ReLU,
  then ``stage_blocks[i]`` basic blocks to ``stage_channels[i]``;
- global average pooling over each batch member's voxels, then a ``Linear`` head.

``model(x)`` returns dense logits ``(B, num_classes)``, ``B = x.batch_size``.
``sparse_resnet(14 | 18 | 34, ...)`` builds the presets (ResNet block counts
``(1,1,1,1)``, ``(2,2,2,2)``, ``(3,4,6,3)``), widths scaled by ``width / 32``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import mlx.nn as nn

from lattice.core.tensor import SparseTensor
from lattice.models.blocks import ConvBNReLU, basic_blocks, config_dict, positive_int, positive_ints
from lattice.nn.feature import Linear
from lattice.nn.pool import GlobalAvgPool

_STAGES = (32, 64, 128, 256)
RESNET_PRESETS: dict[int, tuple[int, ...]] = {14: (1, 1, 1, 1), 18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}


@dataclass(frozen=True)
class ResNetConfig:
    """Hyper-parameters of :class:`SparseResNet` (what ``model.json`` stores)."""

    in_channels: int
    num_classes: int
    stem_channels: int = 32
    stem_kernel: int = 3
    stage_channels: tuple[int, ...] = _STAGES
    stage_blocks: tuple[int, ...] = (2, 2, 2, 2)
    name: str = field(default="sparse_resnet", init=False)

    def __post_init__(self) -> None:
        op = "ResNetConfig"
        for key in ("in_channels", "num_classes", "stem_channels", "stem_kernel"):
            positive_int(getattr(self, key), key, op)
        if self.stem_kernel % 2 == 0:
            raise ValueError(f"[{op}] stem_kernel must be odd, got {self.stem_kernel}")
        for key in ("stage_channels", "stage_blocks"):
            object.__setattr__(self, key, positive_ints(getattr(self, key), key, op))
        if len(self.stage_channels) != len(self.stage_blocks):
            raise ValueError(
                f"[{op}] stage_channels and stage_blocks need the same length, got "
                f"{len(self.stage_channels)} and {len(self.stage_blocks)}"
            )

    def to_dict(self) -> dict:
        """JSON-ready hyper-parameters (lists for tuples, without ``name``)."""
        return config_dict(self)


class SparseResNet(nn.Module):
    """Sparse ResNet + global average pooling: ``model(x)`` gives ``(B, num_classes)`` logits."""

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__()
        if not isinstance(config, ResNetConfig):
            raise TypeError(f"[SparseResNet] config must be a ResNetConfig, got {type(config).__name__}")
        self.config = config
        c = config
        self.stem = ConvBNReLU(c.in_channels, c.stem_channels, kernel_size=c.stem_kernel)
        self.down = []
        self.stages = []
        width = c.stem_channels
        for ch, n in zip(c.stage_channels, c.stage_blocks, strict=True):
            self.down.append(ConvBNReLU(width, width, kernel_size=2, stride=2))
            self.stages.append(basic_blocks(width, ch, n))
            width = ch
        self.pool = GlobalAvgPool()
        self.head = Linear(width, c.num_classes)

    def features(self, x: SparseTensor) -> SparseTensor:
        """The last stage's sparse feature map (before pooling)."""
        y = self.stem(x)
        for down, blocks in zip(self.down, self.stages, strict=True):
            y = down(y)
            for block in blocks:
                y = block(y)
        return y

    def __call__(self, x: SparseTensor, *, batch_size: int | None = None) -> mx.array:
        return self.head(self.pool(self.features(x), batch_size=batch_size))


def sparse_resnet(
    preset: int, in_channels: int, num_classes: int, *, width: int = 32, stem_kernel: int = 3
) -> SparseResNet:
    """Sparse ResNet14 / 18 / 34 classifier with widths scaled by ``width / 32``."""
    if preset not in RESNET_PRESETS:
        raise ValueError(f"[sparse_resnet] preset must be one of {sorted(RESNET_PRESETS)}, got {preset!r}")
    scale = positive_int(width, "width", "sparse_resnet") / 32
    return SparseResNet(
        ResNetConfig(
            in_channels=in_channels,
            num_classes=num_classes,
            stem_channels=max(1, round(32 * scale)),
            stem_kernel=stem_kernel,
            stage_channels=tuple(max(1, round(v * scale)) for v in _STAGES),
            stage_blocks=RESNET_PRESETS[preset],
        )
    )


__all__ = ["RESNET_PRESETS", "ResNetConfig", "SparseResNet", "sparse_resnet"]
