"""lattice.io: point-cloud formats, sparse-tensor NPZ, LZF, atomic writes, error messages."""

from __future__ import annotations

import io
import os
import stat
import struct
import zipfile

import numpy as np
import pytest
from io_helpers import DATA, lzf_decompress_reference

from lattice.io import (
    PointCloud,
    PointCloudError,
    SparseFile,
    atomic_write,
    lzf,
    pack_rgb,
    read_points,
    read_sparse,
    write_points,
    write_sparse,
)

HAVE_LAZRS = True
try:
    import lazrs  # noqa: F401
except ImportError:
    HAVE_LAZRS = False


def _cloud(n: int = 200, seed: int = 0, dtype=np.float32) -> PointCloud:
    rng = np.random.default_rng(seed)
    attrs = {
        "red": rng.integers(0, 256, n).astype(np.uint8),
        "green": rng.integers(0, 256, n).astype(np.uint8),
        "blue": rng.integers(0, 256, n).astype(np.uint8),
        "nx": rng.normal(size=n).astype(np.float32),
        "ny": rng.normal(size=n).astype(np.float32),
        "nz": rng.normal(size=n).astype(np.float32),
        "intensity": rng.random(n).astype(np.float32),
        "label": rng.integers(-5, 20, n).astype(np.int32),
    }
    return PointCloud(rng.normal(size=(n, 3)).astype(dtype) * 10, attrs)


def _assert_same(a: PointCloud, b: PointCloud, *, exact: bool = True) -> None:
    assert len(a) == len(b)
    np.testing.assert_array_equal(a.points, b.points) if exact else np.testing.assert_allclose(
        a.points, b.points
    )
    assert set(a.attributes) == set(b.attributes)
    for k, v in a.attributes.items():
        np.testing.assert_array_equal(v, b.attributes[k], err_msg=k)
        assert v.dtype == b.attributes[k].dtype, k


def _error(match: str, fn, *args, **kwargs) -> str:
    with pytest.raises(PointCloudError, match=match) as info:
        fn(*args, **kwargs)
    msg = str(info.value)
    assert "\n" not in msg
    return msg


# ---------------------------------------------------------------- round trips


