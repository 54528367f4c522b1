"""Headerless float32 LiDAR scans: KITTI velodyne ``.bin`` and nuScenes ``.pcd.bin``.

KITTI: little-endian float32 ``N x 4`` = x, y, z, intensity (remission) -> attribute
``intensity``. nuScenes (only with ``format="nuscenes"``): float32 ``N x 5`` = x, y, z,
intensity, ring -> attributes ``intensity`` and ``ring`` (kept as float32, as stored).
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from lattice.io._common import PointCloudError, read_exact, remaining_bytes
from lattice.io._points import PointCloud

LAYOUTS: dict[str, tuple[str, ...]] = {
    "kitti": ("intensity",),
    "nuscenes": ("intensity", "ring"),
}


def read_float_scan(f: BinaryIO, label: str, layout: str = "kitti") -> PointCloud:
    """Read a headerless float32 scan with columns x, y, z + ``LAYOUTS[layout]``."""
    extra = LAYOUTS[layout]
    width = 3 + len(extra)
    size = remaining_bytes(f) or 0
    if size % (4 * width):
        raise PointCloudError(
            f"{label}: {size} bytes is not a whole number of {layout} points "
            f"(float32 x, y, z, {', '.join(extra)} = {4 * width} bytes each)"
        )
    raw = read_exact(f, np.dtype("<f4"), size // 4, label, "scan").reshape(-1, width)
    points = np.ascontiguousarray(raw[:, :3])
    attrs = {name: np.ascontiguousarray(raw[:, 3 + i]) for i, name in enumerate(extra)}
    return PointCloud(points, attrs, format=layout, source=label)


def read_kitti(f: BinaryIO, label: str) -> PointCloud:
    """Read a KITTI velodyne ``.bin`` (float32 x, y, z, intensity)."""
    return read_float_scan(f, label, "kitti")


def read_nuscenes(f: BinaryIO, label: str) -> PointCloud:
    """Read a nuScenes LiDAR ``.pcd.bin`` (float32 x, y, z, intensity, ring)."""
    return read_float_scan(f, label, "nuscenes")


def write_float_scan(f: BinaryIO, cloud: PointCloud, layout: str = "kitti") -> None:
    """Write x, y, z + ``LAYOUTS[layout]`` as float32; the cloud must have exactly those attributes."""
    extra = LAYOUTS[layout]
    have = set(cloud.attributes)
    if have != set(extra):
        raise PointCloudError(
            f"{layout} .bin stores x, y, z, {', '.join(extra)} only; the cloud has attributes "
            f"{sorted(have)} (missing {sorted(set(extra) - have)}, extra {sorted(have - set(extra))}); "
            "add or drop attributes, or choose another format"
        )
    for name in extra:
        if cloud.attributes[name].ndim != 1:
            raise PointCloudError(
                f"{layout} attribute {name!r} must be 1-D, got {cloud.attributes[name].shape}"
            )
    cols = [cloud.points] + [cloud.attributes[name][:, None] for name in extra]
    f.write(np.concatenate(cols, axis=1).astype("<f4").tobytes())


def write_kitti(f: BinaryIO, cloud: PointCloud) -> None:
    """Write a KITTI velodyne ``.bin``: the cloud must have exactly one attribute, ``intensity``."""
    write_float_scan(f, cloud, "kitti")


def write_nuscenes(f: BinaryIO, cloud: PointCloud) -> None:
    """Write a nuScenes ``.pcd.bin``: the cloud must have exactly ``intensity`` and ``ring``."""
    write_float_scan(f, cloud, "nuscenes")
