"""Raw float32 ``.bin`` files: the layout check before a file is read as KITTI / nuScenes (calibrated
on every ``.bin`` of the shared data), its hints, and ``columns=`` for any float32 layout."""

from __future__ import annotations

import numpy as np
import pytest
from io_helpers import DATA

from lattice.io import PointCloud, PointCloudError, read_points, write_points
from lattice.io.kitti import layout_problems
from lattice.pipeline import open_source

SCANNET = DATA / "indoor" / "scannet_scene0000_00_xyzrgb.bin"
NUSCENES = DATA / "nuscenes" / "n015-2018-07-24-11-22-45_LIDAR_TOP_1532402927647951.pcd.bin"
KITTI_SCANS = sorted((DATA / "semantickitti").glob("*.bin")) if DATA.exists() else []
RGB = "x,y,z,red,green,blue"


def _need(path):
    if not path.exists():
        pytest.skip(f"shared test data not present: {path.name}")
    return path


def _error(match: str, fn, *args, **kwargs) -> PointCloudError:
    with pytest.raises(PointCloudError, match=match) as info:
        fn(*args, **kwargs)
    assert "\n" not in str(info.value)
    return info.value


def _both(path, **kwargs):
    """read_points and the streamed source, which must agree."""
    cloud = read_points(path, **kwargs)
    src = open_source(path, **kwargs)
    pts = np.concatenate([p for p, _ in src.chunks(10_000)])
    np.testing.assert_array_equal(pts, cloud.points)
    return cloud


@pytest.mark.parametrize("path", KITTI_SCANS, ids=[p.name for p in KITTI_SCANS])
def test_every_kitti_scan_still_reads(path):
    ref = np.fromfile(path, np.float32).reshape(-1, 4)
    cloud = _both(path)
    assert cloud.format == "kitti" and len(cloud) == len(ref)
    np.testing.assert_array_equal(cloud.points, ref[:, :3])
    np.testing.assert_array_equal(cloud.attributes["intensity"], ref[:, 3])


def test_nuscenes_by_its_name():
    cloud = _both(_need(NUSCENES))
    ref = np.fromfile(NUSCENES, np.float32).reshape(-1, 5)
    assert (
        cloud.format == "nuscenes" and len(cloud) == 34688 and list(cloud.attributes) == ["intensity", "ring"]
    )
    np.testing.assert_array_equal(cloud.attributes["ring"], ref[:, 4])


def test_scannet_xyzrgb_is_refused_then_read_with_columns():
    _need(SCANNET)
    for fn in (read_points, open_source):
        err = _error(r"scannet_scene0000_00_xyzrgb.bin: does not look like a kitti scan", fn, SCANNET)
        assert (
            f"it looks like float32 x, y, z, red, green, blue (colours 0..255): pass columns='{RGB}'"
            in str(err)
        )
        assert f"--columns {RGB}" in err.cli_message and "columns=" not in err.cli_message
    cloud = _both(SCANNET, columns=RGB)
    ref = np.fromfile(SCANNET, np.float32).reshape(-1, 6)
    assert len(cloud) == 40684 and list(cloud.attributes) == ["red", "green", "blue"]
    np.testing.assert_array_equal(cloud.points, ref[:, :3])
    for i, c in enumerate(("red", "green", "blue"), 3):
        np.testing.assert_array_equal(cloud.attributes[c], ref[:, i])
    assert cloud.attribute_info()["red"].scale == 255.0 and float(ref[:, 3:].max()) == 255.0


