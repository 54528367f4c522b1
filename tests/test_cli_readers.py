"""Issue 16 (readers) through the installed ``lattice`` command, as users met it: ``.npy`` and text
files refused, nuScenes ``*.pcd.bin`` needing ``--format``, a ScanNet x,y,z,r,g,b ``.bin`` silently
read as KITTI. Real files from ``../shared/data`` where they exist (skipped when absent)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import lattice
from io_helpers import DATA

from lattice.io import read_sparse

SEMANTICKITTI = DATA / "semantickitti"
NPY_FILES = sorted(SEMANTICKITTI.glob("*.npy")) if SEMANTICKITTI.exists() else []
BIN_FILES = sorted(SEMANTICKITTI.glob("*.bin")) if SEMANTICKITTI.exists() else []
SCANNET = DATA / "indoor" / "scannet_scene0000_00_xyzrgb.bin"
NUSCENES = DATA / "nuscenes" / "n015-2018-07-24-11-22-45_LIDAR_TOP_1532402927647951.pcd.bin"
SHIPPED = Path(__file__).resolve().parents[1] / "examples" / "models" / "minkunet14-semantickitti"
RGB = "x,y,z,red,green,blue"


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared test data not present: {path.name}")
    return path


def _info(*args) -> dict:
    r = lattice("info", *args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _failed(r, *needles: str) -> str:
    """Exit 1 with one ``lattice: error:`` line holding every needle, no traceback."""
    assert r.returncode == 1, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lattice: error: ") and "Traceback" not in r.stderr
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _voxels(points: np.ndarray, size: float) -> int:
    p = points[np.isfinite(points).all(axis=1)].astype(np.float64)
    return len(np.unique(np.floor(p / size).astype(np.int64), axis=0))


@pytest.mark.parametrize("path", NPY_FILES, ids=[p.name for p in NPY_FILES])
def test_info_on_every_semantickitti_npy(path):
    ref = np.load(path, allow_pickle=False)
    if "_labels_" in path.name:
        line = _failed(lattice("info", path), path.name, "holds one column per row", "--columns")
        assert "columns=" not in line
        return
    d = _info(path)
    assert d["format"] == "npy" and d["points"] == len(ref)
    # info prints the shortest text that reads back to the stored float32 value
    np.testing.assert_array_equal(np.float32(d["bounds"]["min"]), ref.min(axis=0))
    np.testing.assert_array_equal(np.float32(d["bounds"]["max"]), ref.max(axis=0))


def test_info_nuscenes_without_format():
    d = _info(_need(NUSCENES))
    assert d["format"] == "nuscenes" and d["points"] == 34688
    assert [a["name"] for a in d["attributes"]] == ["intensity", "ring"]


def test_scannet_xyzrgb_is_refused_then_read_with_columns(tmp_path):
    _need(SCANNET)
    line = _failed(lattice("info", SCANNET), "does not look like a kitti scan", f"--columns {RGB}")
    assert "columns=" not in line
    ref = np.fromfile(SCANNET, np.float32).reshape(-1, 6)
    d = _info(SCANNET, "--columns", RGB)
    assert d["points"] == 40684 and d["has_colors"]
    np.testing.assert_array_equal(np.float32(d["bounds"]["min"]), ref[:, :3].min(axis=0))
    np.testing.assert_array_equal(np.float32(d["bounds"]["max"]), ref[:, :3].max(axis=0))
    stats = {a["name"]: a for a in d["attributes"]}
    for i, c in enumerate(("red", "green", "blue"), 3):
        assert (stats[c]["min"], stats[c]["max"]) == (float(ref[:, i].min()), float(ref[:, i].max()))
    out = tmp_path / "s.npz"
    r = lattice("voxelize", SCANNET, "--columns", RGB, "-s", "0.05", "-o", out, "-r", "first", "--json")
    assert r.returncode == 0, r.stderr
    sf = read_sparse(out)
    assert sf.feature_names == ("red", "green", "blue") and sf.num_rows == _voxels(ref[:, :3], 0.05)
    first = {}
    for row, vox in zip(ref, np.floor(ref[:, :3].astype(np.float64) / 0.05).astype(np.int64), strict=True):
        first.setdefault(tuple(vox.tolist()), row[3:])  # slow reference: each voxel's first point's colour
    got = {tuple(c[1:].tolist()): f for c, f in zip(sf.coords, sf.feats, strict=True)}
    assert got.keys() == first.keys()
    for k, v in first.items():
        np.testing.assert_array_equal(got[k], v)


@pytest.mark.parametrize("path", BIN_FILES, ids=[p.name for p in BIN_FILES])
def test_every_kitti_bin_still_reads(path):
    d = _info(path)
    assert d["format"] == "kitti" and d["points"] == path.stat().st_size // 16


def _cloud(n=2000, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.c_[rng.normal(scale=5, size=(n, 3)), rng.random(n)]


@pytest.mark.parametrize("name", ["scan.npy", "scan.csv", "scan.xyz"])
def test_voxelize_npy_csv_xyz(tmp_path, name):
    table = _cloud()
    src = tmp_path / name
    if name.endswith(".npy"):
        np.save(src, table.astype(np.float32))
    elif name.endswith(".csv"):
        src.write_text(
            "X,Y,Z,Intensity\n" + "\n".join(",".join(repr(float(v)) for v in row) for row in table) + "\n"
        )
    else:
        src.write_text("\n".join(" ".join(repr(float(v)) for v in row) for row in table) + "\n")
    r = lattice("voxelize", src, "-o", tmp_path / "v.npz", "-s", "0.5", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    pts = table[:, :3].astype(np.float32) if name.endswith(".npy") else table[:, :3]
    assert s["streamed"] and s["points"] == 2000 and s["voxels"] == _voxels(pts, 0.5)
    sf = read_sparse(tmp_path / "v.npz")
    assert sf.feature_names == ("intensity",) and sf.num_rows == s["voxels"]


def test_voxelize_directory_of_npy(tmp_path):
    d = tmp_path / "scans"
    (d / "sub").mkdir(parents=True)
    for i, rel in enumerate(["a.npy", "b.npy", "sub/c.npy"]):
        np.save(d / rel, _cloud(500, seed=i)[:, :3])
    (d / "notes.md").write_text("not a cloud")
    out = tmp_path / "out"
    r = lattice("voxelize", d, "-d", out, "-s", "1", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["done"], s["failed"]) == (3, 0)
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.npz")) == [
        "a.npz",
        "b.npz",
        "sub/c.npz",
    ]
    assert read_sparse(out / "sub" / "c.npz").num_rows == _voxels(np.load(d / "sub" / "c.npy"), 1.0)


def test_columns_through_every_reading_command(tmp_path):
    table = np.c_[np.arange(40), _cloud(40)]  # id, x, y, z, intensity: five columns need names
    src = tmp_path / "five.txt"
    src.write_text("\n".join(" ".join(repr(float(v)) for v in row) for row in table) + "\n")
    cols = ["--columns", "point_id,x,y,z,intensity"]
    line = _failed(lattice("info", src), "rows have 5 values", f"--columns {RGB}")
    assert "columns=" not in line
    d = _info(src, *cols)
    assert [a["name"] for a in d["attributes"]] == ["point_id", "intensity"]
    r = lattice("voxelize", src, *cols, "-o", tmp_path / "v.npz", "-s", "1", "-f", "intensity")
    assert r.returncode == 0, r.stderr
    _failed(lattice("voxelize", src, "-o", tmp_path / "w.npz", "-s", "1"), "--columns")
    assert not (tmp_path / "w.npz").exists()
    r = lattice("render", src, *cols, "-o", tmp_path / "r.png", "--color", "height")
    assert r.returncode == 0 and (tmp_path / "r.png").exists(), r.stderr
    _failed(lattice("render", src, "-o", tmp_path / "q.png"), "--columns")
    r = lattice("explain", "subm_conv3d", src, *cols, "--voxel-size", "1", "--json")
    assert r.returncode == 0, r.stderr
    _failed(lattice("explain", "subm_conv3d", src), "--columns")
    _failed(lattice("info", src, "--columns", "x,y"), "--columns", "no z column")
    if SHIPPED.exists():
        r = lattice("model-run", SHIPPED, src, *cols, "-o", tmp_path / "m.ply", "--json")
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["points"] == 40
        _failed(lattice("model-run", SHIPPED, src, "-o", tmp_path / "n.ply"), "--columns")


def test_columns_refused_for_formats_that_name_fields(tmp_path):
    src = tmp_path / "a.npz"
    np.savez(src, points=np.zeros((3, 3)))
    line = _failed(
        lattice("info", src, "--columns", "x,y,z"), "npz files name their own fields", "--columns applies"
    )
    assert "columns=" not in line
