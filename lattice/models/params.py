"""The tensors a network's configuration implies, computed without building the network.

:func:`parameter_specs` gives, for a :class:`~lattice.models.UNetConfig` or
:class:`~lattice.models.ResNetConfig` and an optional :class:`~lattice.models.Quantization`,
every parameter path of the module tree (``encoder.1.0.conv2.weight``) with its shape and
kind, exactly as ``tree_flatten(model.parameters())`` would list them once the model is
built (and quantized). ``load_model`` checks the weight file's header against it before a
single module exists, so a bundle cannot make it allocate a network that its file does
not hold. ``tests/test_hostile_bundles.py`` compares it with the real module trees.

Kinds: ``float`` (stored as float32, float16 or bfloat16; loaded as float32), ``packed``
(uint32 words of a quantized weight) and ``scale`` (its per-group scales and biases,
stored as any float, loaded as float16 like :func:`lattice.core.quantized.quantize_weight`
makes them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lattice.core.quantized import default_group_size
from lattice.models.resnet import ResNetConfig
from lattice.models.spec import Quantization
from lattice.models.unet import UNetConfig

KINDS = ("float", "packed", "scale")


@dataclass(frozen=True)
class TensorSpec:
    """One parameter: its shape and kind (``float``, ``packed`` or ``scale``)."""

    shape: tuple[int, ...]
    kind: str = "float"

    @property
    def size(self) -> int:
        """Number of values."""
        return math.prod(self.shape)


class _Specs:
    """Collects the parameters of the blocks of :mod:`lattice.models.blocks`, in module order."""

    def __init__(self, quant: Quantization | None) -> None:
        self.quant = quant
        self.out: dict[str, TensorSpec] = {}

    def _weight(self, prefix: str, rows: tuple[int, ...], c_in: int) -> None:
        q = self.quant
        if q is None:
            self.out[f"{prefix}.weight"] = TensorSpec((*rows, c_in))
            return
        group = q.group_size or default_group_size(c_in)
        padded = math.ceil(c_in / group) * group
        self.out[f"{prefix}.weight"] = TensorSpec((*rows, padded * q.bits // 32), "packed")
        self.out[f"{prefix}.scales"] = TensorSpec((*rows, padded // group), "scale")
        self.out[f"{prefix}.biases"] = TensorSpec((*rows, padded // group), "scale")

    def conv(self, prefix: str, c_in: int, c_out: int, k: int) -> None:
        self._weight(prefix, (c_out, k, k, k), c_in)  # dense (C_out, Kx, Ky, Kz, C_in), no bias

    def norm(self, prefix: str, c: int) -> None:
        for name in ("weight", "bias", "running_mean", "running_var"):
            self.out[f"{prefix}.{name}"] = TensorSpec((c,))

    def linear(self, prefix: str, c_in: int, c_out: int) -> None:
        self._weight(prefix, (c_out,), c_in)
        self.out[f"{prefix}.bias"] = TensorSpec((c_out,))

    def conv_bn(self, prefix: str, c_in: int, c_out: int, k: int) -> None:
        self.conv(f"{prefix}.conv", c_in, c_out, k)
        self.norm(f"{prefix}.norm", c_out)

    def blocks(self, prefix: str, c_in: int, c_out: int, count: int) -> None:
        for i in range(count):
            p, c = f"{prefix}.{i}", c_in if i == 0 else c_out
            self.conv(f"{p}.conv1", c, c_out, 3)
            self.norm(f"{p}.norm1", c_out)
            self.conv(f"{p}.conv2", c_out, c_out, 3)
            self.norm(f"{p}.norm2", c_out)
            if c != c_out:
                self.conv(f"{p}.proj", c, c_out, 1)
                self.norm(f"{p}.proj_norm", c_out)


def _unet(s: _Specs, c: UNetConfig) -> None:
    s.conv_bn("stem", c.in_channels, c.stem_channels, c.stem_kernel)
    width, skips = c.stem_channels, [c.stem_channels]
    for i, (ch, n) in enumerate(zip(c.encoder_channels, c.encoder_blocks, strict=True)):
        s.conv_bn(f"down.{i}", width, width, 2)
        s.blocks(f"encoder.{i}", width, ch, n)
        width = ch
        skips.append(ch)
    for i, (ch, n) in enumerate(zip(c.decoder_channels, c.decoder_blocks, strict=True)):
        s.conv(f"decoder.{i}.up", width, ch, 2)
        s.norm(f"decoder.{i}.norm", ch)
        s.blocks(f"decoder.{i}.blocks", ch + skips[-2 - i], ch, n)
        width = ch
    s.linear("head", width, c.num_classes)


def _resnet(s: _Specs, c: ResNetConfig) -> None:
    s.conv_bn("stem", c.in_channels, c.stem_channels, c.stem_kernel)
    width = c.stem_channels
    for i, (ch, n) in enumerate(zip(c.stage_channels, c.stage_blocks, strict=True)):
        s.conv_bn(f"down.{i}", width, width, 2)
        s.blocks(f"stages.{i}", width, ch, n)
        width = ch
    s.linear("head", width, c.num_classes)


def parameter_specs(
    config: UNetConfig | ResNetConfig, quantization: Quantization | None = None
) -> dict[str, TensorSpec]:
    """Every parameter path of the network ``config`` describes -> its :class:`TensorSpec`
    (packed shapes when ``quantization`` is given). Builds nothing; microseconds per tensor."""
    s = _Specs(quantization)
    if isinstance(config, UNetConfig):
        _unet(s, config)
    elif isinstance(config, ResNetConfig):
        _resnet(s, config)
    else:
        raise TypeError(
            f"[parameter_specs] expected a UNetConfig or ResNetConfig, got {type(config).__name__}"
        )
    return s.out


__all__ = ["KINDS", "TensorSpec", "parameter_specs"]
