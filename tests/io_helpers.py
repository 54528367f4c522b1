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
