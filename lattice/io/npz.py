"""Points in NumPy ``.npz`` archives: ``points`` (N, 3) plus per-point arrays as attributes.

Archives are always opened with ``allow_pickle=False``: object arrays are an error, never
unpickled. Arrays whose first dimension is not N, or that are not 1-D/2-D, are ignored.

Members are checked before anything is decompressed (``check_members``): stored or
deflated only, not encrypted, not overlapping, compressed sizes within the file, declared
sizes within what deflate can give (1032x) and, all together, within
``max(NPZ_FREE_BYTES, NPZ_MAX_RATIO x file size)``. Each ``.npy`` header's shape times its
item size must be the member's declared size, and its rows within ``max_points()``; the
data are then read into an array of that size through zipfile's stream, which never
gives more than the declared size.
"""

from __future__ import annotations

import math
import zipfile
import zlib
from typing import BinaryIO

import numpy as np

from lattice.io._common import PointCloudError, check_points, one_line, remaining_bytes
from lattice.io._points import PointCloud
from lattice.io.kinds import decode_colours
from lattice.io.npy import array_header

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")
MAX_DEFLATE_RATIO = 1032  # the most bytes deflate gives per compressed byte
NPZ_MAX_RATIO = 256  # decoded bytes per file byte accepted past NPZ_FREE_BYTES
NPZ_FREE_BYTES = 128 << 20  # any archive may decode to this much, whatever its ratio
_LOCAL_HEADER = 30  # bytes of a zip local file header before the name
_CHUNK = 1 << 24


def _stored_name_length(info: zipfile.ZipInfo) -> int:
    try:
        return len(info.orig_filename.encode("utf-8" if info.flag_bits & 0x800 else "cp437"))
    except UnicodeEncodeError:
        return len(info.orig_filename)


def check_members(infos: list[zipfile.ZipInfo], size: int | None, label: str) -> None:
    """Refuse a zip whose members cannot be what they claim (see the module docs), before decoding."""
    spans, declared = [], 0
    for info in infos:
        name, c, u = info.filename, info.compress_size, info.file_size
        if info.flag_bits & 0x1:
            raise PointCloudError(f"{label}: NPZ member {name} is encrypted")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise PointCloudError(
                f"{label}: NPZ member {name} uses zip compression method {info.compress_type}; "
                "NPZ members are stored or deflated"
            )
        if info.compress_type == zipfile.ZIP_STORED and u != c:
            raise PointCloudError(
                f"{label}: NPZ member {name} is stored uncompressed in {c} bytes but claims {u}"
            )
        if u > MAX_DEFLATE_RATIO * c + 1024:
            raise PointCloudError(
                f"{label}: NPZ member {name} claims {u} bytes from {c} deflated bytes "
                f"(deflate gives at most {MAX_DEFLATE_RATIO}x)"
            )
        spans.append(
            (info.header_offset, info.header_offset + _LOCAL_HEADER + _stored_name_length(info) + c, name)
        )
        declared += u
    spans.sort()
    for (_, end, a), (start, _, b) in zip(spans, spans[1:], strict=False):
        if end > start:
            raise PointCloudError(
                f"{label}: NPZ members {a} and {b} overlap in the file (a zip bomb's trick)"
            )
    if size is None:
        return
    if spans and spans[-1][1] > size:
        raise PointCloudError(
            f"{label}: truncated NPZ: member {spans[-1][2]} ends at byte {spans[-1][1]} of a {size}-byte file"
        )
    budget = max(NPZ_FREE_BYTES, NPZ_MAX_RATIO * size)
    if declared > budget:
        raise PointCloudError(
            f"{label}: NPZ members claim {declared} bytes once decompressed, from a {size}-byte file "
            f"(more than {NPZ_MAX_RATIO}x past {NPZ_FREE_BYTES >> 20} MiB): refused as a zip bomb"
        )