@pytest.mark.parametrize("binary", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ply_round_trip(tmp_path, binary, dtype):
    cloud = _cloud(dtype=dtype)
    path = tmp_path / "c.ply"
    write_points(path, cloud, binary=binary)
    back = read_points(path)
    _assert_same(cloud, back)
    assert back.format == "ply" and back.points.dtype == dtype
    np.testing.assert_allclose(
        back.colors(), np.stack([cloud.attributes[c] for c in ("red", "green", "blue")], 1) / 255
    )
    np.testing.assert_array_equal(back.normals(), cloud.normals())


def test_ply_big_endian_and_faces_ignored(tmp_path):
    from plyfile import PlyData, PlyElement

    v = np.zeros(4, dtype=[("x", ">f8"), ("y", ">f8"), ("z", ">f8"), ("quality", ">u2")])
    v["x"], v["quality"] = [1, 2, 3, 4], [7, 8, 9, 65000]
    faces = np.array([([0, 1, 2],), ([1, 2, 3],)], dtype=[("vertex_indices", "O")])
    elements = [PlyElement.describe(v, "vertex"), PlyElement.describe(faces, "face")]
    PlyData(elements, byte_order=">").write(str(tmp_path / "be.ply"))
    c = read_points(tmp_path / "be.ply")
    np.testing.assert_array_equal(c.points[:, 0], [1, 2, 3, 4])
    np.testing.assert_array_equal(c.attributes["quality"], [7, 8, 9, 65000])
    assert c.points.dtype == np.float64 and c.attributes["quality"].dtype == np.uint16


def test_ply_2d_attribute_split_and_bool(tmp_path):
    cloud = PointCloud(
        np.zeros((3, 3)), {"feat": np.arange(6.0).reshape(3, 2), "mask": np.array([True, False, True])}
    )
    write_points(tmp_path / "a.ply", cloud)
    back = read_points(tmp_path / "a.ply")
    np.testing.assert_array_equal(back.attributes["feat_1"], [1, 3, 5])
    np.testing.assert_array_equal(back.attributes["mask"], [1, 0, 1])


@pytest.mark.parametrize("compress", [False, True])
def test_npz_round_trip(tmp_path, compress):
    cloud = _cloud()
    attrs = dict(cloud.attributes, feat=np.ones((len(cloud), 4), np.float16), file=np.arange(len(cloud)))
    cloud = PointCloud(cloud.points, attrs)
    write_points(tmp_path / "c.npz", cloud, compress=compress)
    _assert_same(cloud, read_points(tmp_path / "c.npz"))


def test_npz_ignores_non_per_point_arrays(tmp_path):
    np.savez(
        tmp_path / "x.npz",
        points=np.zeros((5, 3)),
        label=np.arange(5),
        scale=np.float64(2.0),
        grid=np.zeros((2, 2)),
    )
    c = read_points(tmp_path / "x.npz")
    assert list(c.attributes) == ["label"]


def _las_cloud(n: int = 300) -> PointCloud:
    rng = np.random.default_rng(1)
    pts = np.round(rng.uniform([1000, 2000, 10], [1100, 2100, 50], size=(n, 3)), 3)
    attrs = {
        "intensity": rng.integers(0, 65535, n).astype(np.uint16),
        "classification": rng.integers(0, 20, n).astype(np.uint8),
        "return_number": rng.integers(1, 5, n).astype(np.uint8),
        "gps_time": rng.uniform(0, 1e5, n),
        "red": rng.integers(0, 65535, n).astype(np.uint16),
        "green": rng.integers(0, 65535, n).astype(np.uint16),
        "blue": rng.integers(0, 65535, n).astype(np.uint16),
        "label": rng.integers(0, 20, n).astype(np.int32),
        "normal": rng.normal(size=(n, 3)).astype(np.float32),
    }
    return PointCloud(pts, attrs)


@pytest.mark.parametrize(
    "ext", [".las", pytest.param(".laz", marks=pytest.mark.skipif(not HAVE_LAZRS, reason="lazrs"))]
)
def test_las_round_trip(tmp_path, ext):
    cloud = _las_cloud()
    write_points(tmp_path / f"c{ext}", cloud)
    back = read_points(tmp_path / f"c{ext}")
    assert back.format == ext[1:] and back.metadata["point_format"] == 3
    np.testing.assert_allclose(back.points, cloud.points, atol=1e-6)
    for k, v in cloud.attributes.items():
        np.testing.assert_array_equal(back.attributes[k], v, err_msg=k)
    np.testing.assert_allclose(back.colors()[:, 0], cloud.attributes["red"] / 65535, rtol=1e-6)


def test_las_real_file_round_trip(tmp_path):
    src = _data("aerial_lidar/simple.las")
    cloud = read_points(src)
    write_points(tmp_path / "s.las", cloud)
    back = read_points(tmp_path / "s.las")
    np.testing.assert_allclose(back.points, cloud.points, atol=1e-9)
    assert back.metadata["scales"] == cloud.metadata["scales"]
    _assert_same(cloud, back, exact=False)


@pytest.mark.parametrize("mode", ["ascii", "binary", "binary_compressed"])
def test_pcd_round_trip(tmp_path, mode):
    rng = np.random.default_rng(2)
    n = 12 * 10
    pts = rng.normal(size=(n, 3)).astype(np.float32)
    pts[::7] = np.nan
    rgb = rng.integers(0, 256, (n, 3)).astype(np.uint8)
    attrs = {
        "rgb": pack_rgb(rgb),
        "label": rng.integers(0, 2**32 - 1, n, dtype=np.uint64).astype(np.uint32),
        "normal": rng.normal(size=(n, 3)),
        "ring": rng.integers(-100, 100, n).astype(np.int16),
    }
    cloud = PointCloud(pts, attrs, format="pcd", metadata={"width": 12, "height": 10})
    path = tmp_path / "c.pcd"
    write_points(path, cloud, binary=mode != "ascii", compress=mode == "binary_compressed")
    assert f"DATA {mode}".encode() in path.read_bytes()[:400]
    back = read_points(path)
    np.testing.assert_array_equal(back.points, pts)  # NaNs kept, at the same rows
    # the packed float rgb is decoded into uint8 channels at read, in its place
    assert list(back.attributes)[:3] == ["red", "green", "blue"] and "rgb" not in back.attributes
    for i, c in enumerate(("red", "green", "blue")):
        assert back.attributes[c].dtype == np.uint8
        np.testing.assert_array_equal(back.attributes[c], rgb[:, i])
    expected = PointCloud(pts, {k: v for k, v in attrs.items() if k != "rgb"})
    _assert_same(expected, PointCloud(back.points, {k: v for k, v in back.attributes.items() if k in attrs}))
    assert back.metadata["colour_packing"] == {"field": "rgb", "type": "F"}
    assert (back.metadata["width"], back.metadata["height"], back.metadata["data"]) == (12, 10, mode)
    np.testing.assert_allclose(back.colors(), rgb / 255)
    # written back, the channels are packed into the same float rgb field, bit for bit
    again = tmp_path / "again.pcd"
    write_points(again, back, binary=mode != "ascii", compress=mode == "binary_compressed")
    assert b"FIELDS x y z rgb label normal ring" in again.read_bytes()[:400]
    np.testing.assert_array_equal(read_points(again).attributes["red"], rgb[:, 0])
    assert np.isnan(back.points).any() and len(back.drop_nan()) == n - len(range(0, n, 7))


def test_kitti_and_nuscenes_round_trip(tmp_path):
    rng = np.random.default_rng(3)
    pts = rng.normal(size=(50, 3)).astype(np.float32)
    cloud = PointCloud(pts, {"intensity": rng.random(50).astype(np.float32)})
    write_points(tmp_path / "k.bin", cloud)
    assert (tmp_path / "k.bin").stat().st_size == 50 * 16
    _assert_same(cloud, read_points(tmp_path / "k.bin"))
    nus = PointCloud(pts, {"intensity": np.arange(50.0), "ring": np.arange(50) % 32})
    write_points(tmp_path / "n.pcd.bin", nus, format="nuscenes")
    back = read_points(tmp_path / "n.pcd.bin", format="nuscenes")
    np.testing.assert_array_equal(back.attributes["ring"], np.arange(50) % 32)


@pytest.mark.parametrize("fmt", ["ply", "npz", "pcd", "kitti", "las"])
def test_streams(fmt):
    cloud = PointCloud(_cloud(30).points, {"intensity": np.arange(30, dtype=np.float32)})
    if fmt == "las":
        cloud = PointCloud(
            np.round(cloud.points.astype(np.float64), 3), {"intensity": np.arange(30, dtype=np.uint16)}
        )
    buf = io.BytesIO()
    write_points(buf, cloud, format=fmt)
    back = read_points(io.BytesIO(buf.getvalue()), format=fmt)
    np.testing.assert_allclose(back.points, cloud.points, atol=1e-6)
    np.testing.assert_array_equal(back.attributes["intensity"], cloud.attributes["intensity"])
    if fmt != "kitti":  # sniffed from the first bytes
        assert read_points(io.BytesIO(buf.getvalue())).format == fmt
    assert back.source == "<stream>"


def test_stream_needs_format():
    _error("pass format=", write_points, io.BytesIO(), _cloud(3))
    _error("pass format=", read_points, io.BytesIO(b"\x00" * 32))


def test_point_cloud_value_object():
    c = PointCloud(
        np.arange(12).reshape(4, 3), {"a": [1, 2, 3, 4]}, format="pcd", metadata={"width": 2, "height": 2}
    )
    assert c.points.dtype == np.float64 and len(c) == c.num_points == 4
    sub = c.select(c.attributes["a"] > 2)
    assert len(sub) == 2 and "width" not in sub.metadata
    assert c.colors() is None and c.normals() is None
    with pytest.raises(ValueError, match=r"\(N, 3\)"):
        PointCloud(np.zeros((4, 2)))
    with pytest.raises(ValueError, match="attribute 'a'"):
        PointCloud(np.zeros((4, 3)), {"a": np.zeros(3)})
    with pytest.raises(ValueError, match="reserved"):
        PointCloud(np.zeros((4, 3)), {"x": np.zeros(4)})
    with pytest.raises(AttributeError):
        c.points = None


# ---------------------------------------------------------------- LZF


@pytest.mark.parametrize("case", range(6))
def test_lzf_round_trip_against_reference(case):
    rng = np.random.default_rng(case)
    data = [
        b"",
        b"ab",
        bytes(rng.integers(0, 256, 3000, dtype=np.uint8)),
        bytes(rng.integers(0, 3, 20000, dtype=np.uint8)),
        b"\0" * 5000 + b"xyz" * 1000,
        np.repeat(rng.integers(0, 256, 200, dtype=np.uint8), rng.integers(1, 300, 200)).tobytes(),
    ][case]
    packed = lzf.compress(data)
    assert lzf_decompress_reference(packed) == data
    assert lzf.decompress(packed, len(data)).tobytes() == data


def test_lzf_real_pcd_payload_matches_reference():
    path = _data("isprs_terrain/samp11-utm.pcd")
    raw = path.read_bytes()
    start = raw.index(b"DATA binary_compressed\n") + len(b"DATA binary_compressed\n")
    csize, usize = struct.unpack("<II", raw[start : start + 8])
    payload = raw[start + 8 : start + 8 + csize]
    assert lzf.decompress(payload, usize).tobytes() == lzf_decompress_reference(payload)


def test_lzf_corrupt():
    with pytest.raises(lzf.LZFError, match="truncated"):
        lzf.decompress(b"\x05abc", 6)
    with pytest.raises(lzf.LZFError, match="before the start"):
        lzf.decompress(b"\x00a\x20\x05", 4)
    with pytest.raises(lzf.LZFError, match="expected 9"):
        lzf.decompress(b"\x00a", 9)


# ---------------------------------------------------------------- real files

REAL = [
    ("semantickitti/seq00_000000.bin", 123389, {"intensity"}),
    ("stanford_bunny/bun_zipper.ply", 35947, {"confidence", "intensity"}),
    ("stanford_bunny/bun_zipper_res4.ply", 453, {"confidence", "intensity"}),
    ("stanford_bunny/bun000.ply", 40256, set()),
    ("scanned_objects/dragon_50k_vcg.ply", 50002, {"nx", "ny", "nz"}),
    ("scanned_objects/pcl_bunny_397.pcd", 397, set()),
    (
        "aerial_lidar/autzen_trim.las",
        110000,
        {"intensity", "classification", "gps_time", "red", "green", "blue"},
    ),
    ("aerial_lidar/simple.las", 1065, {"intensity", "classification"}),
    ("isprs_terrain/samp11-utm.pcd", 38010, set()),
    ("isprs_terrain/samp11-utm-ground.pcd", 21786, set()),
    ("indoor/room_scan1.pcd", 112586, set()),
    (
        "indoor/open3d_fragment.pcd",
        113662,
        {"red", "green", "blue", "normal_x", "normal_y", "normal_z", "curvature"},
    ),
    ("indoor/table_scene_mug_stereo_textured.pcd", 307200, {"red", "green", "blue", "alpha"}),
    ("osd_labeled/learn0.pcd", 307200, {"label", "red", "green", "blue", "alpha"}),
    ("pcl_ism_objects/ism_train_cat.pcd", 3400, set()),
]


def _data(rel: str):
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"shared test data not present: {rel}")
    return path


