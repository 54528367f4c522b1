"""Shared type helpers of the documented API: ``Triple`` and :func:`triple`.

lattice normalises ``int | Sequence[int]`` arguments itself; these are the documented
helpers for user code (small adapters defined here, with no lattice counterpart).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

#: A normalised spatial triple (kernel size, stride, padding, dilation, ...).
Triple = tuple[int, int, int]


def _integral(value, name: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"[triple] {name} must be an int or a sequence of 3 ints, got {value!r}") from None


def triple(value: int | Sequence[int], *, name: str) -> Triple:
    """``value`` as a ``(x, y, z)`` tuple of ints: an int repeats three times, a sequence
    must hold exactly three integers. Raises ``ValueError`` naming ``name`` otherwise."""
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        items = tuple(_integral(v, name) for v in value)
        if len(items) != 3:
            raise ValueError(f"[triple] {name} must be an int or a sequence of 3 ints, got {value!r}")
        return items  # type: ignore[return-value]
    if hasattr(value, "__index__"):
        v = _integral(value, name)
        return (v, v, v)
    raise ValueError(f"[triple] {name} must be an int or a sequence of 3 ints, got {value!r}")


__all__ = ["Triple", "triple"]
