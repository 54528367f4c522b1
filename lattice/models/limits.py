"""Bounds on what a model bundle may ask for, checked before anything is built or read.

A bundle is untrusted input: ``model.json`` decides how large a network ``load_model``
builds, and ``weights.safetensors`` how much it reads. Every architecture hyper-parameter
must be a JSON integer (not a float such as ``1e9``, not a bool) in the range that real
sparse networks use; the whole configuration may imply at most :data:`MAX_VALUES`
parameter values; ``model.json`` and the weight file's JSON header are at most
:data:`MAX_JSON_BYTES` long and nested at most :data:`MAX_JSON_DEPTH` deep.

==================================================  ==========================
key (``architecture.config.*``)                      allowed
==================================================  ==========================
``in_channels``, ``num_classes``, ``stem_channels``  integer in 1..4096
``stem_kernel``                                      odd integer in 1..9
``encoder_channels``, ``decoder_channels``,          1..8 entries (levels /
``stage_channels``                                   stages), each 1..4096
``encoder_blocks``, ``decoder_blocks``,              1..8 entries, each 1..64
``stage_blocks``
==================================================  ==========================

Block counts start at 1: the first block of a level is the one that changes its width.
The bounds apply to bundles only; configs built in code (``UNetConfig(...)``) are not capped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lattice.models.spec import BundleError

MAX_CHANNELS = 4096
MAX_KERNEL = 9
MAX_BLOCKS = 64
MAX_LEVELS = 8
MAX_VALUES = 2**29  # parameter values a configuration may imply (2 GiB of float32)
MAX_JSON_BYTES = 16 * 2**20  # model.json and the safetensors header
MAX_JSON_DEPTH = 64  # nesting of objects and lists in model.json
REQUIRED = ("in_channels", "num_classes")


@dataclass(frozen=True)
class IntRange:
    """An integer hyper-parameter (or, with ``levels``, a list of 1..MAX_LEVELS of them)."""

    low: int
    high: int
    odd: bool = False
    levels: bool = False

    @property
    def rule(self) -> str:
        what = f"{'an odd' if self.odd else 'an'} integer in {self.low}..{self.high}"
        return f"a list of 1..{MAX_LEVELS} entries, each {what}" if self.levels else what

    def fits(self, v: Any) -> bool:
        ok = isinstance(v, int) and not isinstance(v, bool) and self.low <= v <= self.high
        return ok and (not self.odd or v % 2 == 1)


_WIDTH = IntRange(1, MAX_CHANNELS)
_WIDTHS = IntRange(1, MAX_CHANNELS, levels=True)
_BLOCKS = IntRange(1, MAX_BLOCKS, levels=True)
CONFIG_BOUNDS: dict[str, IntRange] = {
    "in_channels": _WIDTH,
    "num_classes": _WIDTH,
    "stem_channels": _WIDTH,
    "stem_kernel": IntRange(1, MAX_KERNEL, odd=True),
    "encoder_channels": _WIDTHS,
    "encoder_blocks": _BLOCKS,
    "decoder_channels": _WIDTHS,
    "decoder_blocks": _BLOCKS,
    "stage_channels": _WIDTHS,
    "stage_blocks": _BLOCKS,
}


def shown(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters (hostile values can be long)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def check_config(config: Any, fields: set[str], where: str = "architecture.config") -> dict[str, Any]:
    """``config`` (the parsed JSON object) if every key is a known field of the architecture
    and every value is in :data:`CONFIG_BOUNDS`; else a :class:`BundleError` naming the key."""
    if not isinstance(config, dict):
        raise BundleError(f"{where} must be a JSON object, got {type(config).__name__}")
    unknown = sorted(set(config) - fields)
    if unknown:
        raise BundleError(f"{where} has unknown keys {unknown}; allowed: {sorted(fields)}")
    missing = [k for k in REQUIRED if k not in config]
    if missing:
        raise BundleError(f"{where} is missing {missing}")
    for key, value in config.items():
        bound = CONFIG_BOUNDS[key]
        if bound.levels:
            ok = isinstance(value, list) and 1 <= len(value) <= MAX_LEVELS and all(map(bound.fits, value))
        else:
            ok = bound.fits(value)
        if not ok:
            raise BundleError(f"{where}.{key} must be {bound.rule}, got {shown(value)}")
    return config


def check_depth(doc: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """A :class:`BundleError` naming the first path nested deeper than ``limit`` (iterative:
    a deep document cannot exhaust the stack here)."""
    stack = [(doc, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if depth > limit:
            where = path if len(path) <= 60 else f"{path[:57]}..."
            raise BundleError(f"{where or 'the document'} is nested more than {limit} levels deep")
        if isinstance(node, dict):
            stack.extend((v, f"{path}.{k}" if path else str(k), depth + 1) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{path}[{i}]", depth + 1) for i, v in enumerate(node))


__all__ = [
    "CONFIG_BOUNDS",
    "MAX_BLOCKS",
    "MAX_CHANNELS",
    "MAX_JSON_BYTES",
    "MAX_JSON_DEPTH",
    "MAX_KERNEL",
    "MAX_LEVELS",
    "MAX_VALUES",
    "IntRange",
    "check_config",
    "check_depth",
    "shown",
]
