"""Relation builders over raw coordinate arrays (documented ``mlx_lattice.core.coords.builders``).

``kernel_offsets`` is lattice's own (odd sizes centred, even sizes from 0, z fastest).
The raw-array ``build_*`` builders and implicit-GEMM views are not provided yet: lattice
builds relations from SparseTensors (``mlx_lattice.ops.kernel_relation`` and friends).
They raise ``mlx_lattice._missing.NotProvidedError``; see docs/compat.md.

The ``Native*`` aliases name the tuple shapes of the documented native builders.
"""

from __future__ import annotations

from typing import TypeAlias

import mlx.core as mx

from lattice.core import kernel_offsets
from mlx_lattice._missing import module_getattr

NativeKernelRelation: TypeAlias = tuple[
    mx.array, mx.array, mx.array, mx.array, mx.array, mx.array, mx.array, mx.array, mx.array, mx.array
]
NativeNeighborRelation: TypeAlias = tuple[mx.array, mx.array, mx.array, mx.array, mx.array, mx.array]
NativeImplicitGemmView: TypeAlias = tuple[mx.array, mx.array]

__all__ = ["NativeImplicitGemmView", "NativeKernelRelation", "NativeNeighborRelation", "kernel_offsets"]

__getattr__ = module_getattr(__name__)
