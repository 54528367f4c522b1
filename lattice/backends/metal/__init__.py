"""The ``metal.*`` routes: lattice's GPU kernels in their Metal dialect.

NEVER RUN. These entry points (``metal/*.metal``) have never been compiled or run on
Apple hardware. The routing layer takes them only under the Metal tier with
``LATTICE_METAL_KERNELS=1`` (experimental; off by default, when the Metal tier takes
MLX's own kernels or the CPU core).

Each ``metal.<algorithm>`` route is served by the same Python glue as
``cuda.<algorithm>`` (``lattice.backends.cuda``): ``lattice.backends.kernels.dialect``
builds the kernels from the Metal entry points when the process routes to them. The
tensor-core convolution has no Metal entry point (``kernels.CUDA_ONLY``): the implicit
GEMM then takes its float32-FMA kernel.
"""

from lattice.backends import cuda  # noqa: F401  (registers the cuda.* implementations first)
from lattice.routing.registry import tables

for _table in tables():
    for _twin in _table.twins:
        if _twin.cuda in _table.impls:
            _table.register(_twin.metal, _table.impls[_twin.cuda])
