"""PCL ``.pcd`` files: ``DATA ascii``, ``binary`` and ``binary_compressed`` (LZF).

Every field becomes an attribute under its PCD name (``COUNT > 1`` gives an ``(N, COUNT)``
array); ``x``, ``y``, ``z`` become the points. Padding fields named ``_`` are dropped.
PCL's packed colour fields (``rgb`` as float32 bits, ``rgba`` as uint32, ``0xAARRGGBB``)
are decoded into uint8 ``red``, ``green``, ``blue`` (and ``alpha``) channels; the writer
packs colour channels back into one such field (the source's field and type when the cloud
came from a PCD, else ``rgb`` float32, or ``rgba`` uint32 with an alpha channel).
NaN points (invalid pixels of organised clouds) are kept. Old v.5 headers without
``VIEWPOINT`` are accepted; ``WIDTH``, ``HEIGHT`` and ``VIEWPOINT`` are kept in metadata.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from lattice.io import lzf
from lattice.io._common import PointCloudError, check_points, native, read_exact, remaining_bytes
from lattice.io._points import PointCloud, stack_points
from lattice.io.kinds import as_8bit_colours, colour_channels_of, decode_colours, encode_packed_colour

DATA_MODES = ("ascii", "binary", "binary_compressed")
_TYPES = {"F": "f", "I": "i", "U": "u"}
_KEYS = (
    "VERSION",
    "FIELDS",
    "COLUMNS",
    "SIZE",
    "TYPE",
    "COUNT",
    "WIDTH",
    "HEIGHT",
    "VIEWPOINT",
    "POINTS",
    "DATA",
)
_MAX_LINE = 1 << 16
_MAX_LINES = 1024
_DEFAULT_VIEWPOINT = (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)


@dataclass(frozen=True)
class PCDHeader:
    """A parsed PCD header. ``dtypes[i]`` is the little-endian scalar type of field ``i``."""

    fields: tuple[str, ...]
    dtypes: tuple[np.dtype, ...]
    counts: tuple[int, ...]
    width: int
    height: int
    viewpoint: tuple[float, ...]
    points: int
    data: str
    version: str

    @property
    def record_size(self) -> int:
        """Bytes of one point (computed, so a hostile COUNT builds no dtype)."""
        return sum(t.itemsize * c for t, c in zip(self.dtypes, self.counts, strict=True))

    def record_dtype(self) -> np.dtype:
        """Packed structured dtype of one point (fields named ``f0``, ``f1``, ...)."""
        return np.dtype(
            [
                (f"f{i}", (t, c) if c > 1 else t)
                for i, (t, c) in enumerate(zip(self.dtypes, self.counts, strict=True))
            ]
        )


def _header_lines(f: BinaryIO, label: str) -> dict[str, list[str]]:
    entries: dict[str, list[str]] = {}
    for _ in range(_MAX_LINES):
        raw = f.readline(_MAX_LINE)
        if not raw:
            break
        line = raw.decode("ascii", errors="replace").strip()
        if not line or line.startswith("#"):
            continue
        key, *values = line.split()
        if key.upper() not in _KEYS:
            raise PointCloudError(
                f"{label}: not a PCD file or malformed header (unexpected line {line[:60]!r})"
            )
        entries[key.upper()] = values
        if key.upper() == "DATA":
            return entries
    raise PointCloudError(f"{label}: not a PCD file or truncated header (no DATA line)")


def _ints(entries: dict[str, list[str]], key: str, label: str, default: list[int] | None = None) -> list[int]:
    if key not in entries:
        if default is None:
            raise PointCloudError(f"{label}: PCD header has no {key} line")
        return default
    try:
        return [int(v) for v in entries[key]]
    except ValueError:
        raise PointCloudError(f"{label}: PCD {key} must be integers, got {entries[key]}") from None


def _int1(entries: dict[str, list[str]], key: str, label: str, default: int | None = None) -> int:
    values = _ints(entries, key, label, None if default is None else [default])
    if len(values) != 1:
        raise PointCloudError(f"{label}: PCD {key} must be one integer, got {entries[key]}")
    return values[0]


def _field_dtype(size: int, kind: str, name: str, label: str) -> np.dtype:
    code = _TYPES.get(kind.upper())
    if code is None or size not in (1, 2, 4, 8) or (code == "f" and size not in (4, 8)):
        raise PointCloudError(f"{label}: unknown PCD field type for {name!r}: TYPE {kind} SIZE {size}")
    return np.dtype(f"<{code}{size}")


def parse_header(f: BinaryIO, label: str) -> PCDHeader:
    """Read and validate a PCD header from ``f``, leaving ``f`` at the first data byte."""
    e = _header_lines(f, label)
    fields = tuple(e.get("FIELDS", e.get("COLUMNS", [])))
    if not fields:
        raise PointCloudError(f"{label}: PCD header has no FIELDS line")
    n = len(fields)
    named = [name for name in fields if name != "_"]
    if len(set(named)) != len(named):
        raise PointCloudError(f"{label}: PCD FIELDS repeats a name: {list(fields)}")
    sizes = _ints(e, "SIZE", label)
    kinds = e.get("TYPE")
    counts = _ints(e, "COUNT", label, [1] * n)
    if kinds is None:
        raise PointCloudError(f"{label}: PCD header has no TYPE line")
    if not len(sizes) == len(kinds) == len(counts) == n:
        raise PointCloudError(
            f"{label}: PCD header lists {n} FIELDS but {len(sizes)} SIZE, {len(kinds)} TYPE, {len(counts)} COUNT"
        )
    if min(counts) < 1:
        raise PointCloudError(f"{label}: PCD COUNT values must be positive, got {counts}")
    dtypes = tuple(_field_dtype(s, k, name, label) for s, k, name in zip(sizes, kinds, fields, strict=True))
    width = _int1(e, "WIDTH", label)
    height = _int1(e, "HEIGHT", label, 1)
    points = _int1(e, "POINTS", label, width * height)
    if width < 0 or height < 0 or points != width * height:
        raise PointCloudError(
            f"{label}: PCD header says POINTS {points} but WIDTH x HEIGHT = {width} x {height}"
        )
    data = (e["DATA"] or [""])[0].lower()
    if data not in DATA_MODES:
        raise PointCloudError(f"{label}: unknown PCD DATA mode {data!r} (expected one of {DATA_MODES})")
    try:
        viewpoint = tuple(float(v) for v in e.get("VIEWPOINT", _DEFAULT_VIEWPOINT))
    except ValueError:
        raise PointCloudError(f"{label}: PCD VIEWPOINT must be 7 numbers, got {e['VIEWPOINT']}") from None
    version = (e.get("VERSION") or ["?"])[0]
    return PCDHeader(fields, dtypes, tuple(counts), width, height, viewpoint, points, data, version)


def _truncated(h: PCDHeader, label: str, what: str, need: str, left: int) -> PointCloudError:
    return PointCloudError(
        f"{label}: truncated PCD {what}: header declares {need} but only {left} bytes are present"
    )


def _read_ascii(f: BinaryIO, h: PCDHeader, label: str) -> list[np.ndarray]:
    need = h.points * sum(h.counts)
    left = remaining_bytes(f)
    if left is not None and 2 * need - 1 > left:  # a value and a separator each, at the least
        raise _truncated(h, label, "ascii data", f"{h.points} points ({need} values)", left)
    check_points(h.points, label, "PCD header: POINTS")
    text = f.read().decode("ascii", errors="replace")
    try:
        values = np.fromstring(text, dtype=np.float64, sep=" ") if text.strip() else np.zeros(0)
    except ValueError as e:
        raise PointCloudError(f"{label}: PCD ascii data contains a non-numeric value") from e
    per_point = sum(h.counts)
    need = h.points * per_point
    if values.size != need:
        what = "truncated PCD ascii data" if values.size < need else "PCD ascii data has extra values"
        raise PointCloudError(
            f"{label}: {what}: header declares {h.points} points ({need} values) but {values.size} values are present"
        )
    table = values.reshape(h.points, per_point)
    starts = np.cumsum((0,) + h.counts)
    return [table[:, a:b].astype(t) for a, b, t in zip(starts[:-1], starts[1:], h.dtypes, strict=True)]


def _read_binary(f: BinaryIO, h: PCDHeader, label: str) -> list[np.ndarray]:
    need, left = h.points * h.record_size, remaining_bytes(f)
    if left is not None and need > left:  # before a dtype of the header's COUNTs is built
        raise _truncated(h, label, "binary data", f"{h.points} items ({need} bytes)", left)
    check_points(h.points, label, "PCD header: POINTS")
    records = read_exact(f, h.record_dtype(), h.points, label, "PCD binary data")
    return [records[f"f{i}"].reshape(h.points, c) for i, c in enumerate(h.counts)]


def _read_compressed(f: BinaryIO, h: PCDHeader, label: str) -> list[np.ndarray]:
    head = f.read(8)
    if len(head) < 8:
        raise PointCloudError(f"{label}: truncated PCD binary_compressed data (missing the size header)")
    csize, usize = struct.unpack("<II", head)
    expected = h.points * h.record_size
    if usize != expected:
        raise PointCloudError(
            f"{label}: PCD binary_compressed header says {usize} bytes uncompressed but {h.points} points "
            f"need {expected}"
        )
    left = remaining_bytes(f)
    if left is not None and csize > left:
        raise PointCloudError(
            f"{label}: truncated PCD binary_compressed data: {csize} compressed bytes declared, {left} present"
        )
    if usize > lzf.MAX_RATIO * csize:
        raise PointCloudError(
            f"{label}: corrupt PCD binary_compressed data: {csize} compressed bytes cannot hold the "
            f"{usize} bytes of {h.points} points (LZF expands at most {lzf.MAX_RATIO}x)"
        )
    check_points(h.points, label, "PCD header: POINTS")
    payload = f.read(csize)
    if len(payload) < csize:
        raise PointCloudError(
            f"{label}: truncated PCD binary_compressed data: {csize} compressed bytes declared, "
            f"{len(payload)} present"
        )
    try:
        raw = lzf.decompress(payload, usize)  # exactly usize bytes, or an error before allocating them
    except lzf.LZFError as e:
        raise PointCloudError(f"{label}: corrupt PCD binary_compressed data: {e}") from e
    cols, at = [], 0
    for t, c in zip(h.dtypes, h.counts, strict=True):  # field-major layout: all of field 0, then field 1, ...
        nbytes = h.points * t.itemsize * c
        cols.append(raw[at : at + nbytes].view(t).reshape(h.points, c))
        at += nbytes
    return cols


_READERS = {"ascii": _read_ascii, "binary": _read_binary, "binary_compressed": _read_compressed}


def read_pcd(f: BinaryIO, label: str) -> PointCloud:
    """Read a PCD file from the binary stream ``f``."""
    h = parse_header(f, label)
    missing = [c for c in "xyz" if c not in h.fields]
    if missing:
        raise PointCloudError(f"{label}: PCD has no {'/'.join(missing)} field (fields: {list(h.fields)})")
    cols = dict(zip(h.fields, _READERS[h.data](f, h, label), strict=True))
    xyz = [cols[c] for c in "xyz"]
    if any(c.shape[1] != 1 for c in xyz):
        raise PointCloudError(f"{label}: PCD x, y, z fields must have COUNT 1")
    points = stack_points(xyz)
    attrs = {
        name: native(col[:, 0] if col.shape[1] == 1 else col)
        for name, col in cols.items()
        if name not in ("x", "y", "z", "_")
    }
    attrs, packing = decode_colours(attrs)
    meta = {
        "width": h.width,
        "height": h.height,
        "viewpoint": h.viewpoint,
        "version": h.version,
        "data": h.data,
    }
    if packing is not None:
        meta["colour_packing"] = packing
    return PointCloud(points, attrs, format="pcd", source=label, metadata=meta)


def _pcd_type(a: np.ndarray) -> tuple[np.ndarray, str, int]:
    if a.dtype == np.bool_:
        a = a.astype(np.uint8)
    elif a.dtype == np.float16:
        a = a.astype(np.float32)
    return a.astype(a.dtype.newbyteorder("<"), copy=False), a.dtype.kind.upper(), a.dtype.itemsize


def _packed_colour(cloud: PointCloud) -> tuple[str, np.ndarray] | None:
    """The cloud's colour channels as one PCL packed field ``(name, (N, 1) array)``, or None."""
    channels = colour_channels_of(cloud.attributes)
    if not channels:
        return None
    packing = cloud.metadata.get("colour_packing") if cloud.format == "pcd" else None
    if not isinstance(packing, dict) or packing.get("field") not in ("rgb", "rgba"):
        packing = {"field": "rgba", "type": "U"} if "alpha" in channels else {"field": "rgb", "type": "F"}
    colours = as_8bit_colours(cloud.attributes, cloud.attribute_info())
    packed = encode_packed_colour(colours, as_float=packing.get("type") == "F")
    return packing["field"], packed.reshape(-1, 1)


