"""Device capability, detected once per process (no allocation, no kernel launch)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import mlx.core as mx

from lattice.routing.types import Tier


@dataclass(frozen=True)
class Capability:
    """What this process can run: tiers present and the backends this build compiled."""

    tiers: tuple[Tier, ...]
    compiled: tuple[str, ...]
    gpu_name: str | None = None

    def has(self, tier: Tier) -> bool:
        return tier in self.tiers


@functools.cache
def capability() -> Capability:
    tiers = [Tier.CPU]
    name = None
    if hasattr(mx, "cuda") and mx.cuda.is_available():
        tiers.append(Tier.GPU_CUDA)
        name = "cuda"
    elif mx.metal.is_available():
        tiers.append(Tier.GPU_METAL)
        # The Metal tier is refined by GPU family (never run on Apple hardware: see docs/backend.md).
        try:
            name = "metal:" + str(mx.metal.device_info().get("architecture", "unknown"))
        except Exception:  # noqa: BLE001  (device_info differs across MLX builds)
            name = "metal"
    # Native kernels compiled into lattice._ext: the CPU backend only, for now.
    return Capability(tuple(tiers), ("cpu",), name)


def requested_device(device) -> str:
    """'cpu' or 'gpu' for an explicit device, else MLX's default device."""
    if device is None:
        device = mx.default_device()
    if isinstance(device, str):
        if device not in ("cpu", "gpu"):
            raise ValueError(f"[routing] device must be 'cpu' or 'gpu', got {device!r}")
        return device
    return "gpu" if device.type == mx.DeviceType.gpu else "cpu"
