"""The fixed LAS header, parsed and checked by lattice before laspy sees the file.

laspy trusts the header's numbers: a VLR count of 2^32 - 1 makes its VLR loop run four
billion times, an EVLR length of 2^63 becomes one ``read``. ``check_las_header`` reads the
fixed header with ``struct`` (little-endian, as the format is) and refuses, in one line
naming the file and the lie, a header whose numbers the file cannot hold:

- signature ``LASF``, version 1.0-1.5, a header size at least that version's and no
  larger than the offset to the points, which lies within the file;
- VLRs: ``count x 54`` header bytes between the header and the points, and each VLR
  (walked) ending before the points;
- point format 0-10 (LAZ: the compression bits set) with records at least its size;
- the point count (LAS 1.4's 64-bit count from 1.4 on, else the legacy one) within
  ``max_points()`` and, for uncompressed LAS, ``count x record length`` within the bytes
  after the offset. LAZ's compressed size cannot be checked this way: the ceiling applies,
  and the numbers lazrs allocates by are checked, since lazrs aborts the process when an
  allocation fails: the laszip VLR's point items must add up to the record length, a
  fixed chunk size must keep one chunk's points within ``MAX_CHUNK_BYTES``, the chunk
  table must lie inside the point data with no more chunks than bytes before it, and a
  fixed chunk size must cover the points (``count <= chunks x chunk size``);
- LAS 1.4 EVLRs: start after the point offset, ``count x 60`` header bytes and each
  EVLR (walked) within the file.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import BinaryIO

from lattice.io._common import PointCloudError, check_points, remaining_bytes

_FIXED = struct.Struct("<4sHH16sBB32s32sHHHIIBHI")  # through the legacy point count: 111 bytes
_LAS14 = struct.Struct("<QIQ")  # start of the first EVLR, EVLR count, 64-bit point count (at 235)
_HEADER_SIZES = {0: 227, 1: 227, 2: 227, 3: 235, 4: 375, 5: 393}  # by minor version
_RECORD_SIZES = (20, 28, 26, 34, 57, 63, 30, 36, 38, 59, 67)  # by point format
_VLR_HEAD, _EVLR_HEAD = 54, 60


@dataclass(frozen=True)
class LasHeader:
    """The fixed-header numbers lattice checks (``point_format`` without the LAZ bits)."""

    version: tuple[int, int]
    header_size: int
    point_offset: int
    vlrs: int
    point_format: int
    compressed: bool
    record_length: int
    points: int
    evlr_start: int
    evlrs: int


def parse_las_header(head: bytes, label: str) -> LasHeader:
    """The numbers of the fixed header ``head`` (the file's first 375 bytes, or all of a shorter one)."""
    if len(head) < 227 or head[:4] != b"LASF":
        what = "no LASF signature" if head[:4] != b"LASF" else f"{len(head)} bytes, shorter than a LAS header"
        raise PointCloudError(f"{label}: not a LAS file ({what})")
    (_, _, _, _, major, minor, _, _, _, _, hsize, offset, vlrs, fmt, rlen, legacy) = _FIXED.unpack_from(head)
    if major != 1 or minor not in _HEADER_SIZES:
        raise PointCloudError(f"{label}: LAS header says version {major}.{minor}; lattice reads LAS 1.0-1.5")
    evlr_start = evlrs = 0
    points = legacy
    if minor >= 4:
        if len(head) < 255:
            raise PointCloudError(f"{label}: truncated LAS 1.{minor} header: {len(head)} bytes of 375")
        evlr_start, evlrs, points = _LAS14.unpack_from(head, 235)
    # laspy's rule: bit 7 set and bit 6 clear means compressed
    compressed = bool(fmt & 0x80) and not fmt & 0x40
    header = LasHeader(
        (major, minor), hsize, offset, vlrs, fmt & 0x3F, compressed, rlen, points, evlr_start, evlrs
    )
    return header


def _check_layout(h: LasHeader, size: int, label: str) -> None:
    need = _HEADER_SIZES[h.version[1]]
    if h.header_size < need:
        raise PointCloudError(
            f"{label}: LAS header says its size is {h.header_size} bytes, less than the {need} of LAS 1.{h.version[1]}"
        )
    if h.point_offset > size:
        raise PointCloudError(
            f"{label}: LAS header says the points start at byte {h.point_offset} but the file has {size} bytes"
        )
    if h.header_size > h.point_offset:
        raise PointCloudError(
            f"{label}: LAS header says its size is {h.header_size} bytes but the points start at byte {h.point_offset}"
        )
    room = h.point_offset - h.header_size
    if h.vlrs * _VLR_HEAD > room:
        raise PointCloudError(
            f"{label}: LAS header says {h.vlrs} VLRs but only {room} bytes lie between the header and the points"
        )
    if h.point_format >= len(_RECORD_SIZES):
        raise PointCloudError(f"{label}: LAS header says point format {h.point_format}; formats are 0-10")
    base = _RECORD_SIZES[h.point_format]
    if h.record_length < base:
        raise PointCloudError(
            f"{label}: LAS header says records of {h.record_length} bytes, less than the {base} of point format "
            f"{h.point_format}"
        )


def _walk(
    f: BinaryIO, start: int, count: int, head: int, length: str, end: int, what: str, label: str
) -> dict:
    """Each of ``count`` records from ``start`` (a ``head``-byte header: user id at byte 2, record
    id at 18, record length, ``struct`` format ``length``, at 20) must end by ``end``.

    Returns ``{(user id, record id): (data start, length)}``.
    """
    pos, fmt, found = start, struct.Struct("<16sH" + length), {}
    for i in range(count):
        f.seek(pos + 2)
        raw = f.read(fmt.size)
        if len(raw) < fmt.size:
            raise PointCloudError(
                f"{label}: truncated LAS: {what} {i} of {count} starts past the end of the file"
            )
        user, record, n = fmt.unpack(raw)
        found.setdefault((user.split(b"\0", 1)[0], record), (pos + head, n))
        pos += head + n
        if pos > end:
            raise PointCloudError(
                f"{label}: LAS {what} {i} of {count} ends at byte {pos}, past "
                f"{'the start of the points' if what == 'VLR' else 'the end of the file'} at byte {end}"
            )
    return found


def _read_at(f: BinaryIO, pos: int, fmt: struct.Struct) -> tuple | None:
    f.seek(pos)
    raw = f.read(fmt.size)
    return fmt.unpack(raw) if len(raw) == fmt.size else None


_LASZIP = struct.Struct("<HHBBHIIqqH")  # the laszip VLR's fixed part, through its item count
_LAZ_ITEM = struct.Struct("<HHH")  # type, size, version
MAX_CHUNK_BYTES = 256 << 20  # the most bytes of one LAZ chunk's points lazrs may decode at once


def _check_laz(f: BinaryIO, h: LasHeader, vlrs: dict, size: int, label: str) -> None:
    """The numbers lazrs allocates by, before it allocates (it aborts the process, not raises,
    when an allocation fails): the laszip VLR's items and chunk size, the chunk table's place
    and chunk count, and the point count against the chunks."""
    entry = vlrs.get((b"laszip encoded", 22204))
    if entry is None:
        raise PointCloudError(
            f"{label}: LAS header marks the points as LAZ-compressed (point format byte "
            f"{h.point_format | 0x80}) but the file has no laszip VLR"
        )
    start, length = entry
    fixed = _read_at(f, start, _LASZIP) if length >= _LASZIP.size else None
    if fixed is None:
        raise PointCloudError(
            f"{label}: LAZ: its laszip VLR has {length} bytes, less than the {_LASZIP.size} it needs"
        )
    compressor, chunk_size, items = fixed[0], fixed[6], fixed[9]
    if not 1 <= items <= (length - _LASZIP.size) // _LAZ_ITEM.size:
        raise PointCloudError(f"{label}: LAZ: its laszip VLR lists {items} point items in {length} bytes")
    f.seek(start + _LASZIP.size)
    sizes = sum(s for _, s, _ in _LAZ_ITEM.iter_unpack(f.read(items * _LAZ_ITEM.size)))
    if sizes != h.record_length:
        raise PointCloudError(
            f"{label}: LAZ: its laszip VLR describes points of {sizes} bytes but the header says {h.record_length}"
        )
    if compressor not in (2, 3):  # not chunked: no chunk table
        return
    if chunk_size != 0xFFFFFFFF and not 0 < chunk_size * h.record_length <= MAX_CHUNK_BYTES:
        raise PointCloudError(
            f"{label}: LAZ: chunks of {chunk_size} points of {h.record_length} bytes would be decoded "
            f"{chunk_size * h.record_length} bytes at a time (lattice allows 1 to {MAX_CHUNK_BYTES >> 20} MiB)"
        )
    _check_chunk_table(f, h, chunk_size, size, label)


def _check_chunk_table(f: BinaryIO, h: LasHeader, chunk_size: int, size: int, label: str) -> None:
    q = struct.Struct("<q")
    offset = (_read_at(f, h.point_offset, q) or (None,))[0]
    if offset == -1 and size >= 8:  # written by a streaming encoder: the offset is at the end
        offset = _read_at(f, size - 8, q)[0]
    lo, hi = h.point_offset + 8, size - 8
    if offset is None or not lo <= offset <= hi:
        raise PointCloudError(
            f"{label}: truncated or malformed LAZ: its chunk table is said to start at byte {offset}, "
            f"outside the point data (bytes {lo}..{hi})"
        )
    _, chunks = _read_at(f, offset, struct.Struct("<II"))
    if chunks > offset - lo:
        raise PointCloudError(
            f"{label}: LAZ: its chunk table lists {chunks} chunks but only {offset - lo} bytes of points precede it"
        )
    if chunk_size != 0xFFFFFFFF and h.points > chunks * chunk_size:
        raise PointCloudError(
            f"{label}: LAZ header says {h.points} points but its chunk table lists {chunks} chunks "
            f"of at most {chunk_size} points"
        )


def check_las_header(f: BinaryIO, label: str) -> LasHeader:
    """Parse and check the LAS/LAZ header of the seekable ``f`` (see the module docs); ``f`` is
    left at its start. Raises ``PointCloudError`` naming the file and the number that lies."""
    f.seek(0)
    size = remaining_bytes(f)
    h = parse_las_header(f.read(375), label)
    if size is None:  # pragma: no cover - open_input always gives a seekable file
        f.seek(0)
        return h
    _check_layout(h, size, label)
    vlrs = _walk(f, h.header_size, h.vlrs, _VLR_HEAD, "H", h.point_offset, "VLR", label)
    if h.compressed:
        _check_laz(f, h, vlrs, size, label)
    else:
        need, left = h.points * h.record_length, size - h.point_offset
        if need > left:
            raise PointCloudError(
                f"{label}: truncated LAS: header says {h.points} points of {h.record_length} bytes ({need} bytes) "
                f"but only {left} bytes follow the start of the points"
            )
    check_points(h.points, label, "LAS header: the point count")
    if h.evlrs:
        if h.evlr_start < h.point_offset or h.evlr_start + h.evlrs * _EVLR_HEAD > size:
            raise PointCloudError(
                f"{label}: LAS header says {h.evlrs} EVLR{'s' if h.evlrs > 1 else ''} from byte {h.evlr_start}, "
                "but EVLRs must lie "
                f"between the start of the points (byte {h.point_offset}) and the end of the file (byte {size})"
            )
        _walk(f, h.evlr_start, h.evlrs, _EVLR_HEAD, "Q", size, "EVLR", label)
    f.seek(0)
    return h


__all__ = ["LasHeader", "check_las_header", "parse_las_header"]
