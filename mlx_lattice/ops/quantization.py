"""Point / voxel conversion on sparse tensors (documented ``mlx_lattice.ops.quantization``).

``voxelize_with_quantization`` is ``voxelize`` in two steps: a precomputed
``SparseQuantization`` and its features, optionally onto a ``template`` tensor's
coordinate key. For the documented fixed-capacity quantization (what ``sparse_quantize``
returns) it gives the documented buffer tensor (``capacity`` rows, ``active_rows`` the
voxels); for lattice's own it is ``lattice.ops.voxelize_with_quantization``. ``voxelize`` is lattice's restricted to the documented
``'sum'`` / ``'mean'`` reductions and point dtypes (it adds ``return_index=`` and ``device=``).
``devoxelize`` is lattice's with the documented corner convention of linear sampling
(voxel ``v`` at ``origin + v * voxel_size``; it adds ``device=`` and
``point_active_rows=``). ``build_point_voxel_map`` and ``interpolate_point_features``
are :mod:`mlx_lattice.core.coords.quantization`'s.
"""

from __future__ import annotations

import lattice.ops
from lattice.core import CoordinateManager, SparseTensor
from lattice.core._checks import int_triple
from mlx_lattice.core.coords.quantization import (
    SparseQuantization,
    build_point_voxel_map,
    corner_origin,
    documented_point_inputs,
    interpolate_point_features,
    voxelize_features,
)


def voxelize_with_quantization(
    quantization, feats, *, active_rows=None, reduction="mean", stride=1, template=None
) -> SparseTensor:
    """The voxels of a precomputed quantization as a SparseTensor at level ``stride``, with
    features ``voxelize_features(feats, quantization, active_rows=, reduction=)``.

    The documented :class:`~mlx_lattice.core.coords.quantization.SparseQuantization`:
    ``feats`` has ``capacity`` rows and the tensor holds the quantization's ``coords``
    buffer (``capacity`` rows, ``active_rows`` the voxel count, feature rows past it 0), in
    a new manager that adopts the quantization's hash table. ``template``: a tensor on the
    quantization's ``coords`` array and voxel count (as these tensors and
    ``SparseTensor(q.coords, feats, active_rows=q.active_rows)`` are); the result keeps its
    key, manager and stride. lattice's own ``SparseQuantization``:
    ``lattice.ops.voxelize_with_quantization``.
    """
    if not isinstance(quantization, SparseQuantization):
        return lattice.ops.voxelize_with_quantization(
            quantization,
            feats,
            active_rows=active_rows,
            reduction=reduction,
            stride=stride,
            template=template,
        )
    op = "voxelize_with_quantization"
    level = int_triple(stride, "stride", op, minimum=1)
    m = len(quantization)
    if template is not None:
        if not isinstance(template, SparseTensor):
            raise TypeError(f"[{op}] template must be a SparseTensor, got {type(template).__name__}")
        if template.coords is not quantization.coords:
            raise ValueError(f"[{op}] template must use the quantization coordinate array")
        if template.lazy or template.active_count != m:
            raise ValueError(f"[{op}] template must use the quantization active_rows ({m} rows)")
    voxel_feats = voxelize_features(feats, quantization, active_rows=active_rows, reduction=reduction)
    if template is not None:
        return template.replace(feats=voxel_feats)
    manager, q = CoordinateManager(), quantization.exact
    key = manager.insert(q.coords, level, op=op) if q.table is None else manager.adopt(q.table, level)
    return SparseTensor(
        quantization.coords, voxel_feats, level, coord_key=key, coord_manager=manager, active_rows=m
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
