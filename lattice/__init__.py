"""lattice: sparse point clouds and sparse voxels on MLX, with a C++ core.

``import lattice`` loads nothing heavy: each name below (and each subpackage,
``lattice.nn``, ``lattice.io``, ...) is imported the first time it is used, so a command
that only reads a file header (``lattice info``) never loads MLX or the native core. The
native core (``lattice._ext``, private: not in ``__all__``) configures itself from
``lattice.settings`` as it loads, and the backends register their routes the first time
an op dispatches (``lattice.routing.registry``).
"""

from __future__ import annotations

import importlib

from lattice._version import __version__

# public name -> the module that defines it
_LAZY = {
    "CoordinateManager": "lattice.core",
    "CoordinateMapKey": "lattice.core",
    "KernelSpec": "lattice.core",
    "SparseTensor": "lattice.core",
    "host_reads": "lattice.core",
    "sparse_quantize": "lattice.core",
    "backend_info": "lattice.backends.info",
    "explain": "lattice.routing.explain",
}

_SUBMODULES = frozenset(
    {
        "_ext",
        "backends",
        "core",
        "data",
        "io",
        "models",
        "nn",
        "ops",
        "pipeline",
        "render",
        "routing",
        "settings",
    }
)

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


def __getattr__(name: str):
    """The lazily imported names and subpackages (PEP 562); each is imported once, then
    kept as a module attribute."""
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif name in _SUBMODULES:
        value = importlib.import_module(f"{__name__}.{name}")
    else:
        raise AttributeError(f"module 'lattice' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | _SUBMODULES - {"_ext"})
