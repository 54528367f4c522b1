"""mlx-lattice 0.6.3's offsets for the transposed family, over lattice's transposed ops.

0.6.3 numbers the kernel offsets of every transposed-family op (``conv_transpose3d``,
``generative_conv_transpose3d``, their normalised forms, ``pool_transpose3d``) from 0 on
every axis: ``fine = coarse * stride + k * dilation - padding`` with ``k`` in
``0 .. K-1``. lattice centres the offsets of odd kernel axes (``k - (K-1)/2``), as both
libraries do for forward and submanifold kernels. The weight rows are the same (``(x, y,
z)`` positions, z fastest); only the support moves.

On an odd axis with ``padding >= (K-1)/2 * dilation`` lattice's ``padding - (K-1)/2 *
dilation`` is the same support, and the call is lattice's own. Otherwise lattice runs
with padding 0, which lands ``shift = (K-1)/2 * dilation - padding`` rows short: a
generated support is moved by ``+shift`` (a new set of the input's coordinate manager),
and an explicit target is handed to lattice moved by ``-shift``, the result coming back
on the caller's target. This module is that one translation; the public adapters are in
:mod:`mlx_lattice.ops.conv`, :mod:`mlx_lattice.ops.pool` and :mod:`mlx_lattice.nn`.
"""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

from lattice.core._checks import int_triple
from lattice.core.tensor import SparseTensor
from lattice.ops.relations import _target

Triple = tuple[int, int, int]


def indexed_geometry(kernel_size, padding, dilation, op: str) -> tuple[Triple, Triple]:
    """``(lattice padding, shift)`` that give 0.6.3's support for this kernel."""
    size = int_triple(kernel_size, "kernel_size", op, minimum=1)
    pad = int_triple(padding, "padding", op, minimum=0)
    rate = int_triple(dilation, "dilation", op, minimum=1)
    lattice_pad, shift = [], []
    for k, p, d in zip(size, pad, rate, strict=True):
        centre = (k - 1) // 2 * d if k % 2 else 0
        lattice_pad.append(max(p - centre, 0))
        shift.append(max(centre - p, 0))
    return tuple(lattice_pad), tuple(shift)


def _moved(coords: mx.array, shift: Triple, sign: int) -> mx.array:
    return coords + mx.array([0, *(sign * s for s in shift)], dtype=coords.dtype)


def run_indexed(
    op: Callable,
    x: SparseTensor,
    *args,
    kernel_size=2,
    stride=2,
    padding=0,
    dilation=1,
    coordinates=None,
    name: str,
    has_padding: bool = True,
    **kwargs,
) -> SparseTensor:
    """``op(x, *args, ...)`` (a lattice transposed-family op) with 0.6.3's offsets.

    ``has_padding=False``: the op takes no ``padding`` / ``dilation`` (the generative
    ones), so lattice always runs with neither.
    """
    lattice_pad, shift = indexed_geometry(kernel_size, padding, dilation, name)
    geometry = {"kernel_size": kernel_size, "stride": stride}
    if has_padding:
        geometry.update(padding=lattice_pad, dilation=dilation)
    if not any(shift):
        return op(x, *args, **geometry, coordinates=coordinates, **kwargs)
    if not isinstance(x, SparseTensor):
        return op(x, *args, **geometry, coordinates=coordinates, **kwargs)  # lattice's error
    manager = x.coord_manager
    level = tuple(
        a // b for a, b in zip(x.stride, int_triple(stride, "stride", name, minimum=1), strict=True)
    )
    if coordinates is None:
        out = op(x, *args, **geometry, **kwargs)
        n = out.active_count
        key = manager.intern(_moved(out.coords[:n], shift, 1), out.stride, op=name)
        return SparseTensor(
            manager.coords(key), out.feats[:n], out.stride, coord_key=key, coord_manager=manager
        )
    key = _target(manager, coordinates, level, name)
    target = manager.coords(key)
    out = op(x, *args, **geometry, coordinates=_moved(target, shift, -1), **kwargs)
    return SparseTensor(target, out.feats, out.stride, coord_key=key, coord_manager=manager)
