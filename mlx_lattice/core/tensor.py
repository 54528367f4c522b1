"""The sparse tensor value type (documented ``mlx_lattice.core.tensor``).

``SparseTensor`` and ``SparseTensorComponents`` are lattice's own classes
(``mlx_lattice.core.tensor.SparseTensor is lattice.SparseTensor``).
``SparseTensor.export_components()`` returns a ``SparseTensorComponents`` (whole
buffers, the int32 ``(1,)`` live-row count, stride, rows per batch member) and
``SparseTensor.from_components`` rebuilds a tensor from one.
"""

from __future__ import annotations

from lattice.core import SparseTensor, SparseTensorComponents

__all__ = ["SparseTensor", "SparseTensorComponents"]
