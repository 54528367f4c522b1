"""Morton (Z-order) ordering (documented ``mlx_lattice.core.coords.ordering``).

Adapters with the documented code layout: ``morton_codes`` interleaves the low 21 bits
of x, y and z (x in bit 0, y in bit 1, z in bit 2 of each triple) and puts the batch index
in bits 60 and up, uint64 ``(N,)``; ``morton_order`` is the int32 argsort of those codes;
``morton_sort_coords`` returns a :class:`CoordinateOrdering`, which adds the inverse
permutation. lattice's own ``lattice.core.morton_codes`` uses another bit layout (z in
bit 0, with a signed bias) and ``lattice.core.morton_sort_coords`` returns a tuple.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from lattice.core import validate_coords

_SPREAD = (
    (32, 0x1F00000000FFFF),
    (16, 0x1F0000FF0000FF),
    (8, 0x100F00F00F00F00F),
    (4, 0x10C30C30C30C30C3),
    (2, 0x1249249249249249),
)


@dataclass(frozen=True)
class CoordinateOrdering:
    """Coordinates in Morton order: ``coords == input[order]`` and
    ``input == coords[inverse_rows]``."""

    coords: mx.array
    order: mx.array
    inverse_rows: mx.array


def _spread(axis: mx.array) -> mx.array:
    """The low 21 bits of ``axis`` (two's complement) moved to every third bit, uint64."""
    v = mx.bitwise_and(axis.astype(mx.uint32).astype(mx.uint64), mx.array(0x1FFFFF, dtype=mx.uint64))
    for shift, mask in _SPREAD:
        v = mx.bitwise_and(
            mx.bitwise_or(v, mx.left_shift(v, mx.array(shift, dtype=mx.uint64))),
            mx.array(mask, dtype=mx.uint64),
        )
    return v


def morton_codes(coords) -> mx.array:
    """uint64 ``(N,)`` Morton codes of ``(batch, x, y, z)`` rows: x, y, z interleaved
    (x lowest), the batch index shifted to bit 60."""
    validate_coords(coords)
    c = coords.astype(mx.int32)
    one, two = mx.array(1, dtype=mx.uint64), mx.array(2, dtype=mx.uint64)
    code = mx.bitwise_or(_spread(c[:, 1]), mx.left_shift(_spread(c[:, 2]), one))
    code = mx.bitwise_or(code, mx.left_shift(_spread(c[:, 3]), two))
    batch = mx.left_shift(c[:, 0].astype(mx.uint64), mx.array(60, dtype=mx.uint64))
    return mx.bitwise_or(code, batch)


def morton_order(coords) -> mx.array:
    """The int32 permutation sorting ``coords`` by :func:`morton_codes`."""
    return mx.argsort(morton_codes(coords)).astype(mx.int32)


def morton_sort_coords(coords) -> CoordinateOrdering:
    """``coords`` sorted by :func:`morton_codes`, with the permutation and its inverse."""
    order = morton_order(coords)
    return CoordinateOrdering(mx.take(coords, order, axis=0), order, mx.argsort(order).astype(mx.int32))


__all__ = ["CoordinateOrdering", "morton_codes", "morton_order", "morton_sort_coords"]
