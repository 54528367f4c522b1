"""The sparse tensor value type (documented ``mlx_lattice.core.tensor``).

``SparseTensor`` is lattice's own class (``mlx_lattice.core.tensor.SparseTensor is
lattice.SparseTensor``). ``SparseTensorComponents`` is not provided yet: see
``mlx_lattice._missing`` and docs/compat.md.
"""

from __future__ import annotations

from lattice.core import SparseTensor
from mlx_lattice._missing import module_getattr

__all__ = ["SparseTensor"]

__getattr__ = module_getattr(__name__)
