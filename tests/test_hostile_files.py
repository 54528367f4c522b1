"""Hostile files (issue 22, the reader part): every break of the fuzz campaign, rebuilt from
its description (``hostile_helpers``), through the installed ``lattice info`` in a process
limited to 2 GiB of address space: exit 1, exactly one stderr line naming the file, fast,
no traceback. Then the budgets at library level: ``LATTICE_MAX_POINTS``, the NPZ member
checks, LZF's output cap, the sparse batch count, empty clouds and the reader boundary.
"""

from __future__ import annotations

import functools
import io
import json
import os
import resource
import struct
import subprocess
import time
import zipfile
from dataclasses import replace

import numpy as np
import pytest
from cli_helpers import LATTICE, address_space_limit, command_start_seconds, data_file
from hostile_helpers import (
    cloud,
    deflated_zeros,
    las14_with_evlr,
    laszip_fields,
    max_tokens,
    npy_header,
    npz_zip_bomb,
    patched,
    pcd_lzf,
    sparse_with_batch,
    stored,
    written,
    zip_of,
)

from lattice.io import PointCloud, PointCloudError, lzf, read_points, read_sparse, write_points, write_sparse
from lattice.io._common import max_points
from lattice.io.formats import FORMATS
from lattice.io.npz import NPZ_FREE_BYTES
from lattice.pipeline import describe_file
from lattice.settings import DEFAULT_MAX_POINTS

FAST = 10.0  # seconds, above what starting the command costs here (command_start_seconds)


