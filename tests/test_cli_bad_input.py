"""Every bad input gets one clear line on stderr and exit 1, never a traceback, and leaves no
output file (nor a temporary one); an existing output is never touched by a failed run."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest
from typer.testing import CliRunner

from lattice.data import synthetic_room
from lattice.io import PointCloud, write_points, write_sparse
from lattice_cli.main import app

runner = CliRunner()
ROOM = synthetic_room(2000, seed=2)
HEADER = b"ply\nformat %s 1.0\nelement vertex %d\nproperty float x\nproperty float y\nproperty float z\nend_header\n"


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _binary_ply(n_declared: int, n_present: int) -> bytes:
    return HEADER % (b"binary_little_endian", n_declared) + np.zeros((n_present, 3), "<f4").tobytes()


def _pcd(points: int, data: bytes, types: bytes = b"F F F") -> bytes:
    return (
        b"VERSION .7\nFIELDS x y z\nSIZE 4 4 4\nTYPE " + types + b"\nCOUNT 1 1 1\nWIDTH %d\nHEIGHT 1\n"
        b"POINTS %d\nDATA binary\n" % (points, points)
    ) + data


def _truncated_npz() -> bytes:
    data = _npz(points=np.zeros((5000, 3)))
    return data[: len(data) // 2]


def _sparse_missing_keys() -> bytes:
    buf = io.BytesIO()
    write_sparse(buf, np.zeros((1, 4), np.int32), np.ones((1, 1), np.float32))
    src = zipfile.ZipFile(io.BytesIO(buf.getvalue()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name in src.namelist():
            if name != "stride.npy":
                z.writestr(name, src.read(name))
    return out.getvalue()


# (name, file bytes or None for "does not exist" / "" for a directory, extra args, message)
BAD_POINT_FILES = [
    ("missing.ply", None, [], "missing.ply: no such file"),
    ("adir.ply", "", [], "adir.ply: is a directory, expected a file"),
    ("empty.ply", b"", [], "empty.ply: file is empty"),
    ("empty.bin", b"", [], "empty.bin: file is empty"),
    (
        "trunc.ply",
        _binary_ply(100, 100)[:-7],
        [],
        "truncated PLY: header declares 100 vertex rows but only 99",
    ),
    ("trunc_ascii.ply", HEADER % (b"ascii", 3) + b"1 2 3\n4 5", [], "truncated"),
    ("lies.ply", _binary_ply(1000, 10), [], "header declares 1000 vertex rows but only 10 are present"),
    ("lies_ascii.ply", HEADER % (b"ascii", 5) + b"1 2 3\n", [], "header declares 5 vertex rows but only 1"),
    ("trunc.npz", _truncated_npz(), [], "trunc.npz: truncated or malformed NPZ"),
    ("trunc.pcd", _pcd(5, b"\0" * 36), [], "truncated PCD binary data: header declares 5 items"),
    ("trunc.bin", b"\0" * 30, [], "30 bytes is not a whole number of kitti points"),
    (
        "unknown_type.ply",
        HEADER.replace(b"float z", b"quux z") % (b"ascii", 1) + b"1 2 3\n",
        [],
        "field type 'quux'",
    ),
    ("unknown_type.pcd", _pcd(1, b"\0" * 12, b"F F X"), [], "unknown PCD field type for 'z': TYPE X"),
    (
        "noxyz.ply",
        b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float a\nproperty float b\nend_header\n1 2\n",
        [],
        "PLY vertex element has no x/y/z properties (it has ['a', 'b'])",
    ),
    ("nokeys.npz", _npz(xyz=np.zeros((3, 3))), [], "NPZ has no 'points' array; keys: ['xyz']"),
    ("pickled.npz", _npz(points=np.array([{"a": 1}] * 3, dtype=object)), [], "NPZ contains pickled objects"),
    (
        "pickled_attr.npz",
        _npz(points=np.zeros((1, 3)), o=np.array([None])),
        [],
        "NPZ contains pickled objects",
    ),
    ("a.obj", b"v 1 2 3\n", [], "unknown point-cloud file extension .obj"),
    ("fmt.ply", b"1 2 3\n", ["--format", "pointz"], "unknown format 'pointz'"),
    ("sparse.npz", _sparse_missing_keys(), [], "NPZ has no 'points' array"),
]


@pytest.mark.parametrize(
    ("name", "data", "extra", "message"), BAD_POINT_FILES, ids=[b[0] for b in BAD_POINT_FILES]
)
def test_voxelize_bad_input(tmp_path, name, data, extra, message):
    src = tmp_path / name
    if data == "":
        src.mkdir()
    elif data is not None:
        src.write_bytes(data)
    out = tmp_path / "out" / "o.npz"
    out.parent.mkdir()
    r = runner.invoke(app, ["voxelize", str(src), "-o", str(out), "-s", "0.1", *extra])
    assert r.exit_code == 1, r.output
    assert message in r.stderr
    assert r.stderr.startswith("lattice: error: ") and r.stderr.count("\n") == 1
    assert "Traceback" not in r.output
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert list(out.parent.iterdir()) == []  # no output, no temporary file


def _write(tmp_path, points, name="p.npz"):
    write_points(tmp_path / name, PointCloud(np.asarray(points, dtype=np.float64)))
    return tmp_path / name


@pytest.mark.parametrize(
    ("points", "args", "message"),
    [
        (
            [[0, 0, 0], [1, 1, 1]],
            ["-s", "0"],
            "voxel size must be one or three positive finite numbers, got [0.0, 0.0, 0.0]",
        ),
        ([[0, 0, 0], [1, 1, 1]], ["-s", "-0.5"], "voxel size must be one or three positive"),
        ([[0, 0, 0], [1, 1, 1]], ["-s", "1,0,1"], "voxel size must be one or three positive"),
        ([[0, 0, 0], [1, 1, 1]], ["-s", "nan"], "voxel size must be one or three positive finite"),
        (
            [[0, 0, 0], [1, 1, 1]],
            ["-s", "1", "--origin", "inf"],
            "origin must be one or three finite numbers",
        ),
        ([[0, 0, 0], [1, 1, 1]], ["-s", "1", "--features", "colour"], "unknown feature 'colour'"),
        ([[0, 0, 0], [3e9, 0, 0]], ["-s", "1"], "voxel indices overflow int32"),
        ([[-1e9] * 3, [1e9] * 3], ["-s", "1"], "coordinates span too large to pack into a 64-bit key"),
        ([[0, 0, 0], [np.nan, 1, 1]], ["-s", "1", "--strict"], "point 1 has a non-finite coordinate"),
        ([[0, 0, 0], [1, np.inf, 1]], ["-s", "1", "--strict"], "point 1 has a non-finite coordinate"),
    ],
)
def test_voxelize_bad_values(tmp_path, points, args, message):
    src = _write(tmp_path, points)
    out = tmp_path / "o.npz"
    r = runner.invoke(app, ["voxelize", str(src), "-o", str(out), *args])
    assert r.exit_code == 1, r.output
    assert message in r.stderr and "Traceback" not in r.output
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["p.npz"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--reduce", "median"], "--reduce: 'median' is not one of mean, sum, min, max, mode, first, count"),
        (["--reduce", "label=avg"], "--reduce: 'avg' is not one of mean"),
        (["--reduce", "=mode"], "missing the attribute name"),
        (["--reduce", "max", "--reduce", "min"], "--reduce given twice for every attribute"),
        (["-o", "OUT.xyzzy"], "unknown output extension .xyzzy"),
        (["--position", "middle"], "--position must be centre or centroid"),
    ],
)
def test_voxelize_usage_errors(tmp_path, args, message):
    src = _write(tmp_path, [[0, 0, 0], [1, 1, 1]])
    out = ["-o", str(tmp_path / "o.npz")] if "-o" not in args else []
    args = [a.replace("OUT", str(tmp_path / "o")) for a in args]
    r = runner.invoke(app, ["voxelize", str(src), "-s", "1", *out, *args])
    assert r.exit_code == 2, r.output
    assert message in r.stderr and "Traceback" not in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.npz"]


def test_nan_points_are_dropped_with_a_count(tmp_path):
    src = _write(tmp_path, [[0, 0, 0], [np.nan, 1, 1], [1, 1, np.inf], [2, 2, 2]])
    r = runner.invoke(app, ["voxelize", str(src), "-o", str(tmp_path / "o.npz"), "-s", "1", "--json"])
    assert r.exit_code == 0
    assert "dropped 2 points with non-finite coordinates" in r.stderr


def test_failed_run_never_touches_an_existing_output(tmp_path):
    (tmp_path / "bad.ply").write_bytes(_binary_ply(10, 3))
    out = tmp_path / "o.npz"
    out.write_bytes(b"precious")
    r = runner.invoke(app, ["voxelize", str(tmp_path / "bad.ply"), "-o", str(out), "-s", "1"])
    assert r.exit_code == 1 and out.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.ply", "o.npz"]


@pytest.mark.parametrize("where", ["parent_is_file", "parent_missing", "is_directory"])
def test_output_that_cannot_be_written(tmp_path, where):
    write_points(tmp_path / "room.ply", ROOM)
    (tmp_path / "afile").write_bytes(b"x")
    (tmp_path / "adir").mkdir()
    out = {
        "parent_is_file": tmp_path / "afile" / "o.npz",
        "parent_missing": tmp_path / "nope" / "o.npz",
        "is_directory": tmp_path / "adir",
    }[where]
    r = runner.invoke(app, ["voxelize", str(tmp_path / "room.ply"), "-o", str(out), "-s", "0.1"])
    assert r.exit_code == 1 and "cannot write" in r.stderr, r.output
    assert not (tmp_path / "nope").exists() and list((tmp_path / "adir").iterdir()) == []


def test_output_dir_that_cannot_be_written(tmp_path):
    write_points(tmp_path / "room.ply", ROOM)
    (tmp_path / "afile").write_bytes(b"x")
    r = runner.invoke(
        app, ["voxelize", str(tmp_path / "room.ply"), "-d", str(tmp_path / "afile" / "sub"), "-s", "0.1"]
    )
    assert r.exit_code == 1 and "cannot write to output directory" in r.stderr, r.output


SPARSE_BAD = {
    "missing": (None, "no such file"),
    "empty": (b"", "file is empty"),
    "points_npz": (_npz(points=np.zeros((3, 3))), "not a lattice sparse-tensor NPZ"),
    "missing_keys": (_sparse_missing_keys(), "sparse NPZ is missing keys ['stride']"),
    "pickled": (
        _npz(format=np.array("lattice.sparse/1"), coords=np.array([{}], dtype=object)),
        "pickled objects",
    ),
    "truncated": (_truncated_npz(), "truncated or malformed NPZ"),
}


@pytest.mark.parametrize(
    ("command", "case"),
    [([c], k) for c in ("pool", "upsample", "info") for k in SPARSE_BAD if (c, k) != ("info", "points_npz")],
)
def test_sparse_commands_bad_input(tmp_path, command, case):
    data, message = SPARSE_BAD[case]
    src = tmp_path / "in.npz"
    if data is not None:
        src.write_bytes(data)
    out = tmp_path / "o.npz"
    args = [*command, str(src)] + ([] if command == ["info"] else ["-o", str(out)])
    r = runner.invoke(app, args)
    assert r.exit_code == 1, r.output
    assert message in r.stderr and "Traceback" not in r.output
    assert not out.exists()


def test_upsample_bad_target_and_stride(tmp_path):
    write_points(tmp_path / "room.ply", ROOM)
    v = tmp_path / "v.npz"
    assert (
        runner.invoke(app, ["voxelize", str(tmp_path / "room.ply"), "-o", str(v), "-s", "0.1"]).exit_code == 0
    )
    cases = [
        (["--target", str(tmp_path / "nope.npz")], "nope.npz: no such file"),
        ([], "is not divisible by stride"),  # v is at stride 1
    ]
    for extra, message in cases:
        r = runner.invoke(app, ["upsample", str(v), "-o", str(tmp_path / "u.npz"), *extra])
        assert r.exit_code == 1 and message in r.stderr, r.output
        assert not (tmp_path / "u.npz").exists()
    r = runner.invoke(app, ["pool", str(v), "-o", str(tmp_path / "p.npz"), "-k", "0"])
    assert r.exit_code == 1 and "kernel size must be one or three positive integers" in r.stderr


def test_directory_with_o_and_empty_stdin(tmp_path):
    r = runner.invoke(app, ["voxelize", str(tmp_path), "-o", str(tmp_path / "o.npz"), "-s", "1"])
    assert r.exit_code == 1 and "is a directory, expected a file (use --output-dir" in r.stderr
    r = runner.invoke(app, ["voxelize", "-", "-o", str(tmp_path / "o.npz"), "-s", "1"], input=b"")
    assert r.exit_code == 1 and "input is empty" in r.stderr
    r = runner.invoke(app, ["voxelize", "-", "-o", str(tmp_path / "o.npz"), "-s", "1"], input=b"\0" * 32)
    assert r.exit_code == 1 and "cannot tell the point-cloud format" in r.stderr
    assert not (tmp_path / "o.npz").exists()
