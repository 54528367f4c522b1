"""lattice: sparse point clouds and sparse voxels on MLX, with a C++ core."""

import mlx.core as _mx  # noqa: F401  (registers mx.array with nanobind before _ext loads)

# The native core (private: not in __all__, reached as lattice._ext by lattice's own
# modules and by tests). Imported first so a broken build fails here, by name.
from lattice import _ext  # noqa: F401
from lattice._version import __version__
from lattice.backends.info import backend_info
from lattice.core import (
    CoordinateManager,
    CoordinateMapKey,
    KernelSpec,
    SparseTensor,
    host_reads,
    sparse_quantize,
)
from lattice.routing.explain import explain

from lattice import core, ops, settings  # noqa: E402  isort: skip

# The native core's settings from the environment, read in one place (lattice/settings.py),
# before any op runs.
settings.configure_native(_ext)

__all__ = [
    "CoordinateManager",
    "CoordinateMapKey",
    "KernelSpec",
    "SparseTensor",
    "__version__",
    "backend_info",
    "explain",
    "host_reads",
    "core",
    "ops",
    "sparse_quantize",
]
