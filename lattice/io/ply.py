"""PLY points (ascii, binary little/big endian) through the ``plyfile`` package.

Reading keeps the ``vertex`` element: ``x``, ``y``, ``z`` become the points and every
other scalar property an attribute under its own name (colour as ``red``, ``green``,
``blue``, ``alpha``: ``r/g/b/a`` are renamed and a packed ``rgb`` is split). Writing
stores colour channels as ``uchar`` (PLY's convention; 16-bit LAS colour is scaled down)
unless the cloud came from a PLY, whose colour types are kept. Elements after ``vertex`` (faces,
range grids) are not parsed at all; vertex list properties are skipped. Writing stores a
``(N, K)`` attribute ``a`` as scalar properties ``a_0 … a_{K-1}``.
"""

from __future__ import annotations

import io
import itertools
import warnings
from typing import BinaryIO

import numpy as np

from lattice.io._common import PointCloudError, check_points, native, read_exact, remaining_bytes
from lattice.io._points import PointCloud, stack_points
from lattice.io.kinds import as_8bit_colours, decode_colours

_MAX_HEADER = 1 << 20
_PLY_DTYPES = {np.dtype(t) for t in ("i1", "u1", "i2", "u2", "i4", "u4", "f4", "f8")}


def _plyfile():
    try:
        import plyfile
    except ImportError as e:  # pragma: no cover - dependency missing
        raise PointCloudError(
            "reading and writing PLY needs the 'plyfile' package: pip install plyfile"
        ) from e
    return plyfile


class _Prefixed(io.RawIOBase):
    """A raw stream that yields ``head`` and then the rest of ``tail``."""

    def __init__(self, head: bytes, tail: BinaryIO):
        self._head = memoryview(head)
        self._tail = tail

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._head.nbytes:
            n = min(len(b), self._head.nbytes)
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        return self._tail.readinto(b)


def _header_lines(f: BinaryIO, label: str) -> list[bytes]:
    """The header lines of a PLY file, ``ply`` through ``end_header``."""
    first = f.readline(64)
    if first.rstrip(b"\r\n") != b"ply":
        raise PointCloudError(f"{label}: not a PLY file (it does not start with 'ply')")
    lines = [first]
    size = len(first)
    while lines[-1].strip() != b"end_header":
        line = f.readline(_MAX_HEADER)
        size += len(line)
        if not line or size > _MAX_HEADER:
            raise PointCloudError(f"{label}: not a PLY file or truncated header (no 'end_header' line)")
        if not line.isascii():
            bad = next(b for b in line if b > 127)
            raise PointCloudError(
                f"{label}: PLY header line {len(lines) + 1} is not ASCII text (byte 0x{bad:02x})"
            )
        lines.append(line)
    return lines


def _through_vertex(lines: list[bytes]) -> list[bytes]:
    """The header without the elements after ``vertex`` (so faces are never parsed)."""
    kept, seen_vertex, dropping = [], False, False
    for line in lines[:-1]:
        words = line.split()
        if words[:1] == [b"element"]:
            dropping = seen_vertex
            seen_vertex = seen_vertex or words[1:2] == [b"vertex"]
        if not dropping:
            kept.append(line)
    return kept + lines[-1:]


def _counts(lines: list[bytes], label: str) -> tuple[list[bytes], dict[str, int]]:
    """The header with every element count set to 0, and the declared counts."""
    zeroed, counts = [], {}
    for line in lines:
        words = line.split()
        if words[:1] == [b"element"] and len(words) == 3:
            try:
                counts[words[1].decode("ascii", "replace")] = int(words[2])
            except ValueError:
                raise PointCloudError(f"{label}: malformed PLY element line {line.strip()!r}") from None
            line = b"element " + words[1] + b" 0\n"
        zeroed.append(line)
    return zeroed, counts


def _check_sizes(plyfile, skeleton, counts: dict[str, int], f: BinaryIO, label: str) -> None:
    """Every count up to ``vertex`` against the bytes after the header, then the ceiling.

    Binary rows take at least their scalar sizes plus one length per list property, so a
    header that claims more rows than the file can hold is refused before anything is read.
    """
    left = remaining_bytes(f) if not skeleton.text else None
    need, lists = 0, False
    for element in skeleton.elements:
        n = counts[element.name]
        if n < 0:
            raise PointCloudError(f"{label}: PLY header: element {element.name} has {n} rows, not a count")
        row = 0
        for prop in element.properties:
            is_list = isinstance(prop, plyfile.PlyListProperty)
            lists |= is_list
            row += np.dtype(prop.len_dtype if is_list else prop.val_dtype).itemsize
        need += n * row
        if left is not None and need > left:
            raise PointCloudError(
                f"{label}: truncated PLY {element.name} data: header declares {n} rows "
                f"({need}{' or more' if lists else ''} bytes) but only {left} bytes are present"
            )
    check_points(counts["vertex"], label, "PLY header: element vertex")


def _parse(plyfile, stream: BinaryIO, label: str):
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # plyfile warns on elements with no rows
            return plyfile.PlyData.read(stream, mmap=False)
    except plyfile.PlyParseError as e:
        raise PointCloudError(f"{label}: truncated or malformed PLY: {e}") from e
    except (ValueError, EOFError, OverflowError, MemoryError) as e:
        raise PointCloudError(f"{label}: malformed PLY: {e}") from e


