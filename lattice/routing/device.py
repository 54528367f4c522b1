"""Device capability, detected once per process (no allocation, no kernel launch)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import mlx.core as mx

from lattice import settings
from lattice.routing.types import Backend, Route, RouteBuilder, RouteId, Tier

# lattice's own GPU kernels are one set of sources in two dialects (docs/backend.md): CUDA,
# run and tested on an H200, and Metal, never compiled or run on Apple hardware — routed
# under the Metal tier only when this variable is 1 (experimental).
METAL_KERNELS_ENV = settings.METAL_KERNELS


@dataclass(frozen=True)
class Capability:
    """What this process can run: tiers present and the backends this build compiled."""

    tiers: tuple[Tier, ...]
    compiled: tuple[str, ...]
    gpu_name: str | None = None
    metal_kernels: bool = False  # LATTICE_METAL_KERNELS=1
    cpu_gemm: str = "blas"  # the CPU convolutions' GEMM: "blas" or one of lattice's kernels
    cpu_gemm_reason: str = ""  # why (what the CPU runs, or LATTICE_CPU_GEMM)

    def has(self, tier: Tier) -> bool:
        return tier in self.tiers

    @property
    def kernel_backend(self) -> Backend | None:
        """The dialect of lattice's GPU kernels the routes take on the GPU: 'cuda' under the
        CUDA tier, 'metal' under the Metal tier when opted in, else None."""
        if self.has(Tier.GPU_CUDA):
            return Backend.CUDA
        if self.has(Tier.GPU_METAL) and self.metal_kernels:
            return Backend.METAL
        return None

    @property
    def has_gpu(self) -> bool:
        return self.has(Tier.GPU_CUDA) or self.has(Tier.GPU_METAL)


def gpu_kernels(rb: RouteBuilder, device: str, algorithm: str, cap: Capability) -> Backend | None:
    """The backend of lattice's GPU kernels for a request on ``device`` (cuda or metal),
    or None — after recording on ``rb`` why ``algorithm`` cannot run there."""
    if device != "gpu":
        return None
    if cap.kernel_backend is not None:
        return cap.kernel_backend
    if cap.has(Tier.GPU_METAL):
        rb.reject(
            RouteId(Backend.METAL, algorithm),
            f"lattice's Metal kernels are off: never run on Apple hardware ({METAL_KERNELS_ENV}=1 routes "
            "them, experimental)",
        )
    else:
        rb.reject(RouteId(Backend.GPU, algorithm), NO_GPU)
    return None


NO_GPU = "no GPU device in this process"


def take_kernels(rb: RouteBuilder, device: str, routes, cap: Capability, reason: str) -> Route | None:
    """The route of lattice's GPU kernels ``routes`` (a ``KernelRoutes``) for a request on
    ``device``, taken with ``reason``; None (the rejection recorded) where they cannot run."""
    backend = gpu_kernels(rb, device, routes.algorithm, cap)
    return None if backend is None else rb.take(routes[backend], reason)


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
    # Native kernels compiled into lattice._ext: the CPU backend (the GPU kernels are
    # compiled at first use by MLX).
    gemm, why = cpu_gemm_kernel()
    return Capability(tuple(tiers), ("cpu",), name, settings.metal_kernels(), gemm, why)


# lattice's CPU GEMM kernels that round float32 operands, with what they do: taken only where
# LATTICE_CPU_GEMM names them.
ROUNDING_KERNELS = {
    "avx512_bf16": "products of operands rounded to bfloat16 (nearest, ties to even), sums in float32, "
    "VDPBF16PS on register tiles",
    "amx_bf16": "products of operands rounded to bfloat16 (nearest, ties to even), sums in float32, "
    "TDPBF16PS on AMX tiles",
}


def cpu_gemm_kernel() -> tuple[str, str]:
    """The GEMM kernel of the CPU convolutions and why: ``LATTICE_CPU_GEMM`` where it names
    one (a kernel this CPU cannot run is a ``ValueError``), else the best of lattice's float32
    kernels this CPU runs (``lattice._ext.conv_kernels()``; ``avx512_bf16`` and ``amx_bf16`` round
    the operands to bfloat16 and are taken only when named), else the BLAS."""
    from lattice import _ext

    available = list(_ext.conv_kernels())
    runs = [k for k in available if k not in ROUNDING_KERNELS]
    choice = settings.cpu_gemm()
    if choice == "blas":
        return "blas", f"{settings.CPU_GEMM}=blas"
    if choice != "auto":
        if choice not in available:
            raise ValueError(
                f"[routing] {settings.CPU_GEMM}={choice}: this CPU runs lattice's kernels "
                f"{available or 'none'} (or blas)"
            )
        return choice, f"{settings.CPU_GEMM}={choice}"
    if runs:
        return runs[0], f"the CPU runs lattice's {'/'.join(runs)} kernels; {runs[0]} is the widest"
    return "blas", "this CPU runs none of lattice's GEMM kernels (AVX2 + FMA or AVX-512F, x86-64)"


def requested_device(device) -> str:
    """'cpu' or 'gpu' for an explicit device, else MLX's default device."""
    if device is None:
        device = mx.default_device()
    if isinstance(device, str):
        if device not in ("cpu", "gpu"):
            raise ValueError(f"[routing] device must be 'cpu' or 'gpu', got {device!r}")
        return device
    return "gpu" if device.type == mx.DeviceType.gpu else "cpu"
