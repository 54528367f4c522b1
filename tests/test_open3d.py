"""Open3D interop (``lattice.io.to_open3d`` / ``from_open3d``) on real files from ``../shared/data``.

Needs the optional extra (``pip install 'lattice[open3d]'``); every test that touches
Open3D is skipped cleanly without it. The missing-extra message is tested either way.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import lattice
from lattice.io import PointCloud, SparseFile, from_open3d, read_points, to_open3d, unpack_rgb
from lattice.ops import voxelize

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"


@pytest.fixture
def o3d():
    return pytest.importorskip("open3d")


def _data(rel: str) -> Path:
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"shared test data not present: {rel}")
    return path


def _kitti() -> np.ndarray:
    return np.fromfile(_data("semantickitti/seq00_000000.bin"), np.float32).reshape(-1, 4)[:, :3].copy()


def _rows(a) -> set[tuple[int, ...]]:
    return set(map(tuple, np.asarray(a).tolist()))


def _grid_arrays(grid) -> tuple[np.ndarray, np.ndarray]:
    voxels = grid.get_voxels()
    idx = np.array([v.grid_index for v in voxels], np.int64).reshape(-1, 3)
    col = np.array([v.color for v in voxels], np.float64).reshape(-1, 3)
    order = np.lexsort(idx.T[::-1])
    return idx[order], col[order]


def _sorted(coords, feats) -> tuple[np.ndarray, np.ndarray]:
    c, f = np.asarray(coords), np.asarray(feats)
    order = np.lexsort(c.T[::-1])
    return c[order], f[order]


# ---- without Open3D -----------------------------------------------------------------


def test_missing_open3d_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "open3d", None)  # makes `import open3d` raise ImportError
    with pytest.raises(ImportError, match=r"pip install 'lattice\[open3d\]'"):
        to_open3d(PointCloud(np.zeros((2, 3))))
    with pytest.raises(ImportError, match=r"\[from_open3d\] needs Open3D"):
        from_open3d(object())


def test_import_lattice_io_does_not_import_open3d(tmp_path):
    code = "import sys, lattice.io; assert 'open3d' not in sys.modules, 'open3d imported'"
    # outside the checkout, whose source folders would shadow the installed package
    subprocess.run([sys.executable, "-c", code], check=True, cwd=tmp_path)


# ---- point clouds -------------------------------------------------------------------


def test_point_cloud_matches_open3d_reader(o3d):
    """Open3D's own sample (xyz, packed rgb, normals): our reader + to_open3d == Open3D's reader."""
    path = _data("indoor/open3d_fragment.pcd")
    ours = to_open3d(read_points(path))
    theirs = o3d.io.read_point_cloud(str(path))
    assert len(ours.points) == len(theirs.points) == 113_662
    np.testing.assert_array_equal(np.asarray(ours.points), np.asarray(theirs.points))
    np.testing.assert_allclose(np.asarray(ours.colors), np.asarray(theirs.colors), rtol=0, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(ours.normals), np.asarray(theirs.normals))


def test_point_cloud_round_trip_points_colours_normals(o3d):
    cloud = read_points(_data("indoor/open3d_fragment.pcd"))
    pc = to_open3d(cloud)
    assert isinstance(pc, o3d.geometry.PointCloud) and pc.has_colors() and pc.has_normals()
    back = from_open3d(pc)
    assert isinstance(back, PointCloud)
    assert back.points.dtype == np.float64
    np.testing.assert_array_equal(back.points, cloud.points.astype(np.float64))
    rgb = np.stack([back.attributes[k] for k in ("red", "green", "blue")], axis=1)
    np.testing.assert_array_equal(rgb, np.stack([cloud.attributes[k] for k in ("red", "green", "blue")], 1))
    raw = np.fromfile(_data("indoor/open3d_fragment.pcd"), np.uint8)  # the file's own packed float bits
    header = raw[:400].tobytes().index(b"DATA binary\n") + len(b"DATA binary\n")
    packed = raw[header:].view(np.float32).reshape(-1, 8)[:, 3]
    np.testing.assert_array_equal(rgb, unpack_rgb(packed))
    np.testing.assert_array_equal(back.colors(), cloud.colors())
    np.testing.assert_array_equal(back.normals(), cloud.normals())
    assert back.normals().dtype == np.float32
    # a second round trip is the identity
    again = from_open3d(to_open3d(back))
    np.testing.assert_array_equal(again.points, back.points)
    for k, v in back.attributes.items():
        np.testing.assert_array_equal(again.attributes[k], v)


def test_point_cloud_round_trip_keeps_nan_rows(o3d):
    """The organised 640x480 mug frame: ~98k NaN points stay in place, rgba colours survive."""
    cloud = read_points(_data("indoor/table_scene_mug_stereo_textured.pcd"))
    back = from_open3d(to_open3d(cloud))
    assert len(back) == len(cloud) == 307_200
    np.testing.assert_array_equal(back.finite_mask(), cloud.finite_mask())
    np.testing.assert_array_equal(back.points, cloud.points.astype(np.float64))  # NaN == NaN here
    np.testing.assert_array_equal(back.colors(), cloud.colors())
    assert back.normals() is None


def test_point_cloud_normals_only_and_plain_arrays(o3d):
    cloud = read_points(_data("scanned_objects/dragon_50k_vcg.ply"))
    pc = to_open3d(cloud)
    assert pc.has_normals() and not pc.has_colors()
    back = from_open3d(pc)
    np.testing.assert_array_equal(back.normals(), cloud.normals())
    assert back.colors() is None and set(back.attributes) == {"nx", "ny", "nz"}
    pts = _kitti()
    for arr in (pts, mx.array(pts)):
        np.testing.assert_array_equal(np.asarray(to_open3d(arr).points), pts.astype(np.float64))


def test_tensor_point_cloud_is_accepted(o3d):
    pts = _kitti()[:1000]
    tpc = o3d.t.geometry.PointCloud(o3d.core.Tensor(pts))
    np.testing.assert_array_equal(from_open3d(tpc).points, pts.astype(np.float64))


# ---- voxel grids --------------------------------------------------------------------


def test_voxel_grid_round_trip_with_colours(o3d):
    cloud = read_points(_data("indoor/open3d_fragment.pcd"))
    origin = (2.0, 1.5, 1.0)  # inside the cloud: negative and positive grid indices
    x = voxelize(cloud.points, cloud.colors(), 0.02, origin=origin, reduction="mean")
    grid = to_open3d(x, voxel_size=0.02, origin=origin)
    assert isinstance(grid, o3d.geometry.VoxelGrid)
    assert grid.voxel_size == pytest.approx(0.02)
    np.testing.assert_array_equal(np.asarray(grid.origin), origin)
    idx, col = _grid_arrays(grid)
    coords, feats = _sorted(x.coords, x.feats)
    assert (idx < 0).any()
    np.testing.assert_array_equal(idx, coords[:, 1:])
    np.testing.assert_array_equal(col.astype(np.float32), feats)
    back = from_open3d(grid)
    assert isinstance(back, lattice.SparseTensor) and back.stride == (1, 1, 1)
    np.testing.assert_array_equal(np.asarray(back.coords), coords)
    np.testing.assert_array_equal(np.asarray(back.feats), feats)


def test_voxel_grid_stride_sparse_file_and_names(o3d):
    """A SparseFile carries voxel_size/origin/stride; red/green/blue names pick the colour channels."""
    cloud = read_points(_data("indoor/open3d_fragment.pcd"))
    rgb = (cloud.colors() * 255).astype(np.float32)
    x = voxelize(cloud.points, np.concatenate([np.ones((len(rgb), 1), np.float32), rgb], 1), 0.05)
    coords, feats = _sorted(x.coords, x.feats)
    sf = SparseFile(
        coords,
        feats,
        np.full(3, 2, np.int32),
        np.full(3, 0.05),
        np.array([0.1, 0.2, 0.3]),
        ("count", "red", "green", "blue"),
    )
    grid = to_open3d(sf)
    assert grid.voxel_size == pytest.approx(0.1)  # voxel_size * stride
    np.testing.assert_allclose(np.asarray(grid.origin), [0.1, 0.2, 0.3])
    idx, col = _grid_arrays(grid)
    np.testing.assert_array_equal(idx, coords[:, 1:])
    np.testing.assert_allclose(col, feats[:, 1:] / 255.0, atol=1e-6)
    back = from_open3d(grid, as_file=True)
    assert back.feature_names == ("red", "green", "blue")
    np.testing.assert_array_equal(back.coords, coords)
    np.testing.assert_allclose(back.voxel_size, 0.1)
    np.testing.assert_allclose(back.origin, [0.1, 0.2, 0.3])
    # a SparseTensor at stride 2 gives the same grid geometry
    t = lattice.SparseTensor(coords, feats[:, 1:] / 255.0, 2)
    g2 = to_open3d(t, voxel_size=0.05, origin=(0.1, 0.2, 0.3))
    assert g2.voxel_size == pytest.approx(0.1)


def test_voxel_grid_grey_without_colour_channels_black_from_uncoloured_grid(o3d):
    pts = _kitti()
    x = voxelize(pts, None, 0.2, reduction="count")  # one channel: grey
    grid = to_open3d(x, voxel_size=0.2)
    _, col = _grid_arrays(grid)
    np.testing.assert_array_equal(col, 0.5)
    plain = o3d.geometry.VoxelGrid.create_from_point_cloud(to_open3d(pts), 0.2)  # uncoloured cloud
    back = from_open3d(plain, as_file=True)
    assert back.feature_names == ("red", "green", "blue") and back.num_rows == len(plain.get_voxels())
    np.testing.assert_array_equal(back.feats, 0.0)


def test_voxel_grid_batches_and_errors(o3d):
    coords = np.array([[0, 0, 0, 0], [1, 2, 3, 4], [1, -1, 0, 0]], np.int32)
    t = lattice.SparseTensor(coords, np.ones((3, 3), np.float32))
    with pytest.raises(ValueError, match=r"\[to_open3d\] the tensor holds batch members \[0, 1\]"):
        to_open3d(t)
    idx, _ = _grid_arrays(to_open3d(t, batch=1))
    np.testing.assert_array_equal(idx, [[-1, 0, 0], [2, 3, 4]])
    with pytest.raises(ValueError, match=r"one voxel size for all axes"):
        to_open3d(t, voxel_size=(0.1, 0.1, 0.2), batch=0)
    with pytest.raises(ValueError, match=r"\[to_open3d\] voxel_size must be"):
        to_open3d(t, voxel_size=0.0, batch=0)
    with pytest.raises(TypeError, match=r"\[to_open3d\] expected"):
        to_open3d({"points": 1})
    with pytest.raises(TypeError, match=r"\[from_open3d\] expected"):
        from_open3d(o3d.geometry.TriangleMesh())
    with pytest.raises(ValueError, match=r"color_channels"):
        to_open3d(t, batch=0, color_channels=(0, 1, 5))


def test_from_open3d_origin_reexpresses_indices(o3d):
    t = lattice.SparseTensor(np.array([[0, 1, 2, 3], [0, -4, 0, 7]], np.int32), np.zeros((2, 3), np.float32))
    grid = to_open3d(t, voxel_size=0.5, origin=(1.0, 1.0, 1.0))
    back = from_open3d(grid, origin=0.0, as_file=True)  # origin moves by 2 voxels per axis
    np.testing.assert_array_equal(back.coords[:, 1:], [[-2, 2, 9], [3, 4, 5]])
    np.testing.assert_array_equal(back.origin, 0.0)
    with pytest.raises(ValueError, match=r"not a whole number of voxels"):
        from_open3d(grid, origin=0.3)


# ---- voxel sets against Open3D's own voxelization --------------------------------------


def test_kitti_voxel_set_equals_open3d_grid_with_its_origin(o3d):
    """Open3D's origin is min_bound - voxel_size / 2; with that origin the sets are identical.

    ``VoxelGrid.create_from_point_cloud`` and ``voxel_down_sample`` both bin
    ``floor((p - (min_bound - v / 2)) / v)`` in float64, as ``sparse_quantize`` does for
    ``origin=grid.origin``. With lattice's default origin 0 the sets differ (94,444 voxels
    against Open3D's 94,624 at 0.05 m).
    """
    pts = _kitti()
    v = 0.05
    pc = to_open3d(pts)
    grid = o3d.geometry.VoxelGrid.create_from_point_cloud(pc, v)
    np.testing.assert_allclose(np.asarray(grid.origin), pts.min(0).astype(np.float64) - v / 2)
    idx, _ = _grid_arrays(grid)
    q = lattice.sparse_quantize(pts, v, origin=np.asarray(grid.origin))
    coords = np.asarray(q.coords)
    assert q.active_count == len(idx) == 94_624
    np.testing.assert_array_equal(_sorted(coords, coords)[0][:, 1:], idx)
    assert len(pc.voxel_down_sample(v).points) == q.active_count
    # the NumPy reference with that origin agrees too
    ref = np.unique(np.floor((pts.astype(np.float64) - np.asarray(grid.origin)) / v).astype(np.int64), axis=0)
    np.testing.assert_array_equal(ref, idx)
    # lattice's default origin 0 is a different (but equally exact) binning
    assert lattice.sparse_quantize(pts, v).active_count == 94_444


def test_within_bounds_grid_equals_our_set_for_the_same_origin(o3d):
    """Any origin: Open3D's grid for min_bound = o equals sparse_quantize(origin=o)."""
    pts = read_points(_data("indoor/room_scan1.pcd")).drop_nan().points
    v = 0.03
    origin = np.floor(pts.min(0).astype(np.float64) / v) * v
    pc = to_open3d(pts)
    grid = o3d.geometry.VoxelGrid.create_from_point_cloud_within_bounds(pc, v, origin, pts.max(0) + v)
    idx, _ = _grid_arrays(grid)
    q = lattice.sparse_quantize(pts, v, origin=origin)
    assert _rows(np.asarray(q.coords)[:, 1:]) == _rows(idx)
