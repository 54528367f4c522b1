"""lattice: sparse point clouds and sparse voxels on MLX, with a C++ core."""

import mlx.core as _mx  # noqa: F401  (registers mx.array with nanobind before _ext loads)

from lattice import _ext
from lattice._version import __version__
from lattice.backends.info import backend_info
from lattice.core import (
    CoordinateManager,
    CoordinateMapKey,
    KernelSpec,
    SparseTensor,
    host_reads,
    lazy_rows,
    sparse_quantize,
)
from lattice.routing.explain import explain

from lattice import core, ops  # noqa: E402  isort: skip

__all__ = [
    "CoordinateManager",
    "CoordinateMapKey",
    "KernelSpec",
    "SparseTensor",
    "__version__",
    "_ext",
    "backend_info",
    "explain",
    "host_reads",
    "lazy_rows",
    "core",
    "ops",
    "sparse_quantize",
]