@pytest.mark.parametrize(("rel", "count", "attrs"), REAL, ids=[r[0].split("/")[1] for r in REAL])
def test_real_files(rel, count, attrs):
    cloud = read_points(_data(rel))
    assert len(cloud) == count
    assert attrs <= set(cloud.attributes)
    assert cloud.source == str(DATA / rel)


def test_real_file_details():
    mug = read_points(_data("indoor/table_scene_mug_stereo_textured.pcd"))
    assert mug.finite_mask().sum() == 209280 and (mug.metadata["width"], mug.metadata["height"]) == (640, 480)
    np.testing.assert_allclose(mug.drop_nan().points.min(0), [-0.456, -0.511, 0.690], atol=1e-3)
    learn0 = read_points(_data("osd_labeled/learn0.pcd"))
    assert learn0.finite_mask().sum() == 182292 and learn0.attributes["label"].dtype == np.uint32
    autzen = read_points(_data("aerial_lidar/autzen_trim.las"))
    assert autzen.points.dtype == np.float64
    assert np.bincount(autzen.attributes["classification"])[[1, 2]].tolist() == [83893, 26107]
    np.testing.assert_allclose(autzen.points.min(0), [636001.76, 848935.20, 406.26], atol=0.01)
    kitti = read_points(_data("semantickitti/seq00_000000.bin"))
    np.testing.assert_allclose(kitti.points.max(0), [79.00, 78.37, 2.96], atol=0.01)
    frag = read_points(_data("indoor/open3d_fragment.pcd"))
    colors = frag.colors()
    assert colors.shape == (113662, 3) and 0 <= colors.min() and colors.max() <= 1 and colors.std() > 0.05
    nus = read_points(
        _data("nuscenes/n015-2018-07-24-11-22-45_LIDAR_TOP_1532402927647951.pcd.bin"), format="nuscenes"
    )
    assert len(nus) == 34688 and nus.attributes["ring"].max() == 31