def member_header(m, info: zipfile.ZipInfo, key: str, label: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran order, dtype)`` of the ``.npy`` member open at its start as ``m``, checked:
    no objects, shape x item size = the member's declared size, rows within ``max_points()``."""
    shape, fortran, dtype = array_header(m, label)
    if dtype.hasobject:
        raise PointCloudError(f"{label}: NPZ contains pickled objects, which are refused (array {key!r})")
    nbytes, held = math.prod(shape) * dtype.itemsize, info.file_size - m.tell()
    if nbytes != held:
        raise PointCloudError(
            f"{label}: NPZ array {key!r}: its header says {dtype} {shape} ({nbytes} bytes) "
            f"but the member holds {held} bytes"
        )
    if shape:
        check_points(shape[0], label, f"NPZ array {key!r}: its row count")
    return shape, fortran, dtype


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, key: str, label: str) -> np.ndarray:
    with zf.open(info) as m:
        shape, fortran, dtype = member_header(m, info, key, label)
        out = np.empty(math.prod(shape), dtype)
        if out.nbytes:
            raw, at = memoryview(out.view(np.uint8)), 0
            while at < out.nbytes:
                got = m.readinto(raw[at : at + _CHUNK])  # zipfile stops at the declared size
                if not got:
                    raise PointCloudError(f"{label}: truncated NPZ: array {key!r} ends after {at} bytes")
                at += got
    return out.reshape(shape[::-1]).transpose() if fortran else out.reshape(shape)


def load_npz(f: BinaryIO, label: str) -> dict[str, np.ndarray]:
    """Every ``.npy`` array of an ``.npz`` archive, checked and loaded without pickle; errors name ``label``."""
    start = f.tell()
    magic = f.read(4)
    f.seek(start)
    if magic not in _ZIP_MAGIC:
        raise PointCloudError(f"{label}: not an NPZ archive (no zip signature)")
    size = remaining_bytes(f)
    try:
        with zipfile.ZipFile(f) as zf:
            members = [i for i in zf.infolist() if i.filename.endswith(".npy")]
            check_members(zf.infolist(), size, label)
            return {i.filename[:-4]: _read_member(zf, i, i.filename[:-4], label) for i in members}
    except PointCloudError:
        raise
    except (ValueError, zipfile.BadZipFile, EOFError, OSError, KeyError, zlib.error) as e:
        raise PointCloudError(f"{label}: {_zip_reason(e)}") from e


_ZIP_REASONS = (  # what zipfile and zlib say, and what it means for an NPZ
    ("File is not a zip file", "truncated or malformed NPZ: no zip directory at its end"),
    (
        "Bad magic number for file header",
        "truncated or malformed NPZ: a member's header is not where the directory says",
    ),
    ("Bad magic number for central directory", "truncated or malformed NPZ: its zip directory is damaged"),
    ("Bad CRC-32 for file", "corrupt NPZ: a member's data fail their CRC-32 check"),
    ("while decompressing data", "corrupt NPZ: a deflated member does not inflate"),
    ("negative seek value", "malformed NPZ: the zip directory points before the start of the file"),
    ("File name in directory", "malformed NPZ: a member's name differs between its header and the directory"),
)


def _zip_reason(e: BaseException) -> str:
    text = one_line(e)
    for needle, reason in _ZIP_REASONS:
        if needle in text:
            return f"{reason} ({text[:80]})" if needle == "Bad CRC-32 for file" else reason
    return f"truncated or malformed NPZ: {text}"


def read_npz(f: BinaryIO, label: str) -> PointCloud:
    """Read a points NPZ from the binary stream ``f``."""
    arrays = load_npz(f, label)
    if "points" not in arrays:
        hint = " (it is a lattice sparse tensor: use read_sparse)" if "coords" in arrays else ""
        raise PointCloudError(f"{label}: NPZ has no 'points' array{hint}; keys: {sorted(arrays)}")
    points = arrays.pop("points")
    if points.ndim != 2 or points.shape[1] != 3 or points.dtype.kind not in "biuf":
        raise PointCloudError(
            f"{label}: NPZ 'points' must be a numeric (N, 3) array, got {points.dtype} {points.shape}"
        )
    n = points.shape[0]
    attrs = {
        k: v
        for k, v in arrays.items()
        if v.ndim in (1, 2) and v.shape[0] == n and v.dtype.kind in "biuf" and k not in ("x", "y", "z")
    }
    attrs, _ = decode_colours(attrs)
    return PointCloud(points, attrs, format="npz", source=label)


def write_npz(f: BinaryIO, cloud: PointCloud, *, compress: bool = False) -> None:
    """Write ``cloud`` as ``points`` plus one array per attribute (zip-deflated if ``compress``)."""
    if "points" in cloud.attributes:
        raise PointCloudError("attribute name 'points' clashes with the NPZ coordinate array")
    save_npz(f, {"points": cloud.points, **cloud.attributes}, compress=compress)


def save_npz(f: BinaryIO, arrays: dict[str, np.ndarray], *, compress: bool = False) -> None:
    """Write ``arrays`` as an ``.npz`` archive without pickle (any key names, unlike ``np.savez``)."""
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(f, "w", compression=mode, allowZip64=True) as zf:
        for name, a in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asanyarray(a), allow_pickle=False)
