"""Users' data survives the file-level tool (issue 16): each complaint seen, through the installed
``lattice`` command on the real files it was seen on, checked against an independent reference
(NumPy on the raw file bytes, plyfile, laspy, Open3D)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import data_file, lattice

from lattice.io import read_points, read_sparse


def _voxel_groups(points: np.ndarray, size: float) -> tuple[np.ndarray, np.ndarray]:
    """(unique voxel keys in first-occurrence order, voxel index of every point): the obvious way."""
    keys = np.floor(points.astype(np.float64) / size).astype(np.int64)
    uniq, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)  # renumber by first occurrence, as lattice does
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return uniq[order], rank[inverse.ravel()]


def _pcd_packed_colour(path) -> np.ndarray:
    """The open3d fragment's packed float rgb, straight from the binary PCD bytes (x y z rgb nx ny nz c)."""
    raw = path.read_bytes()
    start = raw.index(b"DATA binary\n") + len(b"DATA binary\n")
    rec = np.frombuffer(raw[start:], np.float32).reshape(-1, 8)
    bits = rec[:, 3].copy().view(np.uint32)
    return np.stack([(bits >> 16) & 255, (bits >> 8) & 255, bits & 255], axis=1).astype(np.float64), rec[
        :, :3
    ]


@pytest.mark.parametrize("ext", [".npz", ".ply", ".pcd"])
def test_packed_pcl_colour_is_averaged_per_channel(tmp_path, ext):
    """Seen 1: `voxelize open3d_fragment.pcd -s 0.01` averaged the packed rgb bits (info showed rgb 0..0)."""
    src = data_file("indoor/open3d_fragment.pcd")
    out = tmp_path / f"f{ext}"
    r = lattice("voxelize", src, "-o", out, "-s", "0.01")
    assert r.returncode == 0, r.stderr
    rgb, xyz = _pcd_packed_colour(src)
    keys, inverse = _voxel_groups(xyz, 0.01)
    want = np.zeros((len(keys), 3))
    np.add.at(want, inverse, rgb)
    want /= np.bincount(inverse)[:, None]
    if ext == ".npz":
        sf = read_sparse(out)
        np.testing.assert_array_equal(sf.coords[:, 1:], keys)
        got = sf.feats[:, [sf.feature_names.index(c) for c in ("red", "green", "blue")]]
        np.testing.assert_allclose(got, want, atol=1e-3)  # unrounded means in the tensor
        info = json.loads(lattice("info", out, "--json").stdout)
        red = next(c for c in info["channel_stats"] if c["name"] == "red")
        assert red["max"] > 200 and red["mean"] > 50  # not the 0..0 of averaged bit patterns
    else:
        cloud = read_points(out)
        got = np.stack([cloud.attributes[c] for c in ("red", "green", "blue")], axis=1)
        assert got.dtype == np.uint8
        centres = (keys + 0.5) * 0.01
        np.testing.assert_allclose(cloud.points, centres, atol=1e-9)
        assert np.abs(got - want).max() <= 0.5 + 1e-9  # rounded to the 8-bit channel


def test_colour_matches_open3d_decoding(tmp_path):
    o3d = pytest.importorskip("open3d")
    src = data_file("indoor/open3d_fragment.pcd")
    r = lattice("voxelize", src, "-o", tmp_path / "f.ply", "-s", "0.01")
    assert r.returncode == 0, r.stderr
    pc = o3d.io.read_point_cloud(str(src))
    keys, inverse = _voxel_groups(np.asarray(pc.points), 0.01)
    want = np.zeros((len(keys), 3))
    np.add.at(want, inverse, np.asarray(pc.colors) * 255)
    want /= np.bincount(inverse)[:, None]
    cloud = read_points(tmp_path / "f.ply")
    got = np.stack([cloud.attributes[c] for c in ("red", "green", "blue")], axis=1).astype(np.float64)
    assert np.abs(got - want).max() <= 0.5 + 1e-6


