"""Quantized linear module (documented ``mlx_lattice.nn.quantized_feature``): lattice's own
``QuantizedLinear`` with ``from_linear``. It has no ``mode=`` parameter (lattice packs
affine only; the documented default is ``mode='affine'``): see docs/compat.md."""

from __future__ import annotations

from lattice.nn import QuantizedLinear

__all__ = ["QuantizedLinear"]