@pytest.mark.parametrize(
    "rel", ["isprs_terrain/samp11-utm.pcd", "indoor/table_scene_mug_stereo_textured.pcd"]
)
def test_real_pcd_reencode(tmp_path, rel):
    cloud = read_points(_data(rel))
    for binary, compress in [(True, True), (True, False)]:
        write_points(tmp_path / "o.pcd", cloud, binary=binary, compress=compress)
        back = read_points(tmp_path / "o.pcd")
        np.testing.assert_array_equal(back.points, cloud.points)
        _assert_same(cloud, back)


# ---------------------------------------------------------------- bad inputs


def _truncate(path, keep: int):
    """Cut the file to its first ``keep`` bytes (negative: drop the last ``-keep`` bytes)."""
    path.write_bytes(path.read_bytes()[:keep])
    return path


def test_missing_directory_empty(tmp_path):
    assert str(tmp_path / "nope.ply") in _error("no such file", read_points, tmp_path / "nope.ply")
    _error("is a directory", read_points, tmp_path)
    (tmp_path / "e.pcd").write_bytes(b"")
    _error("file is empty", read_points, tmp_path / "e.pcd")
    _error("input is empty", read_points, io.BytesIO(b""), format="ply")


def test_unknown_extension_and_format(tmp_path):
    (tmp_path / "a.obj").write_text("v 1 2 3\n")
    msg = _error("unknown point-cloud file extension .obj", read_points, tmp_path / "a.obj")
    assert "format=" in msg
    _error("unknown format 'obj'", read_points, tmp_path / "a.obj", format="obj")
    _error("unknown point-cloud file extension", write_points, tmp_path / "o.obj", _cloud(3))
    # *.pcd.bin is nuScenes by its name (issue 16), no longer an ambiguity error
    (tmp_path / "s.pcd.bin").write_bytes(np.arange(10, dtype=np.float32).tobytes())
    assert read_points(tmp_path / "s.pcd.bin").format == "nuscenes"