def _limit(limit: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def info(path, *args, env=None) -> tuple[subprocess.CompletedProcess, float]:
    """``lattice info PATH ARGS`` under the address-space limit: the result and its seconds."""
    start = time.monotonic()
    r = subprocess.run(
        [*LATTICE, "info", str(path), *args],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=functools.partial(_limit, address_space_limit()),
        env=env,
    )
    return r, time.monotonic() - start


def refused(path, fragment: str, env=None) -> str:
    """``lattice info`` on ``path`` fails fast with one line ``lattice: error: <path>: ...fragment...``."""
    r, seconds = info(path, env=env)
    lines = r.stderr.splitlines()
    assert r.returncode == 1, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    assert len(lines) == 1, r.stderr[-2000:]
    assert lines[0].startswith(f"lattice: error: {path}: "), lines[0]
    assert fragment in lines[0], lines[0]
    assert "Traceback" not in r.stderr and "MemoryError" not in r.stderr
    assert seconds < FAST + command_start_seconds(), seconds
    return lines[0]


def _simple_las() -> bytes:
    return data_file("aerial_lidar/simple.las").read_bytes()


def _ign_laz() -> bytes:
    return data_file("aerial_lidar/ign_lidarhd/test_data_77050_627760_LA93_IGN69.laz").read_bytes()


def _evlr_at(data: bytes) -> int:
    return int.from_bytes(data[235:243], "little")


def _vlr_room() -> bytes:
    mvk = data_file("aerial_lidar/pdal_extra/mvk-thin.las").read_bytes()
    return patched(mvk, 100, "I", 2**32 - 1)


def _npz_lying_shape() -> bytes:
    return zip_of([stored("points.npy", npy_header((2**40, 3)) + bytes(120))])


def _npz_lying_size() -> bytes:
    buf = io.BytesIO()
    np.savez_compressed(buf, points=np.random.default_rng(0).random((100, 3)))
    data = buf.getvalue()
    central = data.rindex(b"PK\x01\x02")
    return patched(
        patched(data, central + 24, "I", 2**32 - 1), data.index(b"PK\x03\x04") + 22, "I", 2**32 - 1
    )


def _npz_overlapping() -> bytes:
    """Two central-directory entries for one member: the overlap a better zip bomb repeats."""
    buf = io.BytesIO()
    np.savez(buf, points=np.zeros((10, 3), np.float32))
    data = buf.getvalue()
    cd = data.rindex(b"PK\x01\x02")
    end = data.rindex(b"PK\x05\x06")
    entry = data[cd:end]
    twin = entry.replace(b"points.npy", b"pointz.npy")
    tail = bytearray(data[end:])
    tail[8:10] = tail[10:12] = (2).to_bytes(2, "little")
    tail[12:16] = (2 * len(entry)).to_bytes(4, "little")
    return data[:cd] + entry + twin + bytes(tail)


def _sparse_bomb() -> bytes:
    real = zipfile.ZipFile(io.BytesIO(sparse_with_batch(5)))
    entries = [
        stored(i.filename, real.read(i.filename)) for i in real.infolist() if i.filename != "feats.npy"
    ]
    return zip_of([*entries, deflated_zeros("feats.npy", (178_257_920, 3))])


# (name, bytes builder, fragment of the one error line)
HOSTILE = [
    ("vlr_count.las", lambda: patched(_simple_las(), 100, "I", 2**32 - 1),
     "LAS header says 4294967295 VLRs but only 0 bytes lie between the header and the points"),
    ("vlr_count_with_vlrs.las", _vlr_room, "LAS header says 4294967295 VLRs but only 3087 bytes lie"),
    ("evlr_count.las", lambda: patched(las14_with_evlr(), 243, "I", 2**32 - 1), "4294967295 EVLRs from byte 1875"),
    ("evlr_start.las", lambda: patched(las14_with_evlr(), 235, "Q", 2**63), "1 EVLR from byte 9223372036854775808"),
    ("evlr_length.las", lambda: patched(las14_with_evlr(), _evlr_at(las14_with_evlr()) + 20, "Q", 2**63),
     "LAS EVLR 0 of 1 ends at byte 9223372036854777743, past the end of the file at byte 2035"),
    ("point_count.las", lambda: patched(_simple_las(), 107, "I", 2**32 - 1),
     "truncated LAS: header says 4294967295 points of 34 bytes (146028888030 bytes) but only 36210 bytes"),
    ("point_count_14.las", lambda: patched(las14_with_evlr(), 247, "Q", 2**63), "header says 9223372036854775808 points"),
    ("point_count.laz", lambda: patched(_ign_laz(), 247, "Q", 10**9),
     "LAZ header says 1000000000 points but its chunk table lists 2 chunks of at most 50000 points"),
    ("laz_chunk_size.laz", lambda: patched(_ign_laz(), laszip_fields(_ign_laz())[0] + 12, "I", 2**31 - 1),
     "LAZ: chunks of 2147483647 points of 38 bytes would be decoded 81604378586 bytes at a time"),
    ("laz_chunks.laz", lambda: patched(_ign_laz(), laszip_fields(_ign_laz())[1] + 4, "I", 2**32 - 1),
     "its chunk table lists 4294967295 chunks but only 205972 bytes of points precede it"),
    ("laz_items.laz", lambda: patched(_ign_laz(), laszip_fields(_ign_laz())[0] + 32, "H", 0),
     "its laszip VLR lists 0 point items"),
    ("laz_item_size.laz", lambda: patched(_ign_laz(), laszip_fields(_ign_laz())[0] + 36, "H", 999),
     "its laszip VLR describes points of 1007 bytes but the header says 38"),
    ("laz_table.laz", lambda: patched(_ign_laz(), 1947, "q", 2**62), "its chunk table is said to start at byte"),
    ("point_offset.las", lambda: patched(_simple_las(), 96, "I", 2**32 - 1),
     "LAS header says the points start at byte 4294967295 but the file has 36437 bytes"),
    ("header_size.las", lambda: patched(_simple_las(), 94, "H", 65535),
     "LAS header says its size is 65535 bytes but the points start at byte 227"),
    ("header_size_small.las", lambda: patched(_simple_las(), 94, "H", 100),
     "LAS header says its size is 100 bytes, less than the 227 of LAS 1.2"),
    ("point_format.las", lambda: patched(_simple_las(), 104, "B", 11), "point format 11; formats are 0-10"),
    ("lzf_lies.pcd", lambda: pcd_lzf(20_000_000, decoded=20_000_000 * 12 - 2640),
     "LZF stream decodes to 239997360 bytes, expected 240000000"),
    ("lzf_csize.pcd", lambda: pcd_lzf(20_000_000, csize=2**32 - 1), "4294967295 compressed bytes declared"),
    ("lzf_ratio.pcd", lambda: pcd_lzf(20_000_000, csize=1000), "1000 compressed bytes cannot hold the 240000000 bytes"),
    ("lzf_usize.pcd", lambda: pcd_lzf(20_000_000, usize=2**32 - 1),
     "header says 4294967295 bytes uncompressed but 20000000 points need 240000000"),
    ("zip_bomb.npz", npz_zip_bomb, "NPZ members claim 2139095168 bytes once decompressed, from a 2080661-byte file"),
    ("zip_bomb_sparse.npz", _sparse_bomb, "refused as a zip bomb"),
    ("npy_shape.npz", _npz_lying_shape, "its header says float32 (1099511627776, 3)"),
    ("zip_size.npz", _npz_lying_size, "claims 4294967295 bytes from"),
    ("zip_overlap.npz", _npz_overlapping, "overlap in the file"),
    ("negative.ply", lambda: written("a.ply").replace(b"element vertex 200", b"element vertex -1"),
     "PLY header: element vertex has -1 rows, not a count"),
    ("count_lists.ply", lambda: written("a.ply").replace(b"element vertex 200", b"element vertex 2147483647")
     .replace(b"end_header", b"property list uchar int extra\nend_header"), "truncated PLY vertex data"),
    ("points.pcd", lambda: written("a.pcd").replace(b"WIDTH 200", b"WIDTH 2147483647")
     .replace(b"POINTS 200", b"POINTS 2147483647"), "truncated PCD binary data: header declares 2147483647"),
    ("count.pcd", lambda: written("a.pcd").replace(b"COUNT 1 1 1", b"COUNT 1 1 4294967295"), "truncated PCD binary data"),
    ("shape.npy", lambda: written("a.npy").replace(b"(200, 6)", b"(2147483647, 6)"),
     "its header says float32 (2147483647, 6)"),
    ("tokens.npy", lambda: written("a.npy").replace(b"'shape'", b"'sh\x00pe'"), "malformed .npy header"),
    ("tokens.npz", lambda: zip_of([stored("points.npy", npy_header((4, 3))[:-8] + b"(\n     \n" + bytes(48))]),
     "malformed .npy header"),
    ("truncated.laz", lambda: _ign_laz()[: len(_ign_laz()) * 2 // 3], "truncated or malformed LAZ: its chunk table"),
    ("no_laszip.laz", lambda: patched(_simple_las(), 104, "B", 0x83), "no laszip VLR"),
    ("latin1.ply", lambda: written("a.ply").replace(b"element vertex", b"\xe9lement vertex"),
     "PLY header line 3 is not ASCII text (byte 0xe9)"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "build", "fragment"), HOSTILE, ids=[h[0] for h in HOSTILE])
def test_lattice_info_refuses_hostile_files_fast_in_one_line(tmp_path, name, build, fragment):
    path = tmp_path / name
    path.write_bytes(build())
    refused(path, fragment)


def test_a_huge_batch_id_costs_nothing(tmp_path):
    path = tmp_path / "batch.npz"
    path.write_bytes(sparse_with_batch(2**31 - 1))
    r, seconds = info(path, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert (d["rows"], d["batches"], d["batch_ids"], d["rows_per_batch"]) == (2, 2, [0, 2**31 - 1], [1, 1])
    assert seconds < FAST + command_start_seconds()


def test_lzf_at_its_largest_ratio_reads_in_bounded_memory(tmp_path):
    """88x LZF (what the fuzzer's PCD had): the old expansion needed ~48 bytes per output byte,
    2.9 GB for these 60 MB; it now fits under the limit with the cloud and its description."""
    path = tmp_path / "max_ratio.pcd"
    path.write_bytes(pcd_lzf(5_000_000))
    r, _ = info(path)  # real work (60 MB decoded and described): bounded by info's timeout, not timed
    assert r.returncode == 0, r.stderr
    assert "points      5000000 (float32)" in r.stdout


def test_the_ceiling_is_read_from_the_environment(tmp_path):
    path = tmp_path / "a.laz"
    path.write_bytes(_ign_laz())
    env = dict(os.environ, LATTICE_MAX_POINTS="1000")
    refused(
        path,
        "LAS header: the point count is 56035 points, above the ceiling of 1000 (LATTICE_MAX_POINTS)",
        env,
    )


# ---- library level ---------------------------------------------------------------------------


def _named(data: bytes, name: str) -> io.BytesIO:
    buf = io.BytesIO(data)
    buf.name = name
    return buf


def test_max_points_default_and_override(monkeypatch):
    monkeypatch.delenv("LATTICE_MAX_POINTS", raising=False)
    assert max_points() == DEFAULT_MAX_POINTS == 2**31 - 1
    monkeypatch.setenv("LATTICE_MAX_POINTS", "1_000")
    assert max_points() == 1000
    for bad in ("0", "-5", "many"):
        monkeypatch.setenv("LATTICE_MAX_POINTS", bad)
        with pytest.raises(PointCloudError, match="LATTICE_MAX_POINTS must be a positive integer"):
            max_points()


CEILING_FORMATS = ["a.ply", "a.pcd", "a.npz", "a.npy", "a.las", "a.laz", "a.csv", "a.bin"]


@pytest.mark.parametrize("name", CEILING_FORMATS)
def test_every_reader_applies_the_ceiling(monkeypatch, name):
    c = cloud(200)
    if name == "a.bin":
        c = PointCloud(c.points, {"intensity": c.attributes["intensity"].astype(np.float32)})
    if name == "a.npy":
        c = PointCloud(c.points)
    data = written(name, c)
    monkeypatch.setenv("LATTICE_MAX_POINTS", "200")
    assert len(read_points(_named(data, name))) == 200
    monkeypatch.setenv("LATTICE_MAX_POINTS", "199")
    with pytest.raises(PointCloudError, match=r"200 points, above the ceiling of 199 \(LATTICE_MAX_POINTS\)"):
        read_points(_named(data, name))


def test_pcd_modes_apply_the_ceiling(monkeypatch):
    monkeypatch.setenv("LATTICE_MAX_POINTS", "10")
    for kwargs in ({"binary": False}, {"compress": True}):
        with pytest.raises(PointCloudError, match="PCD header: POINTS is 200 points, above the ceiling"):
            read_points(_named(written("a.pcd", **kwargs), "a.pcd"))


def test_zipped_members_are_checked_before_decoding():
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_BZIP2) as z:
        with z.open("points.npy", "w") as m:
            np.lib.format.write_array(m, np.zeros((5, 3)))
    with pytest.raises(
        PointCloudError, match="uses zip compression method 12; NPZ members are stored or deflated"
    ):
        read_points(_named(buf.getvalue(), "a.npz"))
    stored = written("a.npz")
    first = stored.index(b"PK\x01\x02")
    with pytest.raises(PointCloudError, match="is stored uncompressed in .* bytes but claims 7"):
        read_points(_named(patched(stored, first + 24, "I", 7), "a.npz"))


def test_compressible_npz_below_the_free_budget_reads():
    zeros = np.zeros((1_000_000, 3), np.float32)  # 12 MB of zeros: ~1000x, under NPZ_FREE_BYTES
    data = written("a.npz", PointCloud(zeros, {"label": np.zeros(1_000_000, np.int32)}), compress=True)
    assert len(data) * 256 < zeros.nbytes < NPZ_FREE_BYTES
    assert len(read_points(_named(data, "a.npz"))) == 1_000_000


def test_lzf_decodes_to_exactly_its_cap():
    data = max_tokens(100_000)
    assert lzf.decompress(data, 100_000).tobytes() == bytes(100_000)
    with pytest.raises(lzf.LZFError, match="decodes to 100000 bytes, expected 99999"):
        lzf.decompress(data, 99_999)
    with pytest.raises(lzf.LZFError, match="cannot decode to 10000000 bytes"):
        lzf.decompress(data[:100], 10_000_000)


def test_sparse_spans_and_world_bounds_are_checked(tmp_path):
    lo, hi = -(2**31), 2**31 - 1
    coords = np.array([[0, lo, lo, lo], [0, hi, hi, hi]], np.int32)
    with pytest.raises(PointCloudError, match="coordinates span too large .*x -2147483648..2147483647"):
        write_sparse(tmp_path / "a.npz", coords, np.ones((2, 1)))
    with pytest.raises(PointCloudError, match="puts voxel faces beyond float64"):
        write_sparse(
            tmp_path / "a.npz", np.eye(2, 4, dtype=np.int32), np.ones((2, 1)), voxel_size=1e300, stride=2**30
        )
    ok = np.array([[0, 0, 0, 0], [2**31 - 1, 5, 5, 5]], np.int32)
    write_sparse(tmp_path / "b.npz", ok, np.ones((2, 1)))
    assert read_sparse(tmp_path / "b.npz").num_rows == 2


def test_describe_sparse_counts_the_batches_present(tmp_path):
    coords = np.array([[0, 1, 1, 1], [0, 2, 1, 1], [7, 0, 0, 0]], np.int32)
    write_sparse(tmp_path / "a.npz", coords, np.ones((3, 1)))
    d = describe_file(tmp_path / "a.npz")
    assert (d["batches"], d["batch_ids"], d["rows_per_batch"]) == (2, [0, 7], [2, 1])


EMPTY = [
    ("e.ply", {}),
    ("ea.ply", {"binary": False}),
    ("e.pcd", {}),
    ("ea.pcd", {"binary": False}),
    ("ec.pcd", {"compress": True}),
    ("e.npz", {}),
    ("ez.npz", {"compress": True}),
    ("e.las", {}),
    ("e.laz", {}),
    ("e.csv", {}),
    ("e.npy", {}),
]


@pytest.mark.parametrize(("name", "kwargs"), EMPTY, ids=[e[0] for e in EMPTY])
def test_empty_clouds_read_and_describe(tmp_path, name, kwargs):
    attrs = (
        {}
        if name.endswith(".npy")
        else {"intensity": np.zeros(0, np.uint16), "n": np.zeros((0, 2), np.float32)}
    )
    if name.endswith((".las", ".laz")):
        attrs = {"intensity": np.zeros(0, np.uint16)}
    write_points(tmp_path / name, PointCloud(np.zeros((0, 3)), attrs), **kwargs)
    c = read_points(tmp_path / name)
    assert len(c) == 0 and c.points.shape == (0, 3)
    d = describe_file(tmp_path / name)
    assert d["points"] == 0 and d["bounds"] is None


def test_empty_cloud_through_the_cli(tmp_path):
    (tmp_path / "e.csv").write_text("x,y,z,intensity\n")
    r, _ = info(tmp_path / "e.csv")
    assert r.returncode == 0, r.stderr
    assert "points      0 (float64)" in r.stdout and "bounds" not in r.stdout


BOUNDARY = [
    (MemoryError(), "x.ply: not enough memory to read this PLY file"),
    (
        ValueError("cannot reshape array of size 0 into shape (0,newaxis)"),
        "x.ply: malformed PLY: cannot reshape",
    ),
    (
        ValueError("negative dimensions\nare not allowed"),
        "x.ply: malformed PLY: negative dimensions are not allowed",
    ),
    (struct.error("unpack requires a buffer of 4 bytes"), "x.ply: malformed PLY: unpack requires"),
    (zipfile.BadZipFile("Bad CRC-32"), "x.ply: malformed PLY: Bad CRC-32"),
    (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte"), "x.ply: malformed PLY: 'utf-8' codec"),
    (OverflowError("cannot fit 'int' into an index-sized integer"), "x.ply: malformed PLY: cannot fit"),
]


@pytest.mark.parametrize(("raised", "message"), BOUNDARY, ids=[type(b[0]).__name__ for b in BOUNDARY])
def test_the_reader_boundary_names_the_file_in_one_line(monkeypatch, raised, message):
    def boom(f, label):
        raise raised

    monkeypatch.setitem(FORMATS, "ply", replace(FORMATS["ply"], read=boom))
    with pytest.raises(PointCloudError) as err:
        read_points(_named(b"ply\n", "x.ply"))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_the_boundary_leaves_bugs_alone(monkeypatch):
    def boom(f, label):
        raise TypeError("a bug, not a hostile file")

    monkeypatch.setitem(FORMATS, "ply", replace(FORMATS["ply"], read=boom))
    with pytest.raises(TypeError):
        read_points(_named(b"ply\n", "x.ply"))
