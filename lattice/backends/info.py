"""What this build of lattice can run on: version, compiled backends, devices."""

from __future__ import annotations

import platform
from dataclasses import dataclass

import mlx.core as mx

from lattice import _ext
from lattice._version import __version__
from lattice.routing.device import capability


@dataclass(frozen=True)
class BackendInfo:
    version: str
    mlx_version: str
    compiled_backends: tuple[str, ...]
    tiers: tuple[str, ...]
    cpu_threads: int
    blas: str
    gpu: str | None
    gpu_kernels: str | None  # the dialect of lattice's GPU kernels the routes take ('cuda', 'metal') or None
    cpu_gemm: str  # the CPU convolutions' GEMM ('blas' or one of lattice's kernels) and why
    cpu_kernels: tuple[str, ...]  # lattice's CPU GEMM kernels this CPU runs (LATTICE_CPU_GEMM may name one)
    platform: str


def backend_info() -> BackendInfo:
    """Version, compiled native backends, the CPU convolutions' GEMM and the devices MLX reports."""
    cap = capability()
    return BackendInfo(
        version=__version__,
        mlx_version=mx.__version__,
        compiled_backends=cap.compiled,
        tiers=tuple(t.value for t in cap.tiers),
        cpu_threads=_ext.num_threads(),
        blas=_ext.blas_vendor(),
        gpu=cap.gpu_name,
        gpu_kernels=None if cap.kernel_backend is None else str(cap.kernel_backend),
        cpu_gemm=f"{cap.cpu_gemm} ({cap.cpu_gemm_reason})" if cap.cpu_gemm_reason else cap.cpu_gemm,
        cpu_kernels=tuple(_ext.conv_kernels()),
        platform=f"{platform.system()} {platform.machine()}",
    )
