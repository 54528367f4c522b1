"""Open3D interop: ``to_open3d`` / ``from_open3d`` for point clouds and voxel grids.

Open3D is an optional extra (``pip install 'lattice[open3d]'``; on Linux that is the
``open3d-cpu`` wheel, which also needs the system library ``libusb-1.0``). This module
imports Open3D only when one of its functions is called, so ``import lattice.io`` never
pays for it.

==========================================  ==========================================
lattice                                     Open3D
==========================================  ==========================================
``lattice.io.PointCloud``                   ``open3d.geometry.PointCloud``
``lattice.SparseTensor`` / ``SparseFile``   ``open3d.geometry.VoxelGrid``
==========================================  ==========================================

Point clouds: points (float64 in Open3D), colours (``PointCloud.colors()``, float in
[0, 1]) and normals (``PointCloud.normals()``). Other attributes have no place in an
Open3D ``PointCloud`` and are dropped. NaN rows are kept on both sides, so rows stay
aligned with the source.

Voxel grids: voxel ``(x, y, z)`` of a tensor at stride ``s`` covers
``[origin + i * s * voxel_size, origin + (i + 1) * s * voxel_size)`` per axis, and Open3D's
voxel ``grid_index`` ``j`` covers ``[grid.origin + j * grid.voxel_size, ...)``: the same
rule, so ``grid_index == (x, y, z)`` with ``grid.origin = origin`` and
``grid.voxel_size = s * voxel_size`` (negative indices included). Open3D's grid is
isotropic and has one batch member; colours are RGB floats in [0, 1].

Open3D's own voxelization (``VoxelGrid.create_from_point_cloud``,
``PointCloud.voxel_down_sample``) puts the origin at ``min_bound - voxel_size / 2`` of
the cloud, not at 0. ``lattice.sparse_quantize(points, v, origin=grid.origin)`` gives
exactly the grid's voxel indices (both compute ``floor((p - origin) / v)`` in float64).
With a different origin the sets differ, and shifting one set by
``round((o1 - o2) / v)`` is not exact either: a point within rounding distance of a voxel
face can land on either side (on the SemanticKITTI scan at 0.05 m the two sets differ
in 26 voxels).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from lattice.io._points import PointCloud, _unit_colors
from lattice.io.sparse import SparseFile

__all__ = ["from_open3d", "to_open3d"]

_HINT = "pip install 'lattice[open3d]'"
_GREY = 0.5


def _open3d(op: str):
    """Import Open3D, or raise an ImportError that says how to get it."""
    try:
        import open3d
    except (ImportError, OSError) as e:  # OSError: a missing system library (libusb-1.0)
        raise ImportError(
            f"[{op}] needs Open3D, which is an optional extra: {_HINT} "
            f"(on Linux this installs open3d-cpu, which also needs the system library libusb-1.0, "
            f"e.g. apt-get install libusb-1.0-0); importing open3d failed with: {e}"
        ) from e
    return open3d


def _vec3(o3d, a: np.ndarray):
    return o3d.utility.Vector3dVector(np.ascontiguousarray(a, dtype=np.float64))


# ---- lattice -> Open3D ----------------------------------------------------------------


def to_open3d(
    obj: Any,
    *,
    voxel_size: float | Sequence[float] | None = None,
    origin: float | Sequence[float] | None = None,
    batch: int | None = None,
    color_channels: Sequence[int] | None = (0, 1, 2),
):
    """Convert a lattice object to its Open3D counterpart.

    - ``lattice.io.PointCloud`` (or an ``(N, 3)`` array of points) -> ``open3d.geometry.PointCloud``
      with colours from ``cloud.colors()`` and normals from ``cloud.normals()`` when present.
    - ``lattice.SparseTensor`` or ``lattice.io.SparseFile`` -> ``open3d.geometry.VoxelGrid``
      with ``grid_index = (x, y, z)``, ``origin`` and ``voxel_size * stride``.
      ``voxel_size`` / ``origin`` default to the file's values for a ``SparseFile`` and to
      1.0 / 0.0 for a ``SparseTensor`` (which does not carry them). Voxel colours come from
      the feature channels ``color_channels`` (for a ``SparseFile`` with ``red/green/blue``
      feature names, those channels), scaled like ``PointCloud.colors()`` and clipped to
      [0, 1]; grey when there are fewer than 3 channels or ``color_channels=None``.
      A tensor with several batch members needs ``batch=`` to pick one.

    Raises ImportError (with the install command) when Open3D is missing, TypeError for
    an unsupported object and ValueError for an anisotropic voxel size or an ambiguous batch.
    """
    op = "to_open3d"
    from lattice.core.tensor import SparseTensor

    if isinstance(obj, (SparseTensor, SparseFile)):
        return _voxel_grid(obj, voxel_size, origin, batch, color_channels, op)
    if voxel_size is not None or origin is not None or batch is not None:
        raise ValueError(f"[{op}] voxel_size, origin and batch apply to sparse tensors only")
    if isinstance(obj, PointCloud):
        return _point_cloud(obj, op)
    if isinstance(obj, np.ndarray) or type(obj).__module__.startswith("mlx"):
        return _point_cloud(PointCloud(np.asarray(obj)), op)
    raise TypeError(
        f"[{op}] expected a lattice.io.PointCloud, an (N, 3) array, a lattice.SparseTensor or a "
        f"lattice.io.SparseFile, got {type(obj).__name__}"
    )


def _point_cloud(cloud: PointCloud, op: str):
    o3d = _open3d(op)
    out = o3d.geometry.PointCloud(_vec3(o3d, cloud.points))
    colors = cloud.colors()
    if colors is not None:
        out.colors = _vec3(o3d, np.clip(colors, 0.0, 1.0))
    normals = cloud.normals()
    if normals is not None:
        out.normals = _vec3(o3d, normals)
    return out


def _triple(value: Any, name: str, op: str, *, positive: bool = False) -> np.ndarray:
    """A number or 3 numbers as a finite float64 (3,) array (NumPy only: no MLX import)."""
    a = np.asarray(value, dtype=np.float64).reshape(-1)
    a = np.repeat(a, 3) if a.size == 1 else a
    if a.size != 3 or not np.all(np.isfinite(a)) or (positive and np.any(a <= 0)):
        rule = "3 positive finite numbers" if positive else "3 finite numbers"
        raise ValueError(f"[{op}] {name} must be a number or {rule}, got {value!r}")
    return a


def _isotropic(voxel_size: np.ndarray, op: str) -> float:
    if not np.all(voxel_size == voxel_size[0]):
        raise ValueError(
            f"[{op}] Open3D's VoxelGrid has one voxel size for all axes, got {voxel_size.tolist()} "
            "(voxel_size * stride)"
        )
    return float(voxel_size[0])


def _voxel_grid(obj, voxel_size, origin, batch, color_channels, op: str):
    o3d = _open3d(op)
    if isinstance(obj, SparseFile):
        coords, feats = np.asarray(obj.coords), np.asarray(obj.feats)
        stride = np.asarray(obj.stride, np.float64)
        vs = obj.voxel_size if voxel_size is None else voxel_size
        org = obj.origin if origin is None else origin
        names = obj.feature_names
        if color_channels == (0, 1, 2) and all(n in names for n in ("red", "green", "blue")):
            color_channels = tuple(names.index(n) for n in ("red", "green", "blue"))
    else:
        live = obj.active_count
        coords, feats = np.asarray(obj.coords[:live]), np.asarray(obj.feats[:live])
        stride = np.asarray(obj.stride, np.float64)
        vs = 1.0 if voxel_size is None else voxel_size
        org = 0.0 if origin is None else origin
    size = _isotropic(_triple(vs, "voxel_size", op, positive=True) * stride, op)
    org = _triple(org, "origin", op)
    batches = np.unique(coords[:, 0])
    if batch is not None:
        keep = coords[:, 0] == batch
        coords, feats = coords[keep], feats[keep]
    elif len(batches) > 1:
        raise ValueError(
            f"[{op}] the tensor holds batch members {batches.tolist()}; an Open3D VoxelGrid holds one, "
            "pass batch="
        )
    xyz = coords[:, 1:].astype(np.float64)
    colors = np.full((len(xyz), 3), _GREY)
    if color_channels is not None and feats.ndim == 2 and feats.shape[1] >= 3:
        channels = list(color_channels)
        if len(channels) != 3 or not all(0 <= c < feats.shape[1] for c in channels):
            raise ValueError(
                f"[{op}] color_channels must be 3 channel indices below {feats.shape[1]}, got {channels}"
            )
        colors = np.clip(np.nan_to_num(_unit_colors(feats[:, channels])), 0.0, 1.0)
    # One point at each voxel centre, binned by Open3D with min_bound = origin: grid_index is
    # floor(k + 0.5) = k exactly, negative indices included, and the grid's origin is ours.
    centres = org + (xyz + 0.5) * size
    cloud = o3d.geometry.PointCloud(_vec3(o3d, centres))
    cloud.colors = _vec3(o3d, colors)
    top = org + (np.maximum(xyz.max(axis=0), 0.0) + 1.0) * size if len(xyz) else org + size
    return o3d.geometry.VoxelGrid.create_from_point_cloud_within_bounds(cloud, size, org, top)


# ---- Open3D -> lattice ----------------------------------------------------------------


def from_open3d(obj: Any, *, origin: float | Sequence[float] | None = None, as_file: bool = False):
    """Convert an Open3D geometry to its lattice counterpart.

    - ``open3d.geometry.PointCloud`` (or ``open3d.t.geometry.PointCloud``) ->
      ``lattice.io.PointCloud``: float64 points, colours as uint8 ``red/green/blue``
      attributes (``round(255 * c)``, the PLY convention), normals as float32 ``nx/ny/nz``.
    - ``open3d.geometry.VoxelGrid`` -> ``lattice.SparseTensor`` with coords
      ``(0, x, y, z)`` = the voxels' ``grid_index`` (sorted by x, y, z) at stride 1, and
      feats the voxel colours, float32 ``(M, 3)`` in [0, 1] (Open3D grids always carry
      colours; a grid made from an uncoloured cloud has black voxels). With ``origin=`` the indices are re-expressed against that origin
      (``grid_index + round((grid.origin - origin) / grid.voxel_size)``; the offset must be a
      whole number of voxels). ``as_file=True`` returns a ``lattice.io.SparseFile`` instead,
      which also carries ``voxel_size``, ``origin`` and the feature names.

    Raises ImportError when Open3D is missing, TypeError for an unsupported object.
    """
    op = "from_open3d"
    o3d = _open3d(op)
    if hasattr(o3d, "t") and isinstance(obj, o3d.t.geometry.PointCloud):
        obj = obj.to_legacy()
    if isinstance(obj, o3d.geometry.PointCloud):
        if origin is not None or as_file:
            raise ValueError(f"[{op}] origin and as_file apply to voxel grids only")
        return _from_point_cloud(obj)
    if isinstance(obj, o3d.geometry.VoxelGrid):
        return _from_voxel_grid(obj, origin, as_file, op)
    raise TypeError(
        f"[{op}] expected an open3d.geometry.PointCloud or open3d.geometry.VoxelGrid, got "
        f"{type(obj).__module__}.{type(obj).__name__}"
    )


def _from_point_cloud(pc) -> PointCloud:
    attrs: dict[str, np.ndarray] = {}
    if pc.has_colors():
        rgb = np.rint(np.clip(np.asarray(pc.colors), 0.0, 1.0) * 255.0).astype(np.uint8)
        attrs.update(red=rgb[:, 0], green=rgb[:, 1], blue=rgb[:, 2])
    if pc.has_normals():
        n = np.asarray(pc.normals, dtype=np.float32)
        attrs.update(nx=n[:, 0], ny=n[:, 1], nz=n[:, 2])
    return PointCloud(np.asarray(pc.points, dtype=np.float64).copy(), attrs)


def _from_voxel_grid(grid, origin, as_file: bool, op: str):
    rotation = getattr(grid, "rotation", None)
    if rotation is not None and not np.allclose(np.asarray(rotation), np.eye(3)):
        raise ValueError(f"[{op}] the VoxelGrid is rotated; only axis-aligned grids map to lattice coords")
    voxels = grid.get_voxels()
    size = float(grid.voxel_size)
    grid_origin = np.asarray(grid.origin, dtype=np.float64)
    idx = np.array([v.grid_index for v in voxels], dtype=np.int64).reshape(-1, 3)
    if origin is not None:
        target = _triple(origin, "origin", op)
        shift = (grid_origin - target) / size
        whole = np.rint(shift)
        if not np.allclose(shift, whole, rtol=0.0, atol=1e-6):
            raise ValueError(
                f"[{op}] the grid origin {grid_origin.tolist()} is not a whole number of voxels "
                f"({size}) from origin {target.tolist()}"
            )
        idx = idx + whole.astype(np.int64)
        grid_origin = target
    if idx.size and (idx.min() < np.iinfo(np.int32).min or idx.max() > np.iinfo(np.int32).max):
        raise ValueError(f"[{op}] voxel indices overflow int32")
    order = np.lexsort(idx.T[::-1])
    coords = np.concatenate([np.zeros((len(idx), 1), np.int64), idx], axis=1)[order].astype(np.int32)
    # Open3D's VoxelGrid always has colours (HasColors() is true): black for a grid built from
    # an uncoloured cloud.
    feats = np.array([v.color for v in voxels], dtype=np.float32).reshape(-1, 3)[order]
    if as_file:
        return SparseFile(
            coords,
            feats,
            np.ones(3, np.int32),
            np.full(3, size),
            grid_origin.astype(np.float64),
            ("red", "green", "blue"),
        )
    from lattice.core.tensor import SparseTensor

    return SparseTensor(coords, feats, 1)
