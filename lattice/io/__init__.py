"""Point-cloud and sparse-tensor files: PLY, NPZ, LAS/LAZ, PCD, KITTI ``.bin``, nuScenes
``.pcd.bin``, NumPy ``.npy`` and text tables (``.xyz``, ``.txt``, ``.csv``, ``.pts``, ``.asc``).

>>> from lattice.io import read_points, write_points
>>> cloud = read_points("scan.pcd")          # PointCloud(points (N, 3), attributes {...})
>>> write_points("scan.ply", cloud)          # atomic: temp file + rename

LAS/LAZ keep their header, records and CRS (``lattice.io.crs``) through a read and a write;
``ASPRS_CLASSES`` names the standard LAS classification codes.

Every reading problem is a ``PointCloudError`` (a ``ValueError``) with one line that
names the file. See ``docs/io.md``.

``to_open3d`` / ``from_open3d`` convert to and from Open3D (the optional extra
``lattice[open3d]``); Open3D itself is imported only when they are called.
"""

from lattice.io._common import PointCloudError, opt
from lattice.io._points import PointCloud, pack_rgb, unpack_rgb
from lattice.io.atomic import atomic_write
from lattice.io.classes import ASPRS_CLASSES, asprs_class_name
from lattice.io.crs import CRS, CRSError
from lattice.io.formats import FORMATS, Format, format_from_name, read_points, write_points
from lattice.io.open3d import from_open3d, to_open3d  # imports open3d only when called
from lattice.io.sparse import SPARSE_FORMAT, SparseFile, read_sparse, write_sparse

__all__ = [
    "ASPRS_CLASSES",
    "CRS",
    "CRSError",
    "FORMATS",
    "SPARSE_FORMAT",
    "Format",
    "PointCloud",
    "PointCloudError",
    "SparseFile",
    "asprs_class_name",
    "atomic_write",
    "format_from_name",
    "from_open3d",
    "opt",
    "pack_rgb",
    "read_points",
    "read_sparse",
    "to_open3d",
    "unpack_rgb",
    "write_points",
    "write_sparse",
]
