"""Point / voxel conversion on sparse tensors (documented ``mlx_lattice.ops.quantization``).

``voxelize`` is lattice's own (it adds ``return_index=`` and ``device=``); ``devoxelize``
is an adapter (documented ``point_active_rows=``). ``build_point_voxel_map`` and
``interpolate_point_features`` are :mod:`mlx_lattice.core.coords.quantization`'s.
``voxelize_with_quantization`` is not provided yet and raises
``mlx_lattice._missing.NotProvidedError``.
"""

from __future__ import annotations

from lattice import ops as _ops
from lattice.ops import voxelize
from mlx_lattice._missing import module_getattr
from mlx_lattice.core.coords.quantization import build_point_voxel_map, interpolate_point_features


def devoxelize(
    points,
    voxels,
    voxel_size=1.0,
    *,
    batch_indices=None,
    point_active_rows=None,
    origin=0.0,
    interpolation="linear",
    point_voxel_map=None,
):
    """Voxel features of ``voxels`` (a SparseTensor) sampled at ``points`` ``(N, 3)``:
    trilinear over the 8 surrounding voxel centres, or the containing voxel (``nearest``).

    Maps to ``lattice.ops.devoxelize``. ``point_active_rows`` other than None is not
    served yet by lattice and raises ``NotImplementedError``.
    """
    if point_active_rows is not None:
        raise NotImplementedError(
            "[devoxelize] point_active_rows is not provided yet by lattice (issue 17): pass the live "
            "points only"
        )
    return _ops.devoxelize(
        points,
        voxels,
        voxel_size,
        batch_indices=batch_indices,
        origin=origin,
        interpolation=interpolation,
        point_voxel_map=point_voxel_map,
    )


__all__ = ["build_point_voxel_map", "devoxelize", "interpolate_point_features", "voxelize"]

__getattr__ = module_getattr(__name__)
