"""The documented ``mlx_lattice`` API (mlx-lattice 0.6.3's module layout), served by lattice.

Real modules mirror the documented layout — :mod:`mlx_lattice.core` (``tensor``,
``coords.*``, ``relations.*``, ``quantized``, ``types``), :mod:`mlx_lattice.ops`
(``conv``, ``pool``, ``feature``, ``tensor``, ``coords``, ``relations``,
``quantization``) and :mod:`mlx_lattice.nn` (``conv``, ``pool``, ``feature``,
``quantized_conv``, ``quantized_feature``). Each name is lattice's own object
(``mlx_lattice.SparseTensor is lattice.SparseTensor``) or a thin adapter where the
documented signature differs; there is no second implementation.

Documented names lattice does not provide yet, and the out-of-scope MLIR artifact and
entropy-coding modules, raise ``mlx_lattice._missing.NotProvidedError`` (an
``ImportError``) that says so. The list, and what differs on purpose, is in
docs/compat.md.
"""

from __future__ import annotations

from lattice import __version__
from mlx_lattice import core, nn, ops
from mlx_lattice._backend import backend_info
from mlx_lattice._missing import module_getattr
from mlx_lattice.core import (
    QuantizedWeight,
    SparseTensor,
    SparseTensorComponents,
    dequantize_weight,
    quantize_weight,
)

__all__ = [
    "QuantizedWeight",
    "SparseTensor",
    "SparseTensorComponents",
    "__version__",
    "backend_info",
    "core",
    "dequantize_weight",
    "nn",
    "ops",
    "quantize_weight",
]

__getattr__ = module_getattr(__name__)
