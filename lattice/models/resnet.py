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

from lattice.core.tensor import SparseTensor
from lattice.models.blocks import (
    NetConfig,
    StemNet,
    preset_fields,
    queue_levels,
    run_blocks,
    strided_levels,
)
from lattice.nn.feature import Linear
from lattice.nn.pool import GlobalAvgPool

_STAGES = (32, 64, 128, 256)
RESNET_PRESETS: dict[int, tuple[int, ...]] = {14: (1, 1, 1, 1), 18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}


@dataclass(frozen=True)
class ResNetConfig(NetConfig):
    """Hyper-parameters of :class:`SparseResNet` (what ``model.json`` stores)."""

    stage_channels: tuple[int, ...] = _STAGES
    stage_blocks: tuple[int, ...] = (2, 2, 2, 2)
    name: str = field(default="sparse_resnet", init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        stages, blocks = self._level_lists(("stage_channels", "stage_blocks"))
        if stages != blocks:
            raise ValueError(
                f"[ResNetConfig] stage_channels and stage_blocks need the same length, got {stages} and {blocks}"
            )


class SparseResNet(StemNet):
    """Sparse ResNet + global average pooling: ``model(x)`` gives ``(B, num_classes)`` logits."""

    _config = ResNetConfig

    def __init__(self, config: ResNetConfig) -> None:
        super().__init__(config)
        c = config
        self.down, self.stages, widths = strided_levels(c.stem_channels, c.stage_channels, c.stage_blocks)
        self.pool = GlobalAvgPool()
        self.head = Linear(widths[-1], c.num_classes)

    def features(self, x: SparseTensor) -> SparseTensor:
        """The last stage's sparse feature map (before pooling)."""
        queue_levels(x, self.down)
        y = self.stem(x)
        for down, blocks in zip(self.down, self.stages, strict=True):
            y = run_blocks(down(y), blocks)
        return y

    def __call__(self, x: SparseTensor, *, batch_size: int | None = None) -> mx.array:
        return self.head(self.pool(self.features(x), batch_size=batch_size))


def sparse_resnet(
    preset: int, in_channels: int, num_classes: int, *, width: int = 32, stem_kernel: int = 3
) -> SparseResNet:
    """Sparse ResNet14 / 18 / 34 classifier with widths scaled by ``width / 32``."""
    fields, scaled = preset_fields(
        "sparse_resnet", RESNET_PRESETS, preset, in_channels, num_classes, width, stem_kernel
    )
    return SparseResNet(
        ResNetConfig(**fields, stage_channels=scaled(_STAGES), stage_blocks=RESNET_PRESETS[preset])
    )


__all__ = ["RESNET_PRESETS", "ResNetConfig", "SparseResNet", "sparse_resnet"]
