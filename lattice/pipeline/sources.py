"""Point sources that hand out chunks, so large files are voxelized in bounded memory.

Streamed (read chunk by chunk from disk; memory is one chunk, whatever the file size):

- KITTI ``.bin`` and nuScenes ``.pcd.bin``: fixed-width float32 rows (checked to look like
  the layout first, unless ``columns=`` names them);
- binary PLY (little or big endian) whose first element is ``vertex`` with scalar
  properties only: the vertex block is read record by record after the header;
- NPZ points archives (stored or deflated) whose arrays are C-ordered: each array
  member is decompressed progressively, rows in step;
- ``.npy`` arrays: memory-mapped, rows copied out a chunk at a time;
- text tables: a first pass counts the rows and decides the column types (whole-number
  colours and ids become integers, as ``read_points`` does), then each chunk parses at
  most ``CHUNK_LINES`` lines.

Everything else (ascii PLY, PLY with list properties or elements before ``vertex``, PCD,
LAS/LAZ, any stream such as stdin) is read whole with ``lattice.io.read_points`` and
sliced. A URL (``s3://...``, ``lattice.io.storage``) streams the same way, in ranged reads
(a ``.npy`` URL is read whole). Whatever the path, the points and attribute names are exactly
what ``read_points`` gives, and every problem is a one-line ``PointCloudError``.
"""

from __future__ import annotations

import contextlib
import os
import tokenize
import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import numpy as np

from lattice.io import PointCloud, PointCloudError, format_from_name, read_points, storage
from lattice.io._common import check_points, check_readable_path, reading
from lattice.io.columns import SKIP, XYZ, parse_columns, split_columns
from lattice.io.formats import FORMATS, canonical_format, reader_with_columns
from lattice.io.kitti import LAYOUTS, check_scan, layout_columns
from lattice.io.npy import npy_layout, npy_parts
from lattice.io.npz import check_members, member_header
from lattice.io.text import CHUNK_LINES, ColumnStats, TextTable, check_count

DEFAULT_CHUNK_POINTS = 1_000_000  # 20 M points at 0.05 m: 838 MiB peak (2 M: 918 MiB), 2 % slower
Chunk = tuple[np.ndarray, dict[str, np.ndarray]]
Location = Path | str  # a local path, or a URL read in ranges (lattice.io.storage)

_PLY_TYPES = {
    "char": "i1", "int8": "i1", "uchar": "u1", "uint8": "u1", "short": "i2", "int16": "i2",
    "ushort": "u2", "uint16": "u2", "int": "i4", "int32": "i4", "uint": "u4", "uint32": "u4",
    "float": "f4", "float32": "f4", "double": "f8", "float64": "f8",
}  # fmt: skip


@dataclass(frozen=True)
class PointSource:
    """A point cloud that can be read in chunks.

    ``attributes`` maps each per-point attribute to ``(dtype, shape after N)``;
    ``streamed`` says whether chunks come from disk (True) or from a cloud in memory.
    ``metadata`` and ``kinds`` are the cloud's (``PointCloud.metadata`` / ``.kinds``: a LAS
    header and CRS records, explicit attribute kinds); ``infos`` (optional) the
    ``AttributeInfo`` of every attribute when the source knows them (colour scales need
    the values: a memory source computes them, a streamed one infers them from the type).
    """

    label: str
    format: str
    num_points: int
    attributes: dict[str, tuple[np.dtype, tuple[int, ...]]]
    streamed: bool
    _read: Callable[[int], Iterator[Chunk]]
    metadata: dict = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    infos: dict | None = None

    def chunks(self, chunk_points: int = DEFAULT_CHUNK_POINTS) -> Iterator[Chunk]:
        """Yield ``(points (n, 3), {attribute: (n, ...)})`` for consecutive runs of points."""
        if chunk_points < 1:
            raise ValueError(f"[PointSource] chunk_points must be positive, got {chunk_points}")
        what = FORMATS[self.format].description if self.format in FORMATS else self.format
        return _guarded(self._read(int(chunk_points)), self.label, what)