def _scan(n=5000, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = np.empty((n, 4), np.float32)
    a[:, :3] = rng.normal(scale=20, size=(n, 3))
    a[:, 3] = rng.random(n)
    return a


def _write(tmp_path, name, a):
    p = tmp_path / name
    np.ascontiguousarray(a, dtype=np.float32).tofile(p)
    return p


@pytest.mark.parametrize(
    "kind",
    ["normal", "integer_xyz", "zero_padding", "ground_plane_at_zero", "intensity_0_255", "tiny", "nan_rows"],
)
def test_plausible_scans_pass(tmp_path, kind):
    a = _scan()
    if kind == "integer_xyz":
        a[:, :3] = np.round(a[:, :3])
    elif kind == "zero_padding":
        a[3000:] = 0
    elif kind == "ground_plane_at_zero":
        a[:1500, 2] = 0
    elif kind == "intensity_0_255":
        a[:, 3] = np.round(a[:, 3] * 255)
    elif kind == "tiny":
        a = a[:1]
    elif kind == "nan_rows":
        a[::50, :3] = np.nan
    cloud = _both(_write(tmp_path, "s.bin", a))
    np.testing.assert_array_equal(cloud.points, a[:, :3])


def test_misread_layouts_are_refused_with_a_hint(tmp_path):
    rng = np.random.default_rng(1)
    xyzrgb = np.c_[rng.normal(size=(6000, 3)), rng.integers(0, 256, (6000, 3))]
    err = _error("mix whole and fractional numbers", read_points, _write(tmp_path, "rgb.bin", xyzrgb))
    assert f"pass columns='{RGB}'" in str(err)
    nus = np.c_[_scan(6000), np.arange(6000) % 32]  # nuScenes data under a plain .bin name
    err = _error("does not look like a kitti scan", read_points, _write(tmp_path, "nus.bin", nus))
    assert "it looks like nuscenes float32 x, y, z, intensity, ring: pass format='nuscenes'" in str(err)
    err = _error(
        "does not look like a nuscenes scan", read_points, _write(tmp_path, "k.pcd.bin", _scan(5000))
    )
    assert "pass format='kitti'" in str(err) and "--format kitti" in err.cli_message
    wide = _scan(4000).astype(np.float64)  # float64 rows read as float32
    wide.tofile(tmp_path / "f64.bin")
    err = _error("does not look like a kitti scan", read_points, tmp_path / "f64.bin")
    assert "format=" in str(err) and "columns=" in str(err)


def test_implausible_values(tmp_path):
    a = _scan()
    a[7, 3] = np.nan
    _error("intensity has non-finite values", read_points, _write(tmp_path, "n.bin", a))
    a = _scan()
    a[7, 3] = -1
    _error(r"intensity values -1..[0-9.]+ are outside 0..65535", read_points, _write(tmp_path, "neg.bin", a))
    a = _scan()
    a[9, 1] = np.inf
    _error("rows have x, y, z only partly finite", read_points, _write(tmp_path, "inf.bin", a))
    a = _scan()
    a[9, 1] = 3e-39
    _error("absurd magnitude", read_points, _write(tmp_path, "tiny.bin", a))


def test_size_and_columns_errors(tmp_path):
    p = _write(tmp_path, "odd.bin", np.zeros(6, np.float32))  # 24 bytes: not KITTI rows, but x,y,z,r,g,b?
    err = _error("24 bytes is not a whole number of kitti points", read_points, p)
    assert "columns=" in str(err)
    _error(r"24 bytes is not a whole number of rows of 5 float32 values", read_points, p, columns="x,y,z,a,b")
    _error(r"24 bytes is not a whole number of rows of 5", open_source, p, columns="x,y,z,a,b")
    cloud = read_points(p, columns=RGB)
    assert len(cloud) == 1 and cloud.format == "kitti"
    nus = read_points(_write(tmp_path, "s.pcd.bin", np.arange(12.0)), columns="x,y,z,_")
    assert nus.format == "nuscenes" and len(nus) == 3 and not nus.attributes
    write_points(tmp_path / "c.ply", PointCloud(np.zeros((2, 3))))
    for fn in (read_points, open_source):
        err = _error(
            "c.ply: ply files name their own fields; columns= applies to", fn, tmp_path / "c.ply", columns=RGB
        )
        assert "--columns applies to" in err.cli_message


def test_layout_problems_directly():
    rows = _scan(100)
    assert layout_problems(rows, ("x", "y", "z", "intensity")) == []
    assert layout_problems(np.zeros((10, 4), np.float32), ("x", "y", "z", "intensity")) == []
    bad = rows.copy()
    bad[:, 3] = 70000
    assert layout_problems(bad, ("x", "y", "z", "intensity")) == [
        "intensity values 70000..70000 are outside 0..65535"
    ]