@pytest.mark.parametrize("binary", [True, False])
def test_truncated_ply(tmp_path, binary):
    write_points(tmp_path / "c.ply", _cloud(50), binary=binary)
    msg = _error("truncated", read_points, _truncate(tmp_path / "c.ply", -30))
    assert "c.ply" in msg


@pytest.mark.parametrize("binary", [True, False])
def test_ply_header_lies(tmp_path, binary):
    write_points(tmp_path / "c.ply", _cloud(10), binary=binary)
    data = (tmp_path / "c.ply").read_bytes().replace(b"element vertex 10", b"element vertex 1000")
    (tmp_path / "c.ply").write_bytes(data)
    _error("truncated.*1000", read_points, tmp_path / "c.ply")


def test_ply_bad_headers(tmp_path):
    p = tmp_path / "b.ply"
    p.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float128 x\nend_header\n1\n")
    _error("malformed PLY.*float128", read_points, p)
    p.write_bytes(
        b"ply\nformat ascii 1.0\nelement vertex 1\nproperty float a\nproperty float b\nend_header\n1 2\n"
    )
    _error("no x/y/z", read_points, p)
    p.write_bytes(
        b"ply\nformat ascii 1.0\nelement face 0\nproperty list uchar int vertex_indices\nend_header\n"
    )
    _error("no 'vertex' element", read_points, p)
    p.write_bytes(b"PLY?\nnot really\n")
    _error("not a PLY file", read_points, p)
    p.write_bytes(b"ply\nformat ascii 1.0\nelement vertex 2\nproperty float x\n")
    _error("no 'end_header'", read_points, p)


