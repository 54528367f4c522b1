"""Slow, obviously-correct helpers for tests/test_io.py (reference LZF decoder, data paths)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


def lzf_decompress_reference(data: bytes) -> bytes:
    """Byte-by-byte liblzf decoder (the algorithm of lzf_d.c), for checking the fast one."""
    out = bytearray()
    i = 0
    while i < len(data):
        ctrl = data[i]
        i += 1
        if ctrl < 32:
            out += data[i : i + ctrl + 1]
            i += ctrl + 1
            continue
        length = ctrl >> 5
        if length == 7:
            length += data[i]
            i += 1
        ref = len(out) - ((ctrl & 31) << 8) - data[i] - 1
        i += 1
        for _ in range(length + 2):
            out.append(out[ref])
            ref += 1
    return bytes(out)


def las_records_reference(path) -> list[tuple[str, int, bytes]]:
    """Every VLR and EVLR of a LAS/LAZ file as ``(user_id, record_id, data)``, read field by field."""
    import struct

    raw = Path(path).read_bytes()
    header_size, _, n_vlrs = struct.unpack_from("<HII", raw, 94)
    out, pos = [], header_size
    for _ in range(n_vlrs):
        user = raw[pos + 2 : pos + 18].split(b"\0")[0].decode()
        record_id, length = struct.unpack_from("<HH", raw, pos + 18)
        out.append((user, record_id, raw[pos + 54 : pos + 54 + length]))
        pos += 54 + length
    if raw[25] >= 4:
        pos, n_evlrs = struct.unpack_from("<QI", raw, 235)
        for _ in range(n_evlrs):
            user = raw[pos + 2 : pos + 18].split(b"\0")[0].decode()
            (record_id,) = struct.unpack_from("<H", raw, pos + 18)
            (length,) = struct.unpack_from("<Q", raw, pos + 20)
            out.append((user, record_id, raw[pos + 60 : pos + 60 + length]))
            pos += 60 + length
    return out
