"""A LAS file's header as JSON-ready metadata: header fields, VLRs/EVLRs byte for byte, the CRS.

``read_las`` stores ``las_metadata(...)`` in ``PointCloud.metadata``; ``write_las`` reads it
back (``is_las_metadata``, ``records_of``), whatever the cloud's format, so a voxel export
of a LAS input keeps them. Values are JSON types only (the voxelizer stores them in a
sparse NPZ's ``source`` record):

=======================  =====================================================================
key                      value
=======================  =====================================================================
``point_format``         int
``version``              ``"1.2"``, ``"1.4"``, ...
``scales``, ``offsets``  3 floats each
``system_identifier``    str
``generating_software``  str (of the source; the writer writes ``lattice <version>``)
``creation_date``        ISO date string, or None when the header has none
``global_encoding``      int (bit field)
``file_source_id``       int
``guid``                 the project id, a UUID string
``vlrs``, ``evlrs``      ``[{"user_id", "record_id", "description", "data"}]``: ``data`` is
                         base64 of the record's bytes as stored, description as latin-1 text.
                         ExtraBytes (``LASF_Spec`` 4) and LAZ (``laszip encoded`` 22204)
                         records are left out: laspy writes them from the point format.
``extra_dims``           ``[{"name", "attribute", "description"}]``: the extra-bytes
                         dimensions' names as stored (attributes are named in lower case)
``crs``                  ``lattice.io.crs.CRS.to_json()`` or None
``crs_error``            present only when a CRS record could not be parsed (one line)
``comments``             present when the file has lattice's comments record (``lattice`` 1,
                         UTF-8 lines): the text comments of a PLY kept through LAS, and the
                         class table ``lattice model-run`` writes (``class ID NAME R G B``)
=======================  =====================================================================

``write_las`` writes a cloud's ``comments`` (of any format) as that record, so a PLY's
comments survive a LAS round trip and ``lattice render`` names a LAS prediction's classes.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

from lattice.io.crs import crs_from_records

COMMENTS = ("lattice", 1)  # user id, record id of the comments VLR (written from ``comments``)
REGENERATED = frozenset({("LASF_Spec", 4), ("laszip encoded", 22204), COMMENTS})
_VLR_MAX = 65535  # a VLR's length field is 16 bits
_VLR_HEAD = struct.Struct("<H16sHH32s")  # reserved, user id, record id, length, description
_EVLR_HEAD = struct.Struct("<H16sHQ32s")


@dataclass(frozen=True)
class Record:
    """One (E)VLR as stored: user id, record id, description and the raw record bytes."""

    user_id: str
    record_id: int
    description: str
    data: bytes

    def to_json(self) -> dict:
        """``{"user_id", "record_id", "description", "data"}`` with ``data`` in base64."""
        return {
            "user_id": self.user_id,
            "record_id": self.record_id,
            "description": self.description,
            "data": base64.b64encode(self.data).decode("ascii"),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Record:
        """The inverse of ``to_json`` (raises ``ValueError`` for a malformed entry)."""
        try:
            if not isinstance(d, Mapping):
                raise TypeError(f"expected a JSON object, got {type(d).__name__}")
            data = base64.b64decode(str(d["data"]), validate=True)
            return cls(str(d["user_id"]), int(d["record_id"]), str(d.get("description", "")), data)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"malformed LAS record entry {str(d)[:80]}: {e}") from e


def _text(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode("latin-1")


def _read(f: BinaryIO, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise ValueError(f"truncated {what}: {n} bytes declared, {len(data)} present")
    return data


def read_records(f: BinaryIO) -> tuple[list[Record], list[Record]]:
    """The VLRs and EVLRs of the LAS/LAZ file ``f`` (seekable) as stored; raises ``ValueError``."""
    f.seek(0)
    head = _read(f, 227, "LAS header")
    minor = head[25]
    header_size, _, n_vlrs = struct.unpack_from("<HII", head, 94)
    f.seek(header_size)
    vlrs = []
    for i in range(n_vlrs):
        _, uid, rid, length, desc = _VLR_HEAD.unpack(_read(f, _VLR_HEAD.size, f"VLR {i} header"))
        vlrs.append(Record(_text(uid), rid, _text(desc), _read(f, length, f"VLR {i} data")))
    evlrs = []
    if minor >= 4 and header_size >= 247:
        f.seek(235)
        start, n_evlrs = struct.unpack("<QI", _read(f, 12, "LAS 1.4 header"))
        if n_evlrs:
            f.seek(start)
        for i in range(n_evlrs):
            _, uid, rid, length, desc = _EVLR_HEAD.unpack(_read(f, _EVLR_HEAD.size, f"EVLR {i} header"))
            evlrs.append(Record(_text(uid), rid, _text(desc), _read(f, length, f"EVLR {i} data")))
    f.seek(0)
    return vlrs, evlrs


def _laspy_records(vlrs) -> list[Record]:
    """Records as laspy re-serialises them (the fallback when the raw bytes cannot be read)."""
    return [
        Record(v.user_id, int(v.record_id), v.description, bytes(v.record_data_bytes())) for v in vlrs or []
    ]


def _extra_dims(point_format) -> list[dict]:
    return [
        {"name": d.name, "attribute": d.name.lower(), "description": d.description or ""}
        for d in point_format.extra_dimensions
    ]


def las_metadata(las, f: BinaryIO) -> dict:
    """The metadata of a LAS file read by laspy as ``las`` from the seekable stream ``f``."""
    h = las.header
    try:
        vlrs, evlrs = read_records(f)
    except (ValueError, OSError, struct.error):
        vlrs, evlrs = _laspy_records(h.vlrs), _laspy_records(h.evlrs)
    crs, crs_error = crs_from_records((r.user_id, r.record_id, r.data) for r in vlrs + evlrs)
    meta = {
        "point_format": int(h.point_format.id),
        "version": str(h.version),
        "scales": [float(s) for s in h.scales],
        "offsets": [float(o) for o in h.offsets],
        "system_identifier": str(h.system_identifier),
        "generating_software": str(h.generating_software),
        "creation_date": h.creation_date.isoformat() if h.creation_date else None,
        "global_encoding": int(h.global_encoding.value),
        "file_source_id": int(h.file_source_id),
        "guid": str(h.uuid),
        "vlrs": [r.to_json() for r in vlrs if (r.user_id, r.record_id) not in REGENERATED],
        "evlrs": [r.to_json() for r in evlrs if (r.user_id, r.record_id) not in REGENERATED],
        "extra_dims": _extra_dims(h.point_format),
        "crs": crs.to_json() if crs else None,
    }
    if crs_error:
        meta["crs_error"] = crs_error
    comments = [r.data for r in vlrs + evlrs if (r.user_id, r.record_id) == COMMENTS]
    if comments:
        meta["comments"] = comments[0].decode("utf-8", "replace").split("\n")
    return meta


def comments_record(comments) -> bytes | None:
    """The data of lattice's comments VLR for the text lines ``comments`` (whole lines, at most
    64 KiB), or None when there are none."""
    data = b""
    for line in comments or []:
        raw = str(line).replace("\n", " ").encode("utf-8")
        if len(data) + len(raw) + 1 > _VLR_MAX:
            break
        data += (b"\n" if data else b"") + raw
    return data or None


def is_las_metadata(meta: Mapping[str, Any]) -> bool:
    """True when ``meta`` holds a LAS header (what ``las_metadata`` makes, or its older subset)."""
    return all(k in meta for k in ("point_format", "scales", "offsets"))


def records_of(meta: Mapping[str, Any], key: str) -> list[Record]:
    """The kept VLRs (``key="vlrs"``) or EVLRs (``"evlrs"``) of LAS metadata."""
    records = [Record.from_json(d) for d in meta.get(key) or []]
    return [r for r in records if (r.user_id, r.record_id) not in REGENERATED]


__all__ = [
    "COMMENTS",
    "REGENERATED",
    "Record",
    "comments_record",
    "is_las_metadata",
    "las_metadata",
    "read_records",
    "records_of",
]