def test_bad_npz(tmp_path):
    write_points(tmp_path / "c.npz", _cloud(100))
    _error("truncated or malformed NPZ", read_points, _truncate(tmp_path / "c.npz", 500))
    np.savez(tmp_path / "m.npz", xyz=np.zeros((3, 3)))
    _error("no 'points' array.*xyz", read_points, tmp_path / "m.npz")
    np.savez(tmp_path / "o.npz", points=np.zeros((2, 3)), names=np.array([{"a": 1}, None], dtype=object))
    _error("pickled objects", read_points, tmp_path / "o.npz")
    np.savez(tmp_path / "s.npz", points=np.zeros((2, 2)))
    _error(r"\(N, 3\)", read_points, tmp_path / "s.npz")
    (tmp_path / "n.npz").write_bytes(b"\x93NUMPY not a zip")
    _error("not an NPZ archive", read_points, tmp_path / "n.npz")


PCD_HEAD = "VERSION .7\nFIELDS x y z\nSIZE 4 4 4\nTYPE F F F\nCOUNT 1 1 1\nWIDTH {n}\nHEIGHT 1\nPOINTS {n}\nDATA {d}\n"


@pytest.mark.parametrize("mode", ["ascii", "binary", "binary_compressed"])
def test_truncated_pcd(tmp_path, mode):
    write_points(
        tmp_path / "c.pcd", _cloud(400), binary=mode != "ascii", compress=mode == "binary_compressed"
    )
    _error("truncated PCD", read_points, _truncate(tmp_path / "c.pcd", -40))


def test_pcd_header_lies_and_bad_types(tmp_path):
    p = tmp_path / "b.pcd"
    p.write_bytes(PCD_HEAD.format(n=5, d="binary").encode() + np.zeros(3 * 3, np.float32).tobytes())
    assert "5 items" in _error("truncated PCD binary data", read_points, p)
    p.write_bytes(PCD_HEAD.format(n=5, d="ascii").encode() + b"1 2 3\n4 5 6\n")
    _error("5 points", read_points, p)
    p.write_bytes(PCD_HEAD.replace("TYPE F F F", "TYPE F F X").format(n=1, d="ascii").encode() + b"1 2 3\n")
    _error("unknown PCD field type", read_points, p)
    p.write_bytes(PCD_HEAD.replace("SIZE 4 4 4", "SIZE 4 4 2").format(n=1, d="ascii").encode() + b"1 2 3\n")
    _error("unknown PCD field type", read_points, p)
    p.write_bytes(PCD_HEAD.format(n=1, d="binary_lz4").encode())
    _error("unknown PCD DATA mode", read_points, p)
    p.write_bytes(
        PCD_HEAD.replace("FIELDS x y z", "FIELDS x y w").format(n=1, d="ascii").encode() + b"1 2 3\n"
    )
    _error("no z field", read_points, p)
    p.write_bytes(b"hello\nworld\n")
    _error("not a PCD file", read_points, p)
    p.write_bytes(PCD_HEAD.format(n=1, d="ascii").encode() + b"1 2 abc\n")
    _error("non-numeric", read_points, p)
    head = PCD_HEAD.format(n=5, d="binary_compressed").encode()
    p.write_bytes(head + struct.pack("<II", 4, 60) + b"\x00\x01\x02\x03")
    _error("corrupt PCD binary_compressed", read_points, p)


def test_pcd_old_header_and_counts(tmp_path):
    p = tmp_path / "v5.pcd"
    text = "VERSION .5\nFIELDS x y z h\nSIZE 4 4 4 4\nTYPE F F F F\nCOUNT 1 1 1 2\nWIDTH 2\nHEIGHT 1\nPOINTS 2\nDATA ascii\n"
    p.write_bytes(text.encode() + b"1 2 3 4 5\n6 7 8 9 nan\n")
    c = read_points(p)
    assert c.attributes["h"].shape == (2, 2) and np.isnan(c.attributes["h"][1, 1])
    assert c.metadata["viewpoint"] == (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)


def test_bad_kitti(tmp_path):
    (tmp_path / "k.bin").write_bytes(b"\0" * 20)
    _error("not a whole number of kitti points", read_points, tmp_path / "k.bin")
    msg = _error("stores x, y, z, intensity only", write_points, tmp_path / "o.bin", _cloud(5))
    assert "o.bin" in msg and not (tmp_path / "o.bin").exists()


