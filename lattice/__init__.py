"""lattice: sparse point clouds and sparse voxels on MLX, with a C++ core.

``import lattice`` loads nothing heavy: each name below (and each subpackage,
``lattice.nn``, ``lattice.io``, ...) is imported the first time it is used, so a command
that only reads a file header (``lattice info``) never loads MLX or the native core. The
native core (``lattice._ext``, private: not in ``__all__``) configures itself from
``lattice.settings`` as it loads, and the backends register their routes the first time
an op dispatches (``lattice.routing.registry``).
"""

from __future__ import annotations

from lattice._lazy import lazy_attributes
from lattice._version import __version__

# public name -> the module that defines it; subpackages by their own name
_NAMES = {
    "CoordinateManager": "lattice.core",
    "CoordinateMapKey": "lattice.core",
    "DTypeError": "lattice.errors",
    "KernelSpec": "lattice.core",
    "SparseTensor": "lattice.core",
    "host_reads": "lattice.core",
    "sparse_quantize": "lattice.core",
    "backend_info": "lattice.backends.info",
    "explain": "lattice.routing.explain",
}
_SUBPACKAGES = (
    "_ext", "backends", "core", "data", "errors", "io", "models", "nn", "ops", "pipeline", "render", "routing", "settings", "viewer",
)  # fmt: skip

__all__ = [
    "CoordinateManager",
    "CoordinateMapKey",
    "DTypeError",
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

__getattr__, __dir__ = lazy_attributes(
    __name__, globals(), {**_NAMES, **{name: f"{__name__}.{name}" for name in _SUBPACKAGES}}
)
