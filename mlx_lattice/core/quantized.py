"""Packed affine int4 / int8 weights (documented ``mlx_lattice.core.quantized``).

``QuantizedWeight`` and ``quantize_weight`` are lattice's own; ``dequantize_weight`` is
an adapter (the documented argument is named ``weight``). lattice's ``QuantizedWeight``
fields differ from the documented ones (``data`` for ``weight``, a logical ``shape``,
layouts ``'linear'`` / ``'dense'`` / ``'mapped'``): see docs/compat.md.
"""

from __future__ import annotations

import mlx.core as mx

from lattice.core import QuantizedWeight, quantize_weight
from lattice.core import dequantize_weight as _dequantize_weight
from mlx_lattice._missing import module_getattr


def dequantize_weight(weight: QuantizedWeight, *, dtype: mx.Dtype = mx.float32) -> mx.array:
    """The float weight a ``QuantizedWeight`` packs, in its logical shape.

    Maps to ``lattice.core.dequantize_weight(weight, dtype=dtype)`` (whose first
    argument is named ``q``); ``dtype`` is lattice's addition.
    """
    return _dequantize_weight(weight, dtype=dtype)


__all__ = ["QuantizedWeight", "dequantize_weight", "quantize_weight"]

__getattr__ = module_getattr(__name__)