def test_bad_las(tmp_path):
    write_points(tmp_path / "c.las", _las_cloud(50))
    _error("truncated", read_points, _truncate(tmp_path / "c.las", -7))
    cloud = PointCloud(np.zeros((3, 3)), {"intensity": np.array([0.1, 0.5, 1.0], np.float32)})
    _error("fractional values", write_points, tmp_path / "i.las", cloud)
    _error("NaN", write_points, tmp_path / "n.las", PointCloud(np.full((2, 3), np.nan)))
    bad = PointCloud(np.zeros((2, 3)), {"return_number": np.array([1, 9])})
    _error("return_number", write_points, tmp_path / "r.las", bad)
    assert not any(tmp_path.glob("[inr].las"))


# ---------------------------------------------------------------- sparse NPZ


def _sparse_arrays(n=40, c=3):
    rng = np.random.default_rng(5)
    coords = np.unique(rng.integers(0, 10, (n * 2, 4)), axis=0)[:n].astype(np.int32)
    coords[:, 0] %= 2
    coords = np.unique(coords, axis=0)
    return coords, rng.normal(size=(len(coords), c)).astype(np.float32)


def test_sparse_round_trip(tmp_path):
    coords, feats = _sparse_arrays()
    path = tmp_path / "s.npz"
    write_sparse(
        path,
        coords,
        feats,
        stride=2,
        voxel_size=(0.1, 0.1, 0.2),
        origin=(1, 2, 3),
        feature_names=["r", "g", "b"],
    )
    sf = read_sparse(path)
    assert isinstance(sf, SparseFile) and sf.format == "lattice.sparse/1"
    np.testing.assert_array_equal(sf.coords, coords)
    np.testing.assert_array_equal(sf.feats, feats)
    assert sf.coords.dtype == np.int32 and sf.stride.dtype == np.int32 and sf.voxel_size.dtype == np.float64
    assert (
        sf.stride.tolist() == [2, 2, 2]
        and sf.origin.tolist() == [1, 2, 3]
        and sf.feature_names == ("r", "g", "b")
    )
    with zipfile.ZipFile(path) as z, z.open("feature_names.npy") as f:
        assert np.lib.format.read_array(f, allow_pickle=False).dtype.kind == "U"
    buf = io.BytesIO()
    write_sparse(buf, coords[:0], feats[:0, :0], compress=True)
    empty = read_sparse(io.BytesIO(buf.getvalue()))
    assert empty.num_rows == 0 and empty.num_channels == 0 and empty.feature_names == ()
    assert read_sparse(_save(tmp_path)).feature_names == ("f0", "f1", "f2")


def _save(tmp_path, **overrides):
    """A valid sparse NPZ, then with keys replaced (or removed, for None) by ``overrides``."""
    coords, feats = _sparse_arrays()
    path = tmp_path / "t.npz"
    write_sparse(path, coords, feats)
    if overrides:
        with np.load(path) as z:
            arrays = dict(z)
        arrays.update(overrides)
        np.savez(path, **{k: v for k, v in arrays.items() if v is not None})
    return path


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"format": np.array("lattice.sparse/9")}, "unsupported sparse format tag"),
        ({"format": None}, "no 'format' key"),
        ({"origin": None}, r"missing keys \['origin'\]"),
        ({"coords": np.zeros((3, 4), np.float32)}, "coords must be int32"),
        ({"coords": np.zeros((3, 3), np.int32)}, r"coords must be an integer \(N, 4\)"),
        ({"feats": np.zeros(7, np.float32)}, r"feats must be a numeric \(\d+, C\)"),
        ({"stride": np.array([1, 2], np.int32)}, "stride must be 3 ints"),
        ({"voxel_size": np.array([0.1, 0, 1])}, "must be positive"),
        ({"feature_names": np.array([1, 2, 3])}, "feature_names must be a 1-D unicode"),
        ({"feature_names": np.array(["a", "b"])}, "feature_names must be 3 unique"),
    ],
)
def test_sparse_bad_files(tmp_path, override, match):
    path = _save(tmp_path, **override)
    assert "t.npz" in _error(match, read_sparse, path)


