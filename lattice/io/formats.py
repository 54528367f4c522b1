"""``read_points`` / ``write_points``: choose the format from ``format=``, the extension, or
(for unnamed input streams) the first bytes, and call that format's reader or writer."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from lattice.io import kitti, las, npz, pcd, ply
from lattice.io._common import (
    PathOrFile,
    PointCloudError,
    is_file_like,
    label_of,
    open_input,
    open_output,
    opt,
)
from lattice.io._points import PointCloud


@dataclass(frozen=True)
class Format:
    """One point-cloud format: its name, file extensions, reader and writer."""

    name: str
    extensions: tuple[str, ...]
    read: Callable[[BinaryIO, str], PointCloud]
    write: Callable[[BinaryIO, PointCloud, bool, bool], None]
    description: str


def _pcd_write(f: BinaryIO, cloud: PointCloud, binary: bool, compress: bool) -> None:
    pcd.write_pcd(
        f, cloud, data="binary_compressed" if binary and compress else "binary" if binary else "ascii"
    )


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("ply", (".ply",), ply.read_ply, lambda f, c, b, z: ply.write_ply(f, c, binary=b), "PLY"),
        Format(
            "npz", (".npz",), npz.read_npz, lambda f, c, b, z: npz.write_npz(f, c, compress=z), "NumPy NPZ"
        ),
        Format(
            "las", (".las",), las.read_las, lambda f, c, b, z: las.write_las(f, c, compress=z), "ASPRS LAS"
        ),
        Format("laz", (".laz",), las.read_las, lambda f, c, b, z: las.write_las(f, c, compress=True), "LAZ"),
        Format("pcd", (".pcd",), pcd.read_pcd, _pcd_write, "PCL PCD"),
        Format(
            "kitti", (".bin",), kitti.read_kitti, lambda f, c, b, z: kitti.write_kitti(f, c), "KITTI .bin"
        ),
        Format(
            "nuscenes", (), kitti.read_nuscenes, lambda f, c, b, z: kitti.write_nuscenes(f, c), "nuScenes"
        ),
    )
}
_ALIASES = {"bin": "kitti", "velodyne": "kitti", "pcd.bin": "nuscenes"}
_MAGIC = ((b"ply", "ply"), (b"PK\x03\x04", "npz"), (b"PK\x05\x06", "npz"), (b"LASF", "las"))


def _named(fmt: str, label: str) -> str:
    key = fmt.lower().lstrip(".")
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise PointCloudError(f"{label}: unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return key


def format_from_name(name: str) -> str | None:
    """The format implied by a file name's extension, or None when it implies none.

    ``*.pcd.bin`` (nuScenes) is ambiguous with KITTI ``.bin`` and raises ``PointCloudError``.
    """
    lower = os.fspath(name).lower()
    if lower.endswith(".pcd.bin"):
        raise PointCloudError(
            f"{name}: '.pcd.bin' is ambiguous; pass {opt('format', 'nuscenes')} (float32 x, y, z, intensity, ring) "
            f"or {opt('format', 'kitti')} (float32 x, y, z, intensity)"
        )
    for f in FORMATS.values():
        if lower.endswith(f.extensions):
            return f.name
    return None


def _from_extension(path_or_file: PathOrFile, label: str) -> str | None:
    name = label if not is_file_like(path_or_file) else getattr(path_or_file, "name", None)
    if not isinstance(name, str | os.PathLike):
        return None
    found = format_from_name(name)
    if found is None and not is_file_like(path_or_file):
        ext = os.path.splitext(label)[1] or "(none)"
        raise PointCloudError(
            f"{label}: unknown point-cloud file extension {ext}; pass {opt('format')} one of {', '.join(FORMATS)}"
        )
    return found


def _sniff(f: BinaryIO, label: str) -> str:
    head = f.read(64)
    f.seek(0)
    for magic, name in _MAGIC:
        if head.startswith(magic):
            return name
    text = head.lstrip()
    if text.startswith((b"# .PCD", b"VERSION", b"FIELDS")):
        return "pcd"
    raise PointCloudError(f"{label}: cannot tell the point-cloud format of this stream; pass {opt('format')}")


def read_points(path_or_file: PathOrFile, *, format: str | None = None) -> PointCloud:
    """Read a point cloud from a path or a binary stream.

    ``format``: one of ``ply``, ``npz``, ``las``, ``laz``, ``pcd``, ``kitti``, ``nuscenes``;
    by default the path's extension (``.bin`` means KITTI) or, for a stream without a
    name, its first bytes (KITTI and nuScenes streams need ``format=``).
    Raises ``PointCloudError`` (a ``ValueError``) with a one-line message naming the file.
    """
    label = label_of(path_or_file)
    fmt = _named(format, label) if format is not None else None
    with open_input(path_or_file) as (f, label):
        if fmt is None:
            fmt = _from_extension(path_or_file, label) or _sniff(f, label)
        return FORMATS[fmt].read(f, label)


def write_points(
    path_or_file: PathOrFile,
    cloud: PointCloud,
    *,
    format: str | None = None,
    binary: bool = True,
    compress: bool = False,
) -> None:
    """Write ``cloud`` to a path (atomically: temp file + rename) or a binary stream.

    ``format`` as for ``read_points`` (required for a stream without a name).
    ``binary=False`` writes ascii PLY / PCD. ``compress=True`` writes PCD
    ``binary_compressed``, a deflated NPZ, or LAZ for ``.las``. Invalid content raises
    ``PointCloudError``; file-system failures raise ``OSError``.
    """
    if not isinstance(cloud, PointCloud):
        raise TypeError(f"write_points expects a PointCloud, got {type(cloud).__name__}")
    label = label_of(path_or_file)
    fmt = _named(format, label) if format is not None else _from_extension(path_or_file, label)
    if fmt is None:
        raise PointCloudError(f"{label}: cannot tell which format to write; pass {opt('format')}")
    try:
        with open_output(path_or_file) as f:
            FORMATS[fmt].write(f, cloud, binary, compress)
    except PointCloudError as e:
        raise PointCloudError(f"{label}: {e.template}") from e