def memory_source(cloud: PointCloud, label: str | None = None) -> PointSource:
    """A source over a cloud already in memory (chunks are slices, no copies)."""

    def read(k: int) -> Iterator[Chunk]:
        for s in range(0, max(len(cloud), 1), k):
            yield cloud.points[s : s + k], {a: v[s : s + k] for a, v in cloud.attributes.items()}

    schema = {a: (v.dtype, v.shape[1:]) for a, v in cloud.attributes.items()}
    name = label or cloud.source or "<cloud>"
    return PointSource(
        name,
        cloud.format or "memory",
        len(cloud),
        schema,
        False,
        read,
        metadata=dict(cloud.metadata),
        kinds=dict(cloud.kinds),
        infos=cloud.attribute_info(),
    )


def open_source(
    path_or_file: str | os.PathLike | BinaryIO,
    *,
    format: str | None = None,
    columns: str | Sequence[str] | None = None,
) -> PointSource:
    """A chunked source for a path (streamed where the format allows) or a binary stream (in memory).

    ``format`` and ``columns`` as for ``lattice.io.read_points``.
    """
    if hasattr(path_or_file, "read"):
        return memory_source(read_points(path_or_file, format=format, columns=columns))
    label = os.fspath(path_or_file)
    path = check_readable_path(path_or_file, label)
    fmt = canonical_format(format, label) if format is not None else format_from_name(label)
    names = parse_columns(columns, label)
    if names is not None and fmt is not None:
        reader_with_columns(fmt, label)  # refuses columns= for formats that name their fields
    with reading(label, FORMATS[fmt].description if fmt else "point cloud"):  # hostile bytes: one line
        source = _streamed_source(path, label, fmt, names)
    return source or memory_source(read_points(path, format=format, columns=names), label)


def _streamed_source(path: Location, label: str, fmt: str | None, names) -> PointSource | None:
    """The streamed source of a format that has one, else None (read whole by ``read_points``)."""
    if fmt in LAYOUTS:
        return _scan_source(path, label, fmt, names)
    if fmt == "text":
        return _text_source(path, label, names)
    if fmt == "npy":
        return _npy_source(path, label, names)
    if fmt == "ply":
        return _ply_source(path, label)
    if fmt == "npz":
        return _npz_source(path, label)
    return None