def test_sparse_bad_writes_and_kinds(tmp_path):
    coords, feats = _sparse_arrays()
    dup = np.concatenate([coords, coords[:1]])
    _error("unique", write_sparse, tmp_path / "d.npz", dup, np.zeros((len(dup), 1)))
    _error("batch indices", write_sparse, tmp_path / "b.npz", -np.ones((1, 4), np.int32), np.zeros((1, 1)))
    _error("coords must be an integer", write_sparse, tmp_path / "f.npz", coords.astype(float), feats)
    assert not list(tmp_path.iterdir())
    write_points(tmp_path / "p.npz", _cloud(5))
    _error("use read_points", read_sparse, tmp_path / "p.npz")
    write_sparse(tmp_path / "s.npz", coords, feats)
    _error("use read_sparse", read_points, tmp_path / "s.npz")
    np.savez(tmp_path / "o.npz", format=np.array("lattice.sparse/1"), coords=np.array([None], dtype=object))
    _error("pickled objects", read_sparse, tmp_path / "o.npz")


# ---------------------------------------------------------------- atomic writes


def test_atomic_write_failure_keeps_existing(tmp_path):
    target = tmp_path / "out.ply"
    target.write_bytes(b"original")
    with pytest.raises(RuntimeError), atomic_write(target) as f:
        f.write(b"partial")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"original"
    assert [p.name for p in tmp_path.iterdir()] == ["out.ply"]


def test_atomic_write_success_and_mode(tmp_path):
    target = tmp_path / "new.bin"
    with atomic_write(target) as f:
        f.write(b"data")
    assert target.read_bytes() == b"data" and [p.name for p in tmp_path.iterdir()] == ["new.bin"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~umask
    os.chmod(target, 0o640)
    with atomic_write(target) as f:
        f.write(b"more")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    with pytest.raises(IsADirectoryError):
        with atomic_write(tmp_path):
            pass


def test_failed_write_points_leaves_nothing(tmp_path):
    target = tmp_path / "scan.las"
    good = PointCloud(np.zeros((2, 3)), {"intensity": np.array([1, 2], np.uint16)})
    write_points(target, good)
    before = target.read_bytes()
    bad = PointCloud(np.zeros((2, 3)), {"intensity": np.array([0.5, 2.5])})
    _error("fractional", write_points, target, bad)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["scan.las"]
    _error("fractional", write_points, tmp_path / "fresh.las", bad)
    assert not (tmp_path / "fresh.las").exists()


def test_ply_vertex_list_property_falls_back(tmp_path):
    from plyfile import PlyData, PlyElement

    v = np.empty(3, dtype=[("x", "f4"), ("y", "f4"), ("z", "f4"), ("nbrs", "O")])
    v["x"], v["y"], v["z"] = [1, 2, 3], 0, 0
    v["nbrs"] = [np.array([1, 2], np.int32), np.array([0], np.int32), np.array([], np.int32)]
    PlyData([PlyElement.describe(v, "vertex")]).write(str(tmp_path / "l.ply"))
    c = read_points(tmp_path / "l.ply")
    np.testing.assert_array_equal(c.points[:, 0], [1, 2, 3])
    assert c.attributes == {}


def test_laz_stream_and_sniffing(tmp_path):
    if not HAVE_LAZRS:
        pytest.skip("lazrs")
    buf = io.BytesIO()
    write_points(buf, _las_cloud(20), format="laz")
    back = read_points(io.BytesIO(buf.getvalue()))
    assert back.format == "laz" and len(back) == 20


def test_write_points_type_and_format_names(tmp_path):
    from lattice.io import format_from_name

    with pytest.raises(TypeError, match="PointCloud"):
        write_points(tmp_path / "a.ply", np.zeros((3, 3)))
    names = ("A.PLY", "b.laz", "c.bin", "d.txt", "e.PCD.BIN", "f.npy", "g.obj")
    assert [format_from_name(n) for n in names] == ["ply", "laz", "kitti", "text", "nuscenes", "npy", None]
    write_points(tmp_path / "a.data", _cloud(4), format=".PLY")
    assert read_points(tmp_path / "a.data", format="ply").num_points == 4


def test_absurd_counts_fail_before_allocating(tmp_path):
    write_points(tmp_path / "c.ply", _cloud(10))
    data = (tmp_path / "c.ply").read_bytes().replace(b"element vertex 10", b"element vertex 999999999999")
    (tmp_path / "c.ply").write_bytes(data)
    _error("truncated PLY vertex data.*999999999999", read_points, tmp_path / "c.ply")
    (tmp_path / "c.pcd").write_bytes(PCD_HEAD.format(n=10**12, d="binary").encode() + b"\0" * 24)
    _error("truncated PCD binary data", read_points, tmp_path / "c.pcd")
