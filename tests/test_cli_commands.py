"""`lattice voxelize | pool | upsample | info | model-run | demo` through CliRunner: every flag,
stdin/stdout, --json summaries, exit codes."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from typer.testing import CliRunner

from lattice.data import synthetic_room
from lattice.io import PointCloud, read_sparse, write_points
from lattice_cli.main import app

runner = CliRunner()
ROOM = synthetic_room(4000, seed=1)


def run(*args, input=None):
    return runner.invoke(app, [str(a) for a in args], input=input)


@pytest.fixture
def room_ply(tmp_path):
    write_points(tmp_path / "room.ply", ROOM)
    return tmp_path / "room.ply"


@pytest.fixture
def voxels(tmp_path, room_ply):
    r = run("voxelize", room_ply, "-o", tmp_path / "v.npz", "--voxel-size", "0.1")
    assert r.exit_code == 0, r.output
    return tmp_path / "v.npz"


def test_help_lists_every_command():
    r = run("--help")
    for name in ("voxelize", "pool", "upsample", "model-run", "info", "demo", "explain", "backend"):
        assert name in r.output
    for name in ("voxelize", "pool", "upsample", "model-run", "info", "demo"):
        assert run(name, "--help").exit_code == 0


def test_voxelize_text_and_json(tmp_path, room_ply):
    r = run("voxelize", room_ply, "-o", tmp_path / "a.npz", "--voxel-size", "0.1")
    assert r.exit_code == 0, r.output
    assert "4000 points ->" in r.stdout and "[streamed]" in r.stdout
    r = run("voxelize", room_ply, "-o", tmp_path / "b.npz", "-s", "0.1", "--json")
    s = json.loads(r.stdout)
    sf = read_sparse(tmp_path / "b.npz")
    assert s["voxels"] == sf.num_rows and s["points"] == 4000 and s["reduction"] == "by kind"
    assert s["feature_names"] == ["intensity", "red", "green", "blue", "label"] == list(sf.feature_names)
    assert s["reductions"] == {
        "intensity": "mean",
        "red": "mean",
        "green": "mean",
        "blue": "mean",
        "label": "mode",
    }
    assert [i.kind for i in sf.schema] == ["continuous", "colour", "colour", "colour", "categorical"]
    assert s["output"] == str(tmp_path / "b.npz")


@pytest.mark.parametrize("reduce", ["mean", "sum", "max", "first", "count"])
def test_voxelize_reduce(tmp_path, room_ply, reduce):
    r = run("voxelize", room_ply, "-o", tmp_path / "o.npz", "-s", "0.2", "--reduce", reduce, "--json")
    assert r.exit_code == 0, r.output
    sf = read_sparse(tmp_path / "o.npz")
    if reduce == "count":
        assert sf.feature_names == ("count",) and sf.feats.sum() == 4000
    else:
        assert sf.num_channels == 5


def test_voxelize_features_origin_and_anisotropic_size(tmp_path, room_ply):
    out = tmp_path / "o.npz"
    r = run(
        "voxelize",
        room_ply,
        "-o",
        out,
        "-s",
        "0.1,0.1,0.2",
        "--features",
        "intensity,label",
        "--origin",
        "min",
    )
    assert r.exit_code == 0, r.output
    sf = read_sparse(out)
    assert sf.feature_names == ("intensity", "label") and sf.coords[:, 1:].min() == 0
    np.testing.assert_allclose(sf.voxel_size, [0.1, 0.1, 0.2])
    np.testing.assert_allclose(sf.origin, ROOM.points.min(axis=0), rtol=1e-6)
    r = run("voxelize", room_ply, "-o", out, "-s", "0.5", "--origin", "1,2,3", "-f", "none")
    assert r.exit_code == 0 and read_sparse(out).feature_names == ("count",)
    np.testing.assert_allclose(read_sparse(out).origin, [1, 2, 3])


def test_voxelize_stdin_to_stdout_with_format(tmp_path):
    cloud = PointCloud(ROOM.points, {"intensity": ROOM.attributes["intensity"]})
    buf = io.BytesIO()
    write_points(buf, cloud, format="kitti")
    r = run("voxelize", "-", "-o", "-", "-s", "0.2", "--format", "kitti", "--json", input=buf.getvalue())
    assert r.exit_code == 0, r.stderr
    sf = read_sparse(io.BytesIO(r.stdout_bytes))
    assert sf.feature_names == ("intensity",)
    assert json.loads(r.stderr)["voxels"] == sf.num_rows  # the summary moves to stderr


def test_voxelize_nan_warning_and_strict(tmp_path):
    pts = ROOM.points.copy()
    pts[:3, 0] = np.nan
    write_points(tmp_path / "nan.ply", PointCloud(pts))
    r = run("voxelize", tmp_path / "nan.ply", "-o", tmp_path / "o.npz", "-s", "0.2")
    assert r.exit_code == 0
    assert "warning: " in r.stderr and "dropped 3 points with non-finite coordinates" in r.stderr


def test_pool_every_mode_and_flags(tmp_path, voxels):
    src = read_sparse(voxels)
    for mode in ("sum", "max", "avg"):
        out = tmp_path / f"{mode}.npz"
        r = run("pool", voxels, "-o", out, "--mode", mode, "--kernel-size", "3", "--stride", "2", "--json")
        assert r.exit_code == 0, r.output
        s = json.loads(r.stdout)
        sf = read_sparse(out)
        assert s["mode"] == mode and s["rows_out"] == sf.num_rows and sf.stride.tolist() == [2, 2, 2]
        assert sf.feature_names == src.feature_names
    r = run("pool", voxels, "-o", tmp_path / "aniso.npz", "-k", "2,2,1", "-s", "2,2,1")
    assert r.exit_code == 0 and "rows at stride [2, 2, 1]" in r.stdout
    assert read_sparse(tmp_path / "aniso.npz").stride.tolist() == [2, 2, 1]


def test_pool_stdin_stdout(voxels):
    r = run("pool", "-", "-o", "-", "-m", "max", input=voxels.read_bytes())
    assert r.exit_code == 0, r.stderr
    assert read_sparse(io.BytesIO(r.stdout_bytes)).stride.tolist() == [2, 2, 2]


def test_upsample_methods_and_target(tmp_path, voxels):
    pooled = tmp_path / "p.npz"
    assert run("pool", voxels, "-o", pooled).exit_code == 0
    r = run("upsample", pooled, "-o", tmp_path / "u.npz", "--stride", "2", "--target", voxels, "--json")
    assert r.exit_code == 0, r.output
    up, fine = read_sparse(tmp_path / "u.npz"), read_sparse(voxels)
    np.testing.assert_array_equal(up.coords, fine.coords)
    assert json.loads(r.stdout)["target"] is True and up.stride.tolist() == [1, 1, 1]
    r = run("upsample", pooled, "-o", tmp_path / "g.npz", "--method", "trilinear")
    assert r.exit_code == 0 and "generated support" in r.stdout
    r = run(
        "upsample", pooled, "-o", tmp_path / "t.npz", "--method", "transpose", "--kernel-size", "2", "--json"
    )
    assert r.exit_code == 0 and json.loads(r.stdout)["kernel_size"] == [2, 2, 2]


def test_info_points_and_sparse(tmp_path, room_ply, voxels):
    r = run("info", room_ply)
    assert (
        r.exit_code == 0
        and "point cloud (ply)" in r.stdout
        and "4000" in r.stdout
        and "intensity" in r.stdout
    )
    d = json.loads(run("info", room_ply, "--json").stdout)
    assert d["kind"] == "points" and d["points"] == 4000 and d["file"] == str(room_ply)
    r = run("info", voxels)
    assert r.exit_code == 0 and "sparse tensor" in r.stdout and "stride" in r.stdout and "label" in r.stdout
    d = json.loads(run("info", voxels, "--json").stdout)
    assert d["kind"] == "sparse" and d["stride"] == [1, 1, 1] and d["batches"] == 1 and d["channels"] == 5
    d = json.loads(run("info", "-", "--json", input=voxels.read_bytes()).stdout)
    assert d["kind"] == "sparse" and d["file"] == "-"
    buf = io.BytesIO()
    write_points(buf, PointCloud(ROOM.points, {"intensity": ROOM.attributes["intensity"]}), format="kitti")
    d = json.loads(run("info", "-", "--format", "kitti", "--json", input=buf.getvalue()).stdout)
    assert d["points"] == 4000 and d["attributes"][0]["name"] == "intensity"


def test_model_run_needs_a_bundle(tmp_path, room_ply):
    """A directory without model.json is not a bundle (tests/test_models_cli.py runs real ones)."""
    r = run("model-run", tmp_path, room_ply, "-o", tmp_path / "out.npz")
    assert r.exit_code == 1
    assert "missing model.json" in r.stderr
    assert not (tmp_path / "out.npz").exists()


def test_demo_text_and_json(tmp_path):
    r = run("demo")
    assert r.exit_code == 0, r.output
    for word in ("voxelize", "pool max k2 s2", "upsample trilinear s2", "50000"):
        assert word in r.stdout
    d = json.loads(run("demo", "--json", "--points", "3000", "--voxel-size", "0.2").stdout)
    assert d["points"] == 3000 and d["voxels"] == d["upsampled"] > d["pooled"] > 0
    assert [s["stage"] for s in d["stages"]][0] == "sample"
    other = json.loads(run("demo", "--json", "--points", "3000", "--voxel-size", "0.2", "--seed", "7").stdout)
    assert other["mean_abs_change"] != d["mean_abs_change"]
    r = run("demo", "--output-dir", tmp_path / "demo", "--points", "2000")
    assert r.exit_code == 0 and (tmp_path / "demo" / "pooled.npz").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["voxelize", "a.ply", "-o", "x.npz"], "Missing option '--voxel-size'"),
        (["voxelize", "a.ply", "-s", "abc", "-o", "x.npz"], "--voxel-size must be one or three floats"),
        (["voxelize", "a.ply", "-s", "1,2", "-o", "x.npz"], "one or three numbers"),
        (["voxelize", "a.ply", "-s", "1"], "missing -o/--output"),
        (["voxelize", "a.ply", "b.ply", "-s", "1", "-o", "x.npz"], "-o/--output takes a single input"),
        (["voxelize", "a.ply", "b.ply", "-s", "1"], "need --output-dir"),
        (["voxelize", "a.ply", "-s", "1", "-o", "x.npz", "--workers", "0"], "--workers"),
        (["pool", "a.npz", "-o", "x.npz", "--mode", "median"], "--mode must be one of sum, max, avg"),
        (["pool", "a.npz", "-o", "x.npz", "-k", "two"], "--kernel-size must be one or three ints"),
        (["upsample", "a.npz", "-o", "x.npz", "--method", "cubic"], "--method must be one of trilinear"),
        (["upsample", "a.npz", "-o", "x.npz", "-k", "2"], "--kernel-size applies to --method transpose only"),
        (["nonsense"], "No such command"),
    ],
)
def test_usage_errors_exit_2(tmp_path, monkeypatch, args, message):
    monkeypatch.chdir(tmp_path)
    r = run(*args)
    assert r.exit_code == 2, r.output
    assert message in r.output
    assert not (tmp_path / "x.npz").exists()
