"""Packed affine int4 / int8 weights (documented ``mlx_lattice.core.quantized``).

``QuantizedWeight`` and ``quantize_weight`` are lattice's own; ``dequantize_weight`` is
an adapter (the documented argument is named ``weight``). lattice's ``QuantizedWeight``
fields differ from the documented ones (``data`` for ``weight``, a logical ``shape``);
it has the documented ``weight``, ``in_channels``, ``out_channels``, ``kernel_size``,
``storage_in_channels``, ``is_pointwise`` and ``nbytes`` as properties.

``QuantizedWeightLayout`` is the documented type of the layout names. lattice names
the same three layouts differently, one for one (its ``layout`` field holds lattice's
names): ``'linear'`` ``(C_out, C_in)`` is ``'linear'``, ``'kernel_major'``
``(K, C_in, C_out)`` is lattice's ``'mapped'`` and ``'dense_5d'``
``(C_out, Kx, Ky, Kz, C_in)`` is lattice's ``'dense'`` (:data:`LATTICE_LAYOUTS`). See
docs/compat.md.
"""

from __future__ import annotations

from typing import Literal, TypeAlias

import mlx.core as mx

from lattice.core import QuantizedWeight, quantize_weight
from lattice.core import dequantize_weight as _dequantize_weight

#: The documented layout names of a packed weight.
QuantizedWeightLayout: TypeAlias = Literal["linear", "kernel_major", "dense_5d"]

#: Documented layout name -> lattice's name of the same layout (``QuantizedWeight.layout``).
LATTICE_LAYOUTS: dict[str, str] = {"linear": "linear", "kernel_major": "mapped", "dense_5d": "dense"}


def dequantize_weight(weight: QuantizedWeight, *, dtype: mx.Dtype = mx.float32) -> mx.array:
    """The float weight a ``QuantizedWeight`` packs, in its logical shape.

    Maps to ``lattice.core.dequantize_weight(weight, dtype=dtype)`` (whose first
    argument is named ``q``); ``dtype`` is lattice's addition.
    """
    return _dequantize_weight(weight, dtype=dtype)


__all__ = ["QuantizedWeight", "QuantizedWeightLayout", "dequantize_weight", "quantize_weight"]
