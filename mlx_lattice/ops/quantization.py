"""Point / voxel conversion on sparse tensors (documented ``mlx_lattice.ops.quantization``).

``voxelize_with_quantization`` (``voxelize`` in two steps: a precomputed
``SparseQuantization`` and its features, optionally onto a ``template`` tensor's
coordinate key) is lattice's own. ``voxelize`` is lattice's restricted to the documented
``'sum'`` / ``'mean'`` reductions and point dtypes (it adds ``return_index=`` and ``device=``).
``devoxelize`` is lattice's with the documented corner convention of linear sampling
(voxel ``v`` at ``origin + v * voxel_size``; it adds ``device=`` and
``point_active_rows=``). ``build_point_voxel_map`` and ``interpolate_point_features``
are :mod:`mlx_lattice.core.coords.quantization`'s.
"""

from __future__ import annotations

import lattice.ops
from lattice.ops import voxelize_with_quantization
from mlx_lattice.core.coords.quantization import (
    build_point_voxel_map,
    corner_origin,
    documented_point_inputs,
    interpolate_point_features,
)


def voxelize(
    points,
    feats=None,
    voxel_size=1.0,
    *,
    batch_indices=None,
    origin=0.0,
    active_rows=None,
    reduction="mean",
    stride=1,
    return_index=False,
    device=None,
):
    """Points ``(N, 3)`` and their features ``(N, C)`` as a SparseTensor of voxels.

    ``lattice.ops.voxelize`` restricted to the documented reductions (``'sum'`` and
    ``'mean'``; lattice's others are under its own name) and point dtypes (see
    ``sparse_quantize``).
    """
    if not isinstance(reduction, str) or reduction not in ("sum", "mean"):
        raise ValueError(f"[voxelize] reduction must be 'sum' or 'mean', got {reduction!r}")
    documented_point_inputs(points, batch_indices, "voxelize")
    return lattice.ops.voxelize(
        points,
        feats,
        voxel_size,
        batch_indices=batch_indices,
        origin=origin,
        active_rows=active_rows,
        reduction=reduction,
        stride=stride,
        return_index=return_index,
        device=device,
    )


def devoxelize(
    points,
    voxels,
    voxel_size=1.0,
    *,
    batch_indices=None,
    origin=0.0,
    interpolation="linear",
    point_voxel_map=None,
    device=None,
    point_active_rows=None,
):
    """Voxel features of ``voxels`` sampled at ``points`` (``(N, C)``).

    ``lattice.ops.devoxelize`` with, for ``linear``, the origin moved half a voxel
    (:func:`~mlx_lattice.core.coords.quantization.corner_origin`): trilinear weights of the
    8 voxels at the corners of the grid cell holding each point. A given
    ``point_voxel_map`` is used as it is.
    """
    if point_voxel_map is None:
        origin = corner_origin(voxel_size, origin, interpolation, "devoxelize")
    return lattice.ops.devoxelize(
        points,
        voxels,
        voxel_size,
        batch_indices=batch_indices,
        origin=origin,
        interpolation=interpolation,
        point_voxel_map=point_voxel_map,
        device=device,
        point_active_rows=point_active_rows,
    )


__all__ = [
    "build_point_voxel_map",
    "devoxelize",
    "interpolate_point_features",
    "voxelize",
    "voxelize_with_quantization",
]
