"""Hostile files for tests/test_hostile_files.py and tests/test_hostile_mutations.py, rebuilt
from the descriptions of the fuzz campaign's breaks (issue 22), never copied from anywhere.

Each builder returns the file's bytes. They start from a small synthetic file (or a real
one of ``../shared/data``) and patch the numbers the break was about.
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np

from lattice.io import PointCloud, write_points, write_sparse


def patched(data: bytes, offset: int, fmt: str, value: int) -> bytes:
    """``data`` with the little-endian ``fmt`` number at ``offset`` set to ``value``."""
    out = bytearray(data)
    struct.pack_into("<" + fmt, out, offset, value)
    return bytes(out)


def cloud(n: int = 200, seed: int = 0) -> PointCloud:
    """A small cloud with an integer, a float and a colour attribute."""
    rng = np.random.default_rng(seed)
    return PointCloud(
        rng.uniform(-5, 5, (n, 3)).astype(np.float32),
        {
            "intensity": rng.integers(0, 1000, n).astype(np.uint16),
            "label": rng.integers(0, 5, n).astype(np.int32),
            "red": rng.integers(0, 256, n).astype(np.uint8),
        },
    )


def written(name: str, c: PointCloud | None = None, **kwargs) -> bytes:
    """``c`` (default ``cloud()``) written by lattice in the format of ``name``."""
    buf = io.BytesIO()
    write_points(buf, cloud() if c is None else c, format=name.rsplit(".", 1)[-1], **kwargs)
    return buf.getvalue()


# ---- LAS ---------------------------------------------------------------------------------


def las14_with_evlr(n: int = 50) -> bytes:
    """A LAS 1.4 (point format 6) file with one EVLR after its points, written by laspy."""
    import laspy

    header = laspy.LasHeader(point_format=6, version="1.4")
    las = laspy.LasData(header)
    rng = np.random.default_rng(1)
    las.x, las.y, las.z = (rng.uniform(0, 10, n) for _ in range(3))
    las.evlrs = laspy.vlrs.vlrlist.VLRList([laspy.VLR("lattice_test", 7, b"an evlr", b"x" * 100)])
    buf = io.BytesIO()
    las.write(buf)
    return buf.getvalue()


def laszip_fields(data: bytes) -> tuple[int, int]:
    """``(start of the laszip VLR's data, start of the chunk table)`` of the LAZ ``data``."""
    vlr = data.index(b"laszip encoded") - 2
    table = int.from_bytes(data[int.from_bytes(data[96:100], "little") :][:8], "little", signed=True)
    if table == -1:
        table = int.from_bytes(data[-8:], "little", signed=True)
    return vlr + 54, table


# ---- sparse NPZ --------------------------------------------------------------------------


def sparse_with_batch(batch: int = 2**31 - 1) -> bytes:
    """A 2-row sparse tensor with batch ids 0 and ``batch``."""
    buf = io.BytesIO()
    coords = np.array([[0, 1, 2, 3], [batch, 1, 2, 3]], np.int32)
    write_sparse(buf, coords, np.ones((2, 1), np.float32))
    return buf.getvalue()


# ---- PCD binary_compressed ------------------------------------------------------------------

_PCD_XYZ = (
    "VERSION 0.7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH {n}\nHEIGHT 1\n"
    "VIEWPOINT 0 0 0 1 0 0 0\nPOINTS {n}\nDATA binary_compressed\n"
)


def max_tokens(usize: int) -> bytes:
    """An LZF stream of ``usize`` (>= 1) zero bytes: one literal, then maximal back-references
    (264 bytes from 3, distance 1: LZF's ~88x), then literal runs for the rest."""
    long, rest = divmod(usize - 1, 264)
    literals = b"".join(
        bytes([k - 1]) + bytes(k) for k in [32] * (rest // 32) + ([rest % 32] if rest % 32 else [])
    )
    return b"\x00\x00" + b"\xe0\xff\x00" * long + literals


def pcd_lzf(
    points: int, *, csize: int | None = None, usize: int | None = None, decoded: int | None = None
) -> bytes:
    """An x, y, z float32 ``binary_compressed`` PCD of ``points`` points whose payload is
    ``max_tokens(decoded)`` (default: exactly the points' bytes); ``csize`` / ``usize``
    override the two sizes the payload is announced with."""
    need = points * 12
    payload = max_tokens(need if decoded is None else decoded)
    head = struct.pack("<II", len(payload) if csize is None else csize, need if usize is None else usize)
    return _PCD_XYZ.format(n=points).encode() + head + payload


# ---- NPZ zip bomb --------------------------------------------------------------------------


def npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """A version 1.0 ``.npy`` header announcing ``shape`` (whatever follows it)."""
    text = repr({"descr": descr, "fortran_order": False, "shape": shape})
    pad = 64 - (10 + len(text) + 1) % 64
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text) + pad + 1) + text.encode() + b" " * pad + b"\n"


def zip_of(entries: list[tuple[str, int, bytes, int, int]]) -> bytes:
    """A zip of ``(name, method (0 stored, 8 deflated), data as stored, crc32, size)`` entries
    (no zip64: sizes below 4 GiB)."""
    local, central = b"", b""
    for name, method, data, crc, size in entries:
        n = name.encode()
        head = struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, method, 0, 0, crc, len(data), size, len(n), 0)
        central += (
            struct.pack(
                "<IHHHHHHIIIHHHHHII",
                0x02014B50,
                20,
                20,
                0,
                method,
                0,
                0,
                crc,
                len(data),
                size,
                len(n),
                0,
                0,
                0,
                0,
                0,
                len(local),
            )
            + n
        )
        local += head + n + data
    count = len(entries)
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, count, count, len(central), len(local), 0)
    return local + central + end


def stored(name: str, data: bytes) -> tuple[str, int, bytes, int, int]:
    """A ``zip_of`` entry holding ``data`` uncompressed."""
    return name, 0, data, zlib.crc32(data), len(data)


def deflated_zeros(
    name: str, shape: tuple[int, ...], chunk: int = 12 << 20
) -> tuple[str, int, bytes, int, int]:
    """A ``zip_of`` entry: a ``.npy`` of float32 zeros of ``shape``, deflated at ~1030x (true
    sizes, true CRC). The zeros are deflated in ``chunk``-byte blocks, each after a full flush,
    so one block's bytes are repeated instead of compressing gigabytes."""
    header = npy_header(shape)
    total = int(np.prod(shape)) * 4
    assert total % chunk == 0, (total, chunk)
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH)
    zeros = bytes(chunk)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)  # after a full flush, the same bytes again
    crc = zlib.crc32(header)
    for _ in range(total // chunk):
        crc = zlib.crc32(zeros, crc)
    return name, 8, head + block * (total // chunk) + c.flush(), crc, len(header) + total


def npz_zip_bomb(rows: int = 178_257_920) -> bytes:
    """A ~2 MB points NPZ whose one member is ``rows`` x 3 float32 zeros (2.1 GB at the
    default): true sizes, a true CRC, only a ratio no real cloud has."""
    return zip_of([deflated_zeros("points.npy", (rows, 3))])
