"""``read_points`` / ``write_points``: choose the format from ``format=``, the extension, or
(for unnamed input streams) the first bytes, and call that format's reader or writer.

``columns=`` names the columns of formats that do not name their own (``npy``, ``text`` and
the raw float32 ``kitti`` / ``nuscenes``); other formats refuse it."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from lattice.io import kitti, las, npy, npz, pcd, ply, text
from lattice.io._common import (
    PathOrFile,
    PointCloudError,
    is_file_like,
    label_of,
    open_input,
    open_output,
    opt,
    reading,
)
from lattice.io._points import PointCloud
from lattice.io.columns import parse_columns


@dataclass(frozen=True)
class Format:
    """One point-cloud format: its name, file extensions, reader and writer."""

    name: str
    extensions: tuple[str, ...]
    read: Callable[[BinaryIO, str], PointCloud]
    write: Callable[[BinaryIO, PointCloud, bool, bool], None]
    description: str
    # the reader that takes ``columns=`` (None: the format names its own fields)
    read_columns: Callable[[BinaryIO, str, tuple[str, ...]], PointCloud] | None = None
    # a writer that also takes the target's name (text: commas for ``.csv``), used instead of ``write``
    write_named: Callable[[BinaryIO, PointCloud, str], None] | None = None

    @classmethod
    def unnamed(cls, name, extensions, read, write, description, **more) -> Format:
        """A format whose columns are not named in the file: its reader takes ``columns=`` and
        its writer ``write(f, cloud)`` ignores ``binary`` / ``compress``."""
        return cls(
            name, extensions, read, lambda f, c, b, z: write(f, c), description, read_columns=read, **more
        )


def _pcd_write(f: BinaryIO, cloud: PointCloud, binary: bool, compress: bool) -> None:
    pcd.write_pcd(
        f, cloud, data="binary_compressed" if binary and compress else "binary" if binary else "ascii"
    )


TEXT_EXTENSIONS = (".xyz", ".txt", ".csv", ".pts", ".asc")
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
        Format.unnamed("kitti", (".bin",), kitti.read_kitti, kitti.write_kitti, "KITTI .bin"),
        Format.unnamed("nuscenes", (".pcd.bin",), kitti.read_nuscenes, kitti.write_nuscenes, "nuScenes"),
        Format.unnamed("npy", (".npy",), npy.read_npy, npy.write_npy, "NumPy .npy array"),
        Format.unnamed(
            "text",
            TEXT_EXTENSIONS,
            text.read_text,
            text.write_text,
            "text table",
            write_named=lambda f, c, name: text.write_text(
                f, c, "," if name.lower().endswith(".csv") else " "
            ),
        ),
    )
}
_ALIASES = {
    "bin": "kitti",
    "velodyne": "kitti",
    "pcd.bin": "nuscenes",
    **{e.lstrip("."): "text" for e in TEXT_EXTENSIONS},
}
_MAGIC = (
    (b"ply", "ply"),
    (b"PK\x03\x04", "npz"),
    (b"PK\x05\x06", "npz"),
    (b"LASF", "las"),
    (npy.MAGIC, "npy"),
)
_TEXT_BYTES = frozenset(range(32, 127)) | {9, 10, 13}


def canonical_format(fmt: str, label: str) -> str:
    """The registered name of format ``fmt`` (case-insensitive, a leading dot and aliases such as
    ``bin`` or ``csv`` allowed); an unknown name raises ``PointCloudError`` naming ``label``."""
    key = fmt.lower().lstrip(".")
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise PointCloudError(f"{label}: unknown format {fmt!r}; known formats: {', '.join(FORMATS)}")
    return key


def format_from_name(name: str | os.PathLike) -> str | None:
    """The format implied by a file name's extension (the longest that matches), or None.

    ``*.pcd.bin`` is nuScenes (float32 x, y, z, intensity, ring), any other ``*.bin`` KITTI.
    """
    lower = os.fspath(name).lower()
    found = [(len(e), f.name) for f in FORMATS.values() for e in f.extensions if lower.endswith(e)]
    return max(found)[1] if found else None


def scan_reason(path: str | os.PathLike) -> str | None:
    """Why a file met in a directory scan is not a point cloud to read, or None when it may be.

    Cheap checks, on the name and the first bytes only: an extension no reader knows; a
    ``.npy`` holding one value per row (per-point labels, as SemanticKITTI ships them); a
    text file whose first lines are not a table of points (``calib.txt``, ``times.txt``).
    Files given one by one are always tried; only directory and pattern scans skip.
    """
    from lattice.io import storage

    fmt = format_from_name(path)
    if fmt is None:
        return "not a point-cloud extension"
    try:
        if fmt == "npy":
            with storage.open_read(path) as f:
                version = np.lib.format.read_magic(f)
                read = {
                    (1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0,
                }
                shape, _, dtype = read.get(version, np.lib.format.read_array_header_2_0)(f)
            if dtype.names is None and (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)):
                return "a .npy of one value per row (per-point labels?), not points"
        elif fmt == "text":
            with storage.open_read(path) as f:
                head = f.read(1 << 16).decode("utf-8", errors="replace").splitlines()
            text.sniff(iter(head[:-1] if len(head) > 1 else head), os.fspath(path), None)
    except PointCloudError as e:
        return "does not look like a point table (" + str(e).split(": ", 1)[-1] + ")"
    except (OSError, ValueError):
        return None  # unreadable: let the run say why
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
    stripped = head.lstrip()
    if stripped.startswith((b"# .PCD", b"VERSION", b"FIELDS")):
        return "pcd"
    if head and set(head) <= _TEXT_BYTES:
        return "text"
    raise PointCloudError(f"{label}: cannot tell the point-cloud format of this stream; pass {opt('format')}")


def read_points(
    path_or_file: PathOrFile, *, format: str | None = None, columns: str | Sequence[str] | None = None
) -> PointCloud:
    """Read a point cloud from a path or a binary stream.

    ``format``: one of ``ply``, ``npz``, ``las``, ``laz``, ``pcd``, ``kitti``, ``nuscenes``,
    ``npy``, ``text``; by default the path's extension (``.bin`` means KITTI, ``.pcd.bin``
    nuScenes) or, for a stream without a name, its first bytes (KITTI and nuScenes streams
    need ``format=``). ``columns``: the name of each column (a list or ``"x,y,z,red,green,blue"``;
    ``_`` skips one) of a ``npy``, ``text`` or raw float32 ``.bin`` file; other formats refuse it.
    Raises ``PointCloudError`` (a ``ValueError``) with a one-line message naming the file.
    """
    label = label_of(path_or_file)
    fmt = canonical_format(format, label) if format is not None else None
    names = parse_columns(columns, label)
    with open_input(path_or_file) as (f, label):
        if fmt is None:
            fmt = _from_extension(path_or_file, label) or _sniff(f, label)
        reader = FORMATS[fmt].read if names is None else reader_with_columns(fmt, label)
        with reading(label, FORMATS[fmt].description):  # hostile bytes: one line naming the file
            return reader(f, label) if names is None else reader(f, label, names)


def reader_with_columns(fmt: str, label: str) -> Callable[[BinaryIO, str, tuple[str, ...]], PointCloud]:
    """The ``columns=`` reader of format ``fmt``, or a ``PointCloudError`` when it has none."""
    reader = FORMATS[fmt].read_columns
    if reader is None:
        takes = ", ".join(f.name for f in FORMATS.values() if f.read_columns is not None)
        raise PointCloudError(
            f"{label}: {fmt} files name their own fields; {opt('columns')} applies to {takes} files only"
        )
    return reader


def write_points(
    path_or_file: PathOrFile,
    cloud: PointCloud,
    *,
    format: str | None = None,
    binary: bool = True,
    compress: bool = False,
) -> None:
    """Write ``cloud`` to a path (atomically: temp file + rename) or a binary stream.

    ``format`` as for ``read_points`` (required for a stream without a name; ``csv`` is
    ``text`` with commas). ``binary=False`` writes ascii PLY / PCD. ``compress=True`` writes PCD
    ``binary_compressed``, a deflated NPZ, or LAZ for ``.las``. Invalid content raises
    ``PointCloudError``; file-system failures raise ``OSError``.
    """
    if not isinstance(cloud, PointCloud):
        raise TypeError(f"write_points expects a PointCloud, got {type(cloud).__name__}")
    label = label_of(path_or_file)
    fmt = canonical_format(format, label) if format is not None else _from_extension(path_or_file, label)
    if fmt is None:
        raise PointCloudError(f"{label}: cannot tell which format to write; pass {opt('format')}")
    spec = FORMATS[fmt]
    try:
        with open_output(path_or_file) as f:
            if spec.write_named is not None:  # format="csv" writes as a .csv name does
                csv = (format or "").lower().lstrip(".") == "csv"
                spec.write_named(f, cloud, f"{label}.csv" if csv else label)
            else:
                spec.write(f, cloud, binary, compress)
    except PointCloudError as e:
        raise PointCloudError(f"{label}: {e.template}") from e