def _fromfile(f: BinaryIO, dtype: np.dtype, count: int) -> np.ndarray:
    """Up to ``count`` items of ``dtype`` read from ``f``: ``np.fromfile`` for an OS file,
    ``readinto`` a new array for a URL's file (no file descriptor)."""
    try:
        f.fileno()
    except (AttributeError, OSError):
        out = np.empty(count, dtype)
        got = f.readinto(out.view(np.uint8)) or 0
        return out[: got // dtype.itemsize]
    return np.fromfile(f, dtype=dtype, count=count)


def _guarded(chunks: Iterator[Chunk], label: str, what: str) -> Iterator[Chunk]:
    """``chunks``, with what hostile bytes raise while streaming as one-line ``PointCloudError``s."""
    with reading(label, what):
        yield from chunks


def _attribute_names(names: tuple[str, ...]) -> list[str]:
    return [a for a in names if a not in XYZ and a != SKIP]


# ---- KITTI / nuScenes / raw float32 columns ---------------------------------------------


def _scan_source(path: Location, label: str, layout: str, names: tuple[str, ...] | None) -> PointSource:
    size = storage.file_size(path) or 0
    if names is None:
        with storage.open_read(path) as f:
            check_scan(f, label, layout)
        names = layout_columns(layout)
    width = len(names)
    if size % (4 * width):
        raise PointCloudError(
            f"{label}: {size} bytes is not a whole number of rows of {width} float32 values "
            f"({','.join(names)} = {4 * width} bytes each)"
        )
    n = check_points(size // (4 * width), label, f"a float32 scan of {size} bytes in rows of {width}")

    def chunk(f: BinaryIO, s: int, m: int) -> Chunk:
        raw = _fromfile(f, np.dtype("<f4"), m * width)
        if raw.size != m * width:
            raise PointCloudError(f"{label}: file shrank while reading ({s + raw.size // width} of {n})")
        return split_columns(raw.reshape(m, width).astype(np.float32, copy=False), names)

    def read(k: int) -> Iterator[Chunk]:
        with storage.open_read(path) as f:
            for s in range(0, n, k):
                yield chunk(f, s, min(k, n - s))  # the raw rows are freed before the chunk is used

    schema = {a: (np.dtype(np.float32), ()) for a in _attribute_names(names)}
    return PointSource(label, layout, n, schema, True, read)


# ---- text tables -------------------------------------------------------------------------


def _text_source(path: Location, label: str, names: tuple[str, ...] | None) -> PointSource:
    """Two passes: one to check every line, count the rows and type the columns; one per ``chunks``."""
    with storage.open_read(path) as f, TextTable(f, label, names) as table:
        layout = table.layout
        stats = ColumnStats(len(layout.names))
        for block in table.blocks():
            stats.add(block)
    check_count(layout, stats.rows, label)
    dtypes = stats.dtypes(layout.names)

    def read(k: int) -> Iterator[Chunk]:
        with storage.open_read(path) as f, TextTable(f, label, names) as t:
            for block in t.blocks(min(k, CHUNK_LINES)):
                yield split_columns(block, layout.names, dtypes)

    schema = {a: (dt, ()) for a, dt in dtypes.items()}
    return PointSource(label, "text", stats.rows, schema, True, read)


# ---- .npy --------------------------------------------------------------------------------


def _npy_source(path: Location, label: str, names: tuple[str, ...] | None) -> PointSource | None:
    """A memory-mapped ``.npy`` (None when it cannot be mapped: ``read_points`` explains, and
    reads a URL's array whole)."""
    if storage.is_url(path):
        return None
    try:
        array = np.load(path, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError, SyntaxError, tokenize.TokenError):  # a header NumPy cannot parse
        return None
    if not isinstance(array, np.ndarray) or array.ndim == 0:
        return None
    layout = npy_layout(array.dtype, array.shape, label, names)
    n = check_points(array.shape[0], label, "NPY header: its row count")
    _, sample = npy_parts(np.array(array[:1]), layout)
    del array

    def read(k: int) -> Iterator[Chunk]:
        mapped = np.load(path, mmap_mode="r", allow_pickle=False)
        for s in range(0, n, k):
            yield npy_parts(np.array(mapped[s : s + k]), layout)

    schema = {a: (v.dtype, v.shape[1:]) for a, v in sample.items()}
    return PointSource(label, "npy", n, schema, True, read)


# ---- binary PLY ------------------------------------------------------------------------


def _ply_header(path: Path) -> tuple[int, str, list[list[str]]] | None:
    """``(header bytes, format word, header lines as words)``, or None when this is not a PLY."""
    with storage.open_read(path) as f:
        if f.readline(64).rstrip(b"\r\n") != b"ply":
            return None
        words, size = [], 0
        while True:
            line = f.readline(1 << 16)
            if not line or size > (1 << 20):
                return None
            words.append(line.decode("ascii", "replace").split())
            if words[-1] == ["end_header"]:
                break
        offset = f.tell()
    fmt = next((w[1] for w in words if w[:1] == ["format"] and len(w) >= 2), "")
    return offset, fmt, words


def _ply_source(path: Location, label: str) -> PointSource | None:
    """A streamed source for a binary PLY that starts with a list-free ``vertex`` element, else None."""
    header = _ply_header(path)
    if header is None:
        return None
    offset, fmt, words = header
    order = {"binary_little_endian": "<", "binary_big_endian": ">"}.get(fmt)
    elements = [i for i, w in enumerate(words) if w[:1] == ["element"]]
    if order is None or not elements or words[elements[0]][1:2] != ["vertex"] or len(words[elements[0]]) != 3:
        return None
    try:
        n = int(words[elements[0]][2])
    except ValueError:
        return None
    fields = []
    for w in words[elements[0] + 1 :]:
        if w[:1] in (["element"], ["end_header"]):
            break
        if w[:1] == ["property"]:
            if len(w) != 3 or w[1] not in _PLY_TYPES:
                return None  # list or unknown type: read_points explains or handles it
            fields.append((w[2], order + _PLY_TYPES[w[1]]))
    names = [f[0] for f in fields]
    if not {"x", "y", "z"} <= set(names) or len(set(names)) != len(names) or n < 0:
        return None
    dtype = np.dtype(fields)
    present = ((storage.file_size(path) or 0) - offset) // dtype.itemsize
    if present < n:
        raise PointCloudError(
            f"{label}: truncated PLY: header declares {n} vertex rows but only {present} are present"
        )
    check_points(n, label, "PLY header: element vertex")
    pdtype = np.float32 if all(dtype[a] == np.float32 for a in "xyz") else np.float64
    attrs = [a for a in names if a not in ("x", "y", "z")]

    def read(k: int) -> Iterator[Chunk]:
        with storage.open_read(path) as f:
            f.seek(offset)
            for s in range(0, n, k):
                rec = _fromfile(f, dtype, min(k, n - s))
                pts = np.stack([rec[a] for a in "xyz"], axis=1).astype(pdtype)
                yield pts, {a: rec[a].astype(rec[a].dtype.newbyteorder("=")) for a in attrs}

    schema = {a: (dtype[a].newbyteorder("="), ()) for a in attrs}
    return PointSource(label, "ply", n, schema, True, read)


# ---- NPZ -------------------------------------------------------------------------------


def _npy_header(
    zf: zipfile.ZipFile, info: zipfile.ZipInfo, label: str
) -> tuple[tuple[int, ...], np.dtype, int] | None:
    with zf.open(info) as m:
        shape, fortran, dtype = member_header(m, info, info.filename[:-4], label)  # sizes checked
        if fortran:
            return None
        return shape, dtype, m.tell()


def _npz_layout(path: Location, label: str) -> tuple[int, tuple, dict[str, tuple]] | None:
    """``(N, points header, {attribute: header})`` of a streamable points NPZ, or None.

    A header is ``(shape, dtype, data offset)``. The members are checked as ``read_points``
    checks them (``lattice.io.npz.check_members``, ``member_header``) before any is read.
    """
    try:
        with storage.open_read(path) as f, zipfile.ZipFile(f) as zf:
            check_members(zf.infolist(), storage.file_size(path) or 0, label)
            headers = {
                i.filename[:-4]: _npy_header(zf, i, label)
                for i in zf.infolist()
                if i.filename.endswith(".npy")
            }
    except PointCloudError:
        raise
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, KeyError, NotImplementedError):
        return None  # read_points gives the precise message
    if any(h is None for h in headers.values()) or "points" not in headers or "format" in headers:
        return None
    points = headers.pop("points")
    shape, pdtype, _ = points
    if len(shape) != 2 or shape[1] != 3 or pdtype.kind not in "biuf":
        return None
    n = shape[0]
    attrs = {
        k: h
        for k, h in headers.items()
        if len(h[0]) in (1, 2) and h[0][0] == n and h[1].kind in "biuf" and k not in ("x", "y", "z")
    }
    return n, points, attrs


def _npz_source(path: Location, label: str) -> PointSource | None:
    layout = _npz_layout(path, label)
    if layout is None:
        return None
    n, points, attrs = layout
    arrays = {"points": points, **attrs}
    pdtype = points[1] if points[1] in (np.float32, np.float64) else np.dtype(np.float64)

    def rows(member, header: tuple, m: int) -> np.ndarray:
        shape, dtype, _ = header
        size = m * int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        data = member.read(size)
        if len(data) != size:
            raise PointCloudError(f"{label}: truncated or malformed NPZ: an array ends early")
        return np.frombuffer(data, dtype=dtype).reshape((m, *shape[1:])).astype(dtype.newbyteorder("="))

    def read(k: int) -> Iterator[Chunk]:
        try:
            with storage.open_read(path) as f, zipfile.ZipFile(f) as zf, contextlib.ExitStack() as stack:
                members = {a: stack.enter_context(zf.open(f"{a}.npy")) for a in arrays}
                for a, member in members.items():
                    member.read(arrays[a][2])  # skip the .npy header
                for s in range(0, n, k):
                    m = min(k, n - s)
                    pts = rows(members["points"], points, m).astype(pdtype, copy=False)
                    yield pts, {a: rows(members[a], h, m) for a, h in attrs.items()}
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            raise PointCloudError(f"{label}: truncated or malformed NPZ: {e}") from e

    schema = {a: (h[1].newbyteorder("="), tuple(h[0][1:])) for a, h in attrs.items()}
    return PointSource(label, "npz", n, schema, True, read)
