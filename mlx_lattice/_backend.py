"""``backend_info()`` in the documented dict shape, built from ``lattice.backend_info()``."""

from __future__ import annotations

import dataclasses
from typing import Any

import lattice


def backend_info() -> dict[str, Any]:
    """Version and backend capabilities as a plain dict.

    ``{'version': str, 'capabilities': {'cpu': bool, 'metal': bool, 'mlir': bool,
    'cuda': bool}, ...}``, built from ``lattice.backend_info()``: ``cpu`` is lattice's
    compiled CPU backend, ``metal`` / ``cuda`` whether lattice's own Metal / CUDA kernels
    serve the GPU in this process, ``mlir`` is always False (no artifact execution). The
    other fields of lattice's ``BackendInfo`` (``mlx_version``, ``compiled_backends``,
    ``tiers``, ``cpu_threads``, ``blas``, ``gpu``, ``gpu_kernels``, ``platform``) follow as
    extra keys. Diagnostics only: it selects no routes.
    """
    info = lattice.backend_info()
    extra = dataclasses.asdict(info) if dataclasses.is_dataclass(info) else dict(vars(info))
    return {
        **extra,
        "version": info.version,
        "capabilities": {
            "cpu": "cpu" in info.compiled_backends,
            "metal": info.gpu_kernels == "metal",
            "mlir": False,
            "cuda": info.gpu_kernels == "cuda",
        },
    }


__all__ = ["backend_info"]