def _columns(cloud: PointCloud) -> list[tuple[str, np.ndarray]]:
    cols = [(c, cloud.points[:, i : i + 1]) for i, c in enumerate("xyz")]
    packed = _packed_colour(cloud)
    channels = set(colour_channels_of(cloud.attributes)) if packed else set()
    for k, v in cloud.attributes.items():
        if k in channels:
            if packed is not None:
                cols.append(packed)  # in the place of the first colour channel
                packed = None
            continue
        cols.append((k, v.reshape(len(cloud), math.prod(v.shape[1:]))))  # -1 fails on 0 rows
    names = [name for name, _ in cols]
    if len(set(names)) != len(names):
        raise PointCloudError(f"PCD field names would repeat: {names}")
    for name, _ in cols:
        if not name.isprintable() or any(ch.isspace() for ch in name):
            raise PointCloudError(f"attribute name {name!r} cannot be a PCD field name (no spaces)")
    return cols


def _header_text(cloud: PointCloud, fields: list[tuple[str, np.ndarray, str, int]], data: str) -> bytes:
    n = len(cloud)
    meta = cloud.metadata if cloud.format == "pcd" else {}
    width, height = meta.get("width", n), meta.get("height", 1)
    if width * height != n:
        width, height = n, 1
    viewpoint = tuple(meta.get("viewpoint", _DEFAULT_VIEWPOINT))
    lines = [
        "# .PCD v0.7 - Point Cloud Data file format",
        "VERSION 0.7",
        "FIELDS " + " ".join(name for name, *_ in fields),
        "SIZE " + " ".join(str(size) for *_, size in fields),
        "TYPE " + " ".join(kind for *_, kind, _ in fields),
        "COUNT " + " ".join(str(a.shape[1]) for _, a, *_ in fields),
        f"WIDTH {width}",
        f"HEIGHT {height}",
        "VIEWPOINT " + " ".join(f"{float(v):.17g}" for v in viewpoint),
        f"POINTS {n}",
        f"DATA {data}",
    ]
    return ("\n".join(lines) + "\n").encode("ascii")


