"""Relation builders on sparse tensors (documented ``mlx_lattice.ops.relations``).

lattice's own functions, except ``kernel_relation``, an adapter with the documented
defaults (``kernel_size=3, stride=1``; lattice's are ``2, 2``). The raw-array ``build_*``
builders and ``gather_neighbor_features`` are not provided yet and raise
``mlx_lattice._missing.NotProvidedError``; see docs/compat.md.
"""

from __future__ import annotations

from lattice import ops as _ops
from lattice.ops import (
    generative_kernel_relation,
    kernel_offsets,
    knn_relation,
    radius_relation,
    submanifold_kernel_relation,
    target_kernel_relation,
    transposed_kernel_relation,
)
from mlx_lattice._missing import module_getattr


def kernel_relation(x, *, kernel_size=3, stride=1, padding=0, dilation=1):
    """The forward kernel relation of ``x`` (a SparseTensor): output support
    ``unique(floor(coords / stride))``, edges ``i = o*s + k*d - p``.

    Maps to ``lattice.ops.kernel_relation`` with the documented defaults
    (``kernel_size=3, stride=1``; lattice's own defaults are ``kernel_size=2, stride=2``).
    """
    return _ops.kernel_relation(x, kernel_size=kernel_size, stride=stride, padding=padding, dilation=dilation)


__all__ = [
    "generative_kernel_relation",
    "kernel_offsets",
    "kernel_relation",
    "knn_relation",
    "radius_relation",
    "submanifold_kernel_relation",
    "target_kernel_relation",
    "transposed_kernel_relation",
]

__getattr__ = module_getattr(__name__)