def test_uint32_rgba_and_labels_of_an_organised_frame(tmp_path):
    """Seen 1 and 2: learn0's uint32 rgba was averaged as a number and its labels came out fractional."""
    src = data_file("osd_labeled/learn0.pcd")
    r = lattice("voxelize", src, "-o", tmp_path / "l.npz", "-s", "0.01", "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["reductions"]["label"] == "mode" and summary["kinds"]["red"] == "colour"
    sf = read_sparse(tmp_path / "l.npz")
    raw = read_points(src).drop_nan()
    keys, inverse = _voxel_groups(raw.points, 0.01)
    np.testing.assert_array_equal(sf.coords[:, 1:], keys)
    labels = raw.attributes["label"].astype(np.int64)
    want = np.empty(len(keys))
    order = np.argsort(inverse, kind="stable")
    bounds = np.searchsorted(inverse[order], np.arange(len(keys) + 1))
    for v in range(len(keys)):  # the mode of each voxel's labels, ties to the smallest
        values, counts = np.unique(labels[order[bounds[v] : bounds[v + 1]]], return_counts=True)
        want[v] = values[np.argmax(counts)]
    np.testing.assert_array_equal(sf.feats[:, sf.feature_names.index("label")], want)
    red = sf.feats[:, sf.feature_names.index("red")]
    assert red.max() <= 255 and red.min() >= 0  # a channel, not a uint32 of packed bits
    r = lattice("voxelize", src, "-o", tmp_path / "l.ply", "-s", "0.01")
    cloud = read_points(tmp_path / "l.ply")
    assert cloud.attributes["label"].dtype == np.uint32
    np.testing.assert_array_equal(cloud.attributes["label"], want)


def test_las_class_like_dimensions_take_the_mode(tmp_path):
    """Seen 2: LAS classification and return_number came out fractional."""
    laspy = pytest.importorskip("laspy")
    src = data_file("aerial_lidar/autzen_trim.las")
    r = lattice("voxelize", src, "-o", tmp_path / "a.npz", "-s", "2")
    assert r.returncode == 0, r.stderr
    sf = read_sparse(tmp_path / "a.npz")
    las = laspy.read(src)
    xyz = np.stack([las.x, las.y, las.z], axis=1)
    keys, inverse = _voxel_groups(xyz, 2.0)
    np.testing.assert_array_equal(sf.coords[:, 1:], keys)
    for name in ("classification", "return_number", "number_of_returns", "point_source_id"):
        got = sf.feats[:, sf.feature_names.index(name)]
        assert np.all(got == np.round(got)), name
        values = np.asarray(las[name]).astype(np.int64)
        counts = np.zeros((len(keys), values.max() + 1), np.int64)
        np.add.at(counts, (inverse, values), 1)
        np.testing.assert_array_equal(got, counts.argmax(axis=1), err_msg=name)  # argmax: first = smallest
    info = {i.name: i for i in sf.schema}
    assert info["classification"].kind == "categorical" and info["intensity"].kind == "continuous"
    assert info["gps_time"].kind == "time" and sf.feats.dtype == np.float64  # times keep float64


def test_autzen_to_las_keeps_crs_and_classification(tmp_path):
    """Seen 4 / done-when: autzen_trim.las -> .las at 2 m keeps every CRS record, classification is the mode."""
    laspy = pytest.importorskip("laspy")
    src = data_file("aerial_lidar/autzen_trim.las")
    r = lattice("voxelize", src, "-o", tmp_path / "a.las", "-s", "2")
    assert r.returncode == 0, r.stderr
    before, after = laspy.read(src), laspy.read(tmp_path / "a.las")
    crs = lambda las: {(v.user_id, v.record_id): v.record_data_bytes() for v in las.header.vlrs  # noqa: E731
                       if v.user_id == "LASF_Projection"}  # fmt: skip
    assert set(crs(before)) >= {("LASF_Projection", k) for k in (34735, 34736, 34737, 2112)}
    assert crs(after) == crs(before)
    assert after.header.point_format.id == before.header.point_format.id
    np.testing.assert_allclose(after.header.scales, before.header.scales)
    xyz = np.stack([before.x, before.y, before.z], axis=1)
    keys, inverse = _voxel_groups(xyz, 2.0)
    cls = np.asarray(before.classification).astype(np.int64)
    counts = np.zeros((len(keys), cls.max() + 1), np.int64)
    np.add.at(counts, (inverse, cls), 1)
    np.testing.assert_array_equal(np.asarray(after.classification), counts.argmax(axis=1))
    np.testing.assert_allclose(np.stack([after.x, after.y, after.z], 1), (keys + 0.5) * 2.0, atol=0.006)


@pytest.mark.parametrize("ext", [".ply", ".pcd", ".las", ".laz", ".npz"])
def test_voxel_output_follows_the_extension(tmp_path, ext):
    """Seen 3: `voxelize bun_zipper.ply -o v.ply` exited 0 and wrote an NPZ named v.ply."""
    src = data_file("stanford_bunny/bun_zipper.ply")
    out = tmp_path / f"v{ext}"
    r = lattice("voxelize", src, "-o", out, "-s", "0.005")
    assert r.returncode == 0, r.stderr
    head = out.read_bytes()[:16]
    magic = {".ply": b"ply", ".pcd": b"# .PCD", ".las": b"LASF", ".laz": b"LASF", ".npz": b"PK"}[ext]
    assert head.startswith(magic)
    if ext == ".ply":
        plyfile = pytest.importorskip("plyfile")
        vertex = plyfile.PlyData.read(str(out))["vertex"]
        assert {"x", "y", "z", "confidence", "intensity"} <= set(vertex.data.dtype.names)
        assert len(vertex.data) == read_sparse_rows(tmp_path, src)


def read_sparse_rows(tmp_path, src) -> int:
    r = lattice("voxelize", src, "-o", tmp_path / "ref.npz", "-s", "0.005")
    assert r.returncode == 0, r.stderr
    return read_sparse(tmp_path / "ref.npz").num_rows


def test_unknown_output_extension_is_a_usage_error(tmp_path):
    src = data_file("stanford_bunny/bun_zipper_res4.ply")
    r = lattice("voxelize", src, "-o", tmp_path / "v.vox", "-s", "0.01")
    assert r.returncode == 2 and "unknown output extension .vox" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_centroid_position_is_the_mean_of_the_points(tmp_path):
    src = data_file("stanford_bunny/bun_zipper.ply")
    r = lattice("voxelize", src, "-o", tmp_path / "c.ply", "-s", "0.01", "--position", "centroid")
    assert r.returncode == 0, r.stderr
    pts = read_points(src).points.astype(np.float64)
    keys, inverse = _voxel_groups(pts, 0.01)
    want = np.zeros((len(keys), 3))
    np.add.at(want, inverse, pts)
    want /= np.bincount(inverse)[:, None]
    got = read_points(tmp_path / "c.ply").points
    assert got.dtype == np.float32  # the input's coordinate type
    np.testing.assert_array_equal(got, want.astype(np.float32))


def test_batch_rerun_with_other_parameters_redoes(tmp_path):
    """Seen 8: a re-run with -s 0.1 into the -d of a -s 0.5 run said 'skipped' and kept the 0.5 m outputs."""
    src = data_file("aerial_lidar/pdal_extra")
    out = tmp_path / "out"
    r = lattice("voxelize", src, "-d", out, "-s", "0.5", "--json")
    s = json.loads(r.stdout)
    assert r.returncode == 0 and s["done"] == 5, r.stderr
    r = lattice("voxelize", src, "-d", out, "-s", "0.5", "--json")
    assert json.loads(r.stdout)["skipped"] == 5
    r = lattice("voxelize", src, "-d", out, "-s", "1", "--json")
    s = json.loads(r.stdout)
    assert (s["done"], s["skipped"], s["redone"], s["failed"]) == (0, 0, 5, 0)
    assert "redone 5" in lattice("voxelize", src, "-d", out, "-s", "2").stdout
    for f in out.glob("*.npz"):
        assert read_sparse(f).voxel_size.tolist() == [2.0, 2.0, 2.0]
        assert read_sparse(f).provenance["parameters"]["voxel_size"] == [2.0, 2.0, 2.0]
    # point outputs record their parameters beside them
    r = lattice("voxelize", src, "-d", tmp_path / "pts", "-s", "2", "-F", "ply", "--json")
    assert json.loads(r.stdout)["done"] == 5
    assert len(list((tmp_path / "pts").glob("*.ply.lattice.json"))) == 5
    r = lattice("voxelize", src, "-d", tmp_path / "pts", "-s", "3", "-F", "ply", "--json")
    assert json.loads(r.stdout)["redone"] == 5


def test_cli_messages_name_the_flags(tmp_path):
    """Seen 11: hints said `pass format= one of ...` where the flag is --format."""
    (tmp_path / "scan.vox").write_bytes(b"1 2 3\n")
    r = lattice("info", tmp_path / "scan.vox")
    assert r.returncode == 1 and "--format" in r.stderr and "format=" not in r.stderr
    from lattice.io import PointCloudError

    with pytest.raises(PointCloudError, match="pass format= one of"):
        read_points(tmp_path / "scan.vox")


def test_explain_output_is_whole_lines_and_gpu_needs_a_gpu(tmp_path):
    """Seen 12: explain hard-wrapped at 80 columns in a pipe; --device gpu answered for the CPU."""
    import lattice as lat

    src = data_file("semantickitti/seq00_000000.bin")
    r = lattice("explain", "subm_conv3d", src, "--voxel-size", "0.2")
    assert r.returncode == 0, r.stderr
    facts = next(line for line in r.stdout.splitlines() if line.startswith("facts"))
    assert "n_in=" in facts and "device=" in facts and len(facts) > 80  # one line, not wrapped
    assert f"on {src} at 0.2 voxel size" in r.stdout.splitlines()[0]
    r = lattice("explain", "subm_conv3d", "--device", "gpu", "--rows", "500")
    if lat.backend_info().gpu:
        assert r.returncode == 0
    else:
        assert r.returncode == 1 and "--device gpu: no GPU is available" in r.stderr


def test_convert_keeps_every_attribute(tmp_path):
    """`lattice convert` (PDAL's translate): LAS -> PLY -> LAS keeps values by kind."""
    laspy = pytest.importorskip("laspy")
    src = data_file("aerial_lidar/simple.las")
    assert lattice("convert", src, tmp_path / "s.ply").returncode == 0
    assert lattice("convert", tmp_path / "s.ply", tmp_path / "s.pcd").returncode == 0
    r = lattice("convert", tmp_path / "s.pcd", tmp_path / "s.las", "--json")
    assert r.returncode == 0, r.stderr
    a, b = laspy.read(src), laspy.read(tmp_path / "s.las")
    np.testing.assert_allclose(np.stack([b.x, b.y, b.z], 1), np.stack([a.x, a.y, a.z], 1), atol=0.005)
    for name in ("intensity", "classification", "return_number", "number_of_returns", "point_source_id"):
        np.testing.assert_array_equal(np.asarray(b[name]), np.asarray(a[name]), err_msg=name)
    for c in ("red", "green", "blue"):
        # simple.las holds 8-bit values in its 16-bit fields: PLY's uchar keeps them exactly, and the
        # LAS written from the PCD stores them at LAS's 16-bit scale (x 257): the same colour
        assert np.asarray(a[c]).max() <= 255
        np.testing.assert_array_equal(np.asarray(b[c]), np.asarray(a[c]).astype(np.int64) * 257, err_msg=c)
    assert lattice("convert", src, tmp_path / "direct.las").returncode == 0  # LAS -> LAS: raw values kept
    np.testing.assert_array_equal(np.asarray(laspy.read(tmp_path / "direct.las").red), np.asarray(a.red))
    np.testing.assert_allclose(np.asarray(b.gps_time), np.asarray(a.gps_time), rtol=0, atol=1e-6)


def test_model_run_batch_knows_its_parameters(tmp_path):
    """model-run batches skip only outputs made with the same bundle and options; -F chooses the format."""
    bundle = Path(__file__).resolve().parents[1] / "examples" / "models" / "minkunet14-semantickitti"
    scans = [
        data_file("semantickitti/sqsv3_seq00_000000.bin"),
        data_file("semantickitti/sqsv3_seq00_000001.bin"),
    ]
    out = tmp_path / "labels"
    first = json.loads(lattice("model-run", bundle, *scans, "-d", out, "-F", "ply", "--json").stdout)
    assert first["done"] == 2 and sorted(p.name for p in out.glob("*.ply")) == [
        "sqsv3_seq00_000000.ply",
        "sqsv3_seq00_000001.ply",
    ]
    again = json.loads(lattice("model-run", bundle, *scans, "-d", out, "-F", "ply", "--json").stdout)
    assert again["skipped"] == 2
    other = json.loads(lattice("model-run", bundle, *scans, "-d", out, "-F", "ply", "-p", "--json").stdout)
    assert other["redone"] == 2
    assert any(k.startswith("pred_prob_") for k in read_points(out / "sqsv3_seq00_000000.ply").attributes)


def test_training_script_writes_a_new_folder_by_default(tmp_path, monkeypatch):
    """Seen 13: examples/train_semantickitti.py wrote by default into the shipped bundle folder."""
    import argparse
    import importlib.util

    script = Path(__file__).resolve().parents[1] / "examples" / "train_semantickitti.py"
    spec = importlib.util.spec_from_file_location("train_semantickitti", script)
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    monkeypatch.chdir(tmp_path)
    out = train.output_folder(argparse.Namespace(output=None, overwrite=False))
    assert out.parts[0] == "runs" and out.name.startswith("minkunet14-") and not out.exists()
    shipped = script.parent / "models" / "minkunet14-semantickitti"
    with pytest.raises(SystemExit, match="exists and is not empty; pass --overwrite"):
        train.output_folder(argparse.Namespace(output=shipped, overwrite=False))
    assert train.output_folder(argparse.Namespace(output=shipped, overwrite=True)) == shipped


def test_directory_mode_reports_what_it_skips(tmp_path):
    """Seen 6: directory mode skipped .npy files without a word; now points .npy are read, and label
    arrays, calibration and time tables are skipped with the reason."""
    d = tmp_path / "seq"
    d.mkdir()
    for name in ("kitti_01_points_000000.npy", "kitti_01_labels_000000.npy"):
        (d / name).symlink_to(data_file(f"semantickitti/{name}"))
    (d / "calib.txt").write_text("P0: 7.1 0 6.0 0\nP1: 7.1 0 6.0 -3.8\n")
    (d / "times.txt").write_text("0.000000e+00\n1.037359e-01\n")
    (d / "poses.xyz").write_text("1 2 3\n4 5 6\n")
    r = lattice("voxelize", d, "-d", tmp_path / "out", "-s", "0.5", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    status = {Path(f["input"]).name: (f["status"], f.get("reason", "")) for f in s["files"]}
    assert status["kitti_01_points_000000.npy"][0] == status["poses.xyz"][0] == "done"
    assert status["kitti_01_labels_000000.npy"] == (
        "skipped",
        "a .npy of one value per row (per-point labels?), not points",
    )
    assert status["calib.txt"][0] == status["times.txt"][0] == "skipped"
    assert "does not look like a point table" in status["calib.txt"][1]
    assert r.stderr.count("lattice: warning: skipped ") == 3
    r = lattice("voxelize", d / "calib.txt", "-o", tmp_path / "c.npz", "-s", "1")  # named: tried, fails
    assert r.returncode == 1 and "'P0:' is not a number" in r.stderr


def test_convert_an_organised_frame_to_las_drops_the_invalid_pixels(tmp_path):
    laspy = pytest.importorskip("laspy")
    src = data_file("osd_labeled/learn0.pcd")
    r = lattice("convert", src, tmp_path / "l.las", "--json")
    assert r.returncode == 0, r.stderr
    assert "dropped 124908 points with non-finite coordinates (LAS cannot store them)" in r.stderr
    las, cloud = laspy.read(tmp_path / "l.las"), read_points(src).drop_nan()
    assert len(las.points) == 182292
    np.testing.assert_array_equal(np.asarray(las.label), cloud.attributes["label"])
    np.testing.assert_array_equal(np.asarray(las.red), cloud.attributes["red"].astype(np.uint16) * 257)