def write_pcd(f: BinaryIO, cloud: PointCloud, *, data: str = "binary") -> None:
    """Write ``cloud`` as PCD v0.7 with ``DATA`` ``ascii``, ``binary`` or ``binary_compressed``."""
    if data not in DATA_MODES:
        raise PointCloudError(f"PCD data mode must be one of {DATA_MODES}, got {data!r}")
    fields = [(name, *_pcd_type(a)) for name, a in _columns(cloud)]
    f.write(_header_text(cloud, fields, data))
    arrays = [a for _, a, *_ in fields]
    if data == "ascii":
        _write_ascii(f, arrays)
    elif data == "binary":
        rec = np.empty(len(cloud), dtype=[(f"f{i}", (a.dtype, a.shape[1])) for i, a in enumerate(arrays)])
        for i, a in enumerate(arrays):
            rec[f"f{i}"] = a
        f.write(rec.tobytes())
    else:
        raw = b"".join(np.ascontiguousarray(a).tobytes() for a in arrays)
        packed = lzf.compress(raw)
        f.write(struct.pack("<II", len(packed), len(raw)))
        f.write(packed)


def _write_ascii(f: BinaryIO, arrays: list[np.ndarray]) -> None:
    if not arrays[0].shape[0]:
        return
    fmts = []
    for a in arrays:
        fmt = {"f": "%.9g" if a.dtype.itemsize == 4 else "%.17g", "i": "%d", "u": "%d"}[a.dtype.kind]
        fmts += [fmt] * a.shape[1]
    table = np.empty(arrays[0].shape[0], dtype=[(f"c{i}", a.dtype) for i, a in enumerate(_split(arrays))])
    for i, a in enumerate(_split(arrays)):
        table[f"c{i}"] = a
    np.savetxt(f, table, fmt=fmts, delimiter=" ")


def _split(arrays: list[np.ndarray]) -> list[np.ndarray]:
    return [a[:, k] for a in arrays for k in range(a.shape[1])]
