"""Mutations of a small valid file of every reader (issue 22): truncations at every 1/64 of
the file, byte flips in the header region, header numbers replaced by 0, -1, 2^31 - 1,
2^32 - 1 and 2^63, and random flips (hypothesis). Each mutant reads, or raises a one-line
``PointCloudError`` naming the file; nothing else is raised, no read takes long, and no read
needs more memory than the process is allowed (1 GiB above what it holds when the test
starts: a budget that failed would show as "not enough memory").
"""

from __future__ import annotations

import io
import re
import resource
import struct
import time
from contextlib import contextmanager

import numpy as np
import pytest
from hostile_helpers import cloud, las14_with_evlr, laszip_fields, written
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lattice.io import PointCloud, PointCloudError, read_points, read_sparse, write_sparse
from lattice.pipeline import describe_cloud, describe_sparse, open_source

SPECIAL = (0, -1, 2**31 - 1, 2**32 - 1, 2**63)
SLOW = 5.0  # seconds for one read, generous for a 2-core machine under load


def _lists_ply() -> bytes:
    """A binary PLY whose vertices carry a list property (plyfile's row-by-row path)."""
    rows = b"".join(struct.pack("<fffB", i, -i, 0.5 * i, 2) + struct.pack("<ii", i, i + 1) for i in range(16))
    head = (
        b"ply\nformat binary_little_endian 1.0\nelement vertex 16\nproperty float x\nproperty float y\n"
        b"property float z\nproperty list uchar int ids\nend_header\n"
    )
    return head + rows


def _sparse() -> bytes:
    buf = io.BytesIO()
    coords = np.array([[b, x, x % 3, -x] for b in (0, 4) for x in range(15)], np.int32)
    write_sparse(buf, coords, np.arange(60, dtype=np.float32).reshape(30, 2), voxel_size=0.5, compress=True)
    return buf.getvalue()


def _kitti() -> bytes:
    c = cloud(64)
    return written("a.bin", PointCloud(c.points, {"intensity": c.attributes["intensity"].astype(np.float32)}))


SEEDS = {
    "binary.ply": lambda: written("a.ply", cloud(64)),
    "lists.ply": _lists_ply,
    "ascii.ply": lambda: written("a.ply", cloud(32), binary=False),
    "binary.pcd": lambda: written("a.pcd", cloud(64)),
    "ascii.pcd": lambda: written("a.pcd", cloud(32), binary=False),
    "compressed.pcd": lambda: written("a.pcd", cloud(64), compress=True),
    "stored.npz": lambda: written("a.npz", cloud(64)),
    "deflated.npz": lambda: written("a.npz", cloud(64), compress=True),
    "tensor.npz": _sparse,
    "small.las": lambda: written("a.las", cloud(64)),
    "evlr.las": las14_with_evlr,
    "small.laz": lambda: written("a.laz", cloud(64)),
    "points.npy": lambda: written("a.npy", PointCloud(cloud(64).points)),
    "table.csv": lambda: written("a.csv", cloud(32)),
    "scan.bin": _kitti,
}


def _vm_bytes() -> int:
    with open("/proc/self/status") as f:
        return int(re.search(r"VmSize:\s+(\d+) kB", f.read()).group(1)) * 1024


@contextmanager
def bounded_memory(extra: int = 1 << 30):
    """The process may map at most ``extra`` more bytes inside the block (soft RLIMIT_AS)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = _vm_bytes() + extra
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


STREAMED = ("binary.ply", "stored.npz", "deflated.npz", "points.npy", "table.csv", "scan.bin")


def attempt_streamed(path, data: bytes, what: str) -> None:
    """The mutant through ``open_source`` and every chunk (what voxelize reads), as ``attempt``."""
    path.write_bytes(data)
    start = time.monotonic()
    try:
        for _ in open_source(path).chunks(16):
            pass
    except PointCloudError as e:
        message = str(e)
        assert message.startswith(f"{path}: ") and "\n" not in message, (what, message)
        assert "not enough memory" not in message, (what, message)
    assert time.monotonic() - start < SLOW, what


def attempt(name: str, data: bytes, what: str) -> None:
    """Read (and describe) the mutant ``data`` as the file ``name``: success or one clean line."""
    buf = io.BytesIO(data)
    buf.name = name
    start = time.monotonic()
    try:
        if name == "tensor.npz":
            describe_sparse(read_sparse(buf))
        else:
            describe_cloud(read_points(buf))
    except PointCloudError as e:
        message = str(e)
        assert message.startswith(f"{name}: ") and "\n" not in message, (what, message)
        assert "not enough memory" not in message, (what, message)
    seconds = time.monotonic() - start
    assert seconds < SLOW, (what, seconds)


# ---- where the headers and their numbers are ------------------------------------------


def header_end(name: str, data: bytes) -> int:
    """Bytes of ``data`` that make up its header (text headers through their last line)."""
    for marker in (b"end_header\n", b"DATA binary_compressed\n"):
        if marker in data[:4096]:
            return data.index(marker) + len(marker) + (8 if b"compressed" in marker else 0)
    if b"\nDATA " in data[:4096]:
        return data.index(b"\n", data.index(b"\nDATA ") + 1) + 1
    if name.endswith((".las", ".laz")):
        return int.from_bytes(data[96:100], "little") + 8
    if name.endswith(".npy"):
        return 10 + int.from_bytes(data[8:10], "little")
    return min(len(data), 160)


def _text_numbers(data: bytes, end: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of every integer in the text header ``data[:end]``."""
    return [m.span() for m in re.finditer(rb"(?<![\w.])-?\d+(?![\w.])", data[:end])]