def _read_vertex_data(plyfile, f: BinaryIO, lines: list[bytes], skeleton, counts, label: str) -> np.ndarray:
    """Vertex records, read vectorised when no element up to ``vertex`` has list properties.

    Elements before ``vertex`` are read and dropped. With list properties, plyfile's
    row-by-row reader is the fallback.
    """
    elements = skeleton.elements
    if any(isinstance(p, plyfile.PlyListProperty) for e in elements for p in e.properties):
        return _parse(plyfile, io.BufferedReader(_Prefixed(b"".join(lines), f)), label)["vertex"].data
    for element in elements:
        dtype = element.dtype(skeleton.byte_order)
        count = counts[element.name]
        if skeleton.text:
            data = _read_text_rows(f, dtype, count, label, element.name)
        else:
            data = read_exact(f, dtype, count, label, f"PLY {element.name} data")
    return data


def _read_text_rows(f: BinaryIO, dtype: np.dtype, count: int, label: str, name: str) -> np.ndarray:
    rows = list(itertools.islice(f, count))
    if len(rows) < count:
        raise PointCloudError(
            f"{label}: truncated PLY: header declares {count} {name} rows but only {len(rows)} are present"
        )
    text = b" ".join(rows).decode("ascii", errors="replace")
    try:
        values = np.fromstring(text, dtype=np.float64, sep=" ") if text.strip() else np.zeros(0)
    except ValueError as e:
        raise PointCloudError(f"{label}: PLY {name} data contains a non-numeric value") from e
    width = len(dtype.names)
    if values.size != count * width:
        raise PointCloudError(
            f"{label}: malformed PLY: {count} {name} rows of {width} values expected, got {values.size} values"
        )
    table = values.reshape(count, width)
    out = np.empty(count, dtype=dtype)
    for i, field in enumerate(dtype.names):
        out[field] = table[:, i]
    return out


def read_ply(f: BinaryIO, label: str) -> PointCloud:
    """Read the vertices of a PLY file from the binary stream ``f``."""
    plyfile = _plyfile()
    lines = _through_vertex(_header_lines(f, label))
    zeroed, counts = _counts(lines, label)
    skeleton = _parse(plyfile, io.BytesIO(b"".join(zeroed)), label)
    if "vertex" not in skeleton:
        raise PointCloudError(f"{label}: PLY has no 'vertex' element")
    props = skeleton["vertex"].properties
    names = [p.name for p in props]
    if not {"x", "y", "z"} <= set(names):
        raise PointCloudError(f"{label}: PLY vertex element has no x/y/z properties (it has {names})")
    _check_sizes(plyfile, skeleton, counts, f, label)
    data = _read_vertex_data(plyfile, f, lines, skeleton, counts, label)
    points = stack_points([data[c] for c in ("x", "y", "z")])
    attrs = {
        p.name: native(data[p.name])
        for p in props
        if p.name not in ("x", "y", "z") and not isinstance(p, plyfile.PlyListProperty)
    }
    attrs, _ = decode_colours(attrs)
    meta = {
        "comments": list(skeleton.comments),
        "obj_info": list(skeleton.obj_info),
        "text": bool(skeleton.text),
    }
    return PointCloud(points, attrs, format="ply", source=label, metadata=meta)


def _ply_column(name: str, a: np.ndarray) -> np.ndarray:
    a = native(a)
    if a.dtype == np.bool_:
        return a.astype(np.uint8)
    if a.dtype in _PLY_DTYPES:
        return a
    if a.dtype == np.float16:
        return a.astype(np.float32)
    for t in ("i4", "u4") if a.dtype.kind in "iu" else ():
        info = np.iinfo(t)
        if a.size == 0 or (a.min() >= info.min and a.max() <= info.max):
            return a.astype(t)
    raise PointCloudError(
        f"attribute {name!r} has dtype {a.dtype}, which PLY cannot store (values out of 32-bit range)"
    )


def _vertex_array(cloud: PointCloud) -> np.ndarray:
    cols: dict[str, np.ndarray] = {c: cloud.points[:, i] for i, c in enumerate("xyz")}
    attributes = dict(cloud.attributes)
    if cloud.format != "ply":  # PLY's colour convention: uchar channels
        attributes.update(as_8bit_colours(attributes, cloud.attribute_info()))
    for name, a in attributes.items():
        parts = {name: a} if a.ndim == 1 else {f"{name}_{k}": a[:, k] for k in range(a.shape[1])}
        for key, col in parts.items():
            if key in cols:
                raise PointCloudError(f"attribute {key!r} clashes with another PLY property of that name")
            cols[key] = _ply_column(key, col)
    dtype = np.dtype([(k, v.dtype.newbyteorder("<")) for k, v in cols.items()])
    out = np.empty(len(cloud), dtype=dtype)
    for k, v in cols.items():
        out[k] = v
    return out


def _ascii_line(comment) -> str:
    """A comment as one ASCII header line (PLY headers are ASCII: others become ``?``)."""
    return str(comment).replace("\n", " ").replace("\r", " ").encode("ascii", "replace").decode("ascii")


def write_ply(f: BinaryIO, cloud: PointCloud, *, binary: bool = True) -> None:
    """Write ``cloud`` as a PLY ``vertex`` element (binary little-endian, or ascii)."""
    plyfile = _plyfile()
    comments = [_ascii_line(c) for c in cloud.metadata.get("comments", [])]  # text lines (io.md)
    try:
        element = plyfile.PlyElement.describe(_vertex_array(cloud), "vertex")
        ply = plyfile.PlyData([element], text=not binary, byte_order="<", comments=comments)
    except ValueError as e:
        if isinstance(e, PointCloudError):
            raise
        raise PointCloudError(f"cannot write these attributes as PLY properties: {e}") from e
    ply.write(f)