def _fields(name: str, data: bytes) -> list[tuple[int, str]]:
    """``(offset, struct code)`` of the binary header numbers of ``data``."""
    if name.endswith((".las", ".laz")):
        fields = [(94, "H"), (96, "I"), (100, "I"), (104, "B"), (105, "H"), (107, "I")]
        header_size = int.from_bytes(data[94:96], "little")
        if data[25] >= 4:
            fields += [(235, "Q"), (243, "I"), (247, "Q")]
            evlr = int.from_bytes(data[235:243], "little")
            if 0 < evlr < len(data) - 28:
                fields.append((evlr + 20, "Q"))
        if int.from_bytes(data[100:104], "little"):
            fields.append((header_size + 20, "H"))
        if name.endswith(".laz"):  # what lazrs allocates by: the laszip VLR and the chunk table
            vlr, table = laszip_fields(data)
            fields += [(vlr + o, c) for o, c in ((0, "H"), (12, "I"), (32, "H"), (36, "H"))]
            fields += [(int.from_bytes(data[96:100], "little"), "q"), (table + 4, "I")]
        return fields
    if name.endswith(".npz"):
        fields = []
        for m in re.finditer(rb"PK\x03\x04", data):
            fields += [(m.start() + o, c) for o, c in ((18, "I"), (22, "I"), (26, "H"))]
        for m in re.finditer(rb"PK\x01\x02", data):
            fields += [(m.start() + o, c) for o, c in ((20, "I"), (24, "I"), (28, "H"), (42, "I"))]
        end = data.rfind(b"PK\x05\x06")
        fields += [(end + o, c) for o, c in ((8, "H"), (10, "H"), (12, "I"), (16, "I"))]
        return fields
    if name == "compressed.pcd":
        at = data.index(b"DATA binary_compressed\n") + len(b"DATA binary_compressed\n")
        return [(at, "I"), (at + 4, "I")]
    return []


def mutants(name: str, data: bytes):
    """``(description, bytes)`` of every deterministic mutation of ``data``."""
    n = len(data)
    for k in range(64):
        yield f"truncated to {k}/64", data[: n * k // 64]
    end = header_end(name, data)
    step = max(1, end // 96)
    for i in range(0, end, step):
        yield f"byte {i} flipped", data[:i] + bytes([data[i] ^ 0xFF]) + data[i + 1 :]
    if name.endswith((".ply", ".pcd", ".npy", ".npz")):
        for a, b in _text_numbers(data, end if not name.endswith(".npz") else min(n, 4096)):
            for v in SPECIAL:
                yield f"number at {a} = {v}", data[:a] + str(v).encode() + data[b:]
    for offset, code in _fields(name, data):
        width = struct.calcsize(code)
        for v in SPECIAL:
            value = v % (1 << (8 * width))
            if offset + width <= n:
                yield (
                    f"{code} at {offset} = {v}",
                    data[:offset] + value.to_bytes(width, "little") + data[offset + width :],
                )


@pytest.mark.parametrize("name", list(SEEDS))
def test_mutants_read_or_fail_in_one_line(name):
    data = SEEDS[name]()
    attempt(name, data, "the seed")  # the seed itself reads
    with bounded_memory():
        for what, mutant in mutants(name, data):
            attempt(name, mutant, what)


@pytest.mark.parametrize("name", STREAMED)
def test_streamed_mutants_read_or_fail_in_one_line(tmp_path, name):
    data = SEEDS[name]()
    with bounded_memory():
        for what, mutant in mutants(name, data):
            attempt_streamed(tmp_path / name, mutant, what)


@pytest.mark.parametrize("name", list(SEEDS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_flips_read_or_fail_in_one_line(name, data):
    seed = SEEDS[name]()
    end = min(len(seed), max(header_end(name, seed), 64))
    flips = data.draw(
        st.lists(st.tuples(st.integers(0, end - 1), st.integers(0, 255)), min_size=1, max_size=6)
    )
    cut = data.draw(st.integers(end, len(seed)))
    mutant = bytearray(seed[:cut])
    for at, value in flips:
        mutant[at] = value
    with bounded_memory():
        attempt(name, bytes(mutant), f"flips {flips}, cut at {cut}")


COMPRESSED = ("compressed.pcd", "deflated.npz", "tensor.npz", "small.laz")


@pytest.mark.parametrize("name", COMPRESSED)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_flips_in_compressed_payloads_read_or_fail_in_one_line(name, data):
    seed = SEEDS[name]()
    start = header_end(name, seed)
    flips = data.draw(
        st.lists(st.tuples(st.integers(start, len(seed) - 1), st.integers(0, 255)), min_size=1, max_size=4)
    )
    mutant = bytearray(seed)
    for at, value in flips:
        mutant[at] = value
    with bounded_memory():
        attempt(name, bytes(mutant), f"payload flips {flips}")
