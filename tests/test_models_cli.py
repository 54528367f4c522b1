"""`lattice model-run`: every input format, output formats, pipes, batch mode, --quantize,
--probabilities, errors (exit codes, no partial output), and the shipped model on the KITTI scan.

What the prediction fields are and that input attributes survive: tests/test_model_run_fields.py;
the training-domain check: tests/test_domain.py."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from typer.testing import CliRunner

from lattice.io import PointCloud, read_points, write_points
from lattice.models import ClassInfo, FeatureSpec, Outputs, Preprocessing, minkunet, save_model
from lattice_cli.main import app

runner = CliRunner()
LATTICE = [sys.executable, "-m", "lattice_cli.main"]
REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "examples" / "models" / "minkunet14-semantickitti"
KITTI = REPO.parent / "shared" / "data" / "semantickitti" / "seq00_000000.bin"
CLASSES = (ClassInfo(1, "ground", (10, 20, 30)), ClassInfo(2, "thing", (200, 100, 0)), ClassInfo(3, "sky"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """A small random MinkUNet bundle: inputs ones + z + intensity, 3 classes, 0.2 m voxels."""
    mx.random.seed(7)
    model = minkunet(14, 3, 3, width=4)
    model.eval()
    pre = Preprocessing(0.2, (FeatureSpec("ones"), FeatureSpec("z"), FeatureSpec("intensity", 0.5, 0.3)))
    outputs = Outputs(CLASSES, ClassInfo(0, "unlabeled", (0, 0, 0)))
    return save_model(model, tmp_path_factory.mktemp("models") / "tiny", preprocessing=pre, outputs=outputs)


def scan(n=3000, seed=0) -> PointCloud:
    rng = np.random.default_rng(seed)
    pts = rng.normal(scale=4.0, size=(n, 3)).astype(np.float32)
    return PointCloud(pts, {"intensity": rng.uniform(0, 1, n).astype(np.float32)})


def run(*args, input=None):
    return runner.invoke(app, ["model-run", *[str(a) for a in args]], input=input)


@pytest.mark.parametrize("ext", ["ply", "npz", "pcd", "bin", "las"])
def test_every_input_format_gives_one_label_per_point(tmp_path, model_dir, ext):
    cloud = scan()
    if ext == "las":  # LAS intensity is uint16
        cloud = PointCloud(
            cloud.points, {"intensity": (cloud.attributes["intensity"] * 1000).astype(np.uint16)}
        )
    write_points(tmp_path / f"in.{ext}", cloud)
    r = run(model_dir, tmp_path / f"in.{ext}", "-o", tmp_path / "out.ply", "--json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    out = read_points(tmp_path / "out.ply")
    assert s["points"] == len(out) == len(cloud) and out.attributes["pred_label"].shape == (len(cloud),)
    np.testing.assert_allclose(out.points, cloud.points, atol=1e-3 if ext == "las" else 1e-6)
    assert set(np.unique(out.attributes["pred_label"])) <= {1, 2, 3}
    assert set(s["timings"]) == {"read", "domain", "voxelize", "network", "map_back", "write", "total"}
    assert s["domain_checked"] is False and s["domain_warnings"] == []  # this bundle records no domain


def test_output_formats_carry_labels_colours_and_class_names(tmp_path, model_dir):
    write_points(tmp_path / "in.ply", scan())
    labels = {}
    for ext in ("ply", "npz", "las", "pcd"):
        r = run(model_dir, tmp_path / "in.ply", "-o", tmp_path / f"out.{ext}", "--colorize")
        assert r.exit_code == 0, r.output
        assert r.stdout.startswith(f"{tmp_path / 'in.ply'}: 3000 points -> ")
        out = read_points(tmp_path / f"out.{ext}")
        labels[ext] = out.attributes["pred_label"]
        colors = {1: (10, 20, 30), 2: (200, 100, 0), 3: (128, 128, 128)}
        want = np.array([colors[int(v)] for v in labels[ext]])
        np.testing.assert_allclose(out.colors(), want / 255.0, atol=1e-6)
    assert all(np.array_equal(labels["ply"], v) for v in labels.values())
    with np.load(tmp_path / "out.npz", allow_pickle=False) as z:
        classes = json.loads(str(z["classes"]))
        assert z["class_names"].tolist() == ["ground", "thing", "sky"]
        names = {1: "ground", 2: "thing", 3: "sky"}
        assert z["pred_class"].tolist() == [names[int(v)] for v in z["pred_label"]]
    assert [c["name"] for c in classes] == ["ground", "thing", "sky", "unlabeled"]
    head = (tmp_path / "out.ply").read_bytes()[:2000]
    assert b"comment class 2 thing 200 100 0" in head


def test_probabilities_and_no_colours_by_default(tmp_path, model_dir):
    write_points(tmp_path / "in.ply", scan())
    r = run(model_dir, tmp_path / "in.ply", "-o", tmp_path / "out.npz", "--probabilities")
    assert r.exit_code == 0, r.output
    out = read_points(tmp_path / "out.npz")
    p = np.stack([out.attributes[f"pred_prob_{n}"] for n in ("ground", "thing", "sky")], axis=1)
    assert p.dtype == np.float32 and p.shape == (3000, 3) and "red" not in out.attributes
    assert "probabilities" not in out.attributes
    np.testing.assert_allclose(p.sum(axis=1), 1, rtol=1e-5)
    np.testing.assert_array_equal(p.argmax(axis=1) + 1, out.attributes["pred_label"])
    r = run(model_dir, tmp_path / "in.ply", "-o", tmp_path / "old.npz", "--no-colors")  # deprecated no-op
    assert r.exit_code == 0 and "--no-colors is deprecated" in r.output
    assert "red" not in read_points(tmp_path / "old.npz").attributes


def test_quantized_model_run(tmp_path, model_dir):
    write_points(tmp_path / "in.ply", scan())
    r = run(model_dir, tmp_path / "in.ply", "-o", tmp_path / "f.npz")
    q = run(model_dir, tmp_path / "in.ply", "-o", tmp_path / "q.npz", "--quantize", "int8", "--json")
    assert r.exit_code == 0 and q.exit_code == 0, q.output
    assert json.loads(q.stdout)["quantization"] == "int8"
    f, g = (read_points(tmp_path / n).attributes["pred_label"] for n in ("f.npz", "q.npz"))
    assert (f == g).mean() > 0.9
    q4 = run(model_dir, tmp_path / "in.ply", "-o", tmp_path / "q4.npz", "-q", "int4")
    assert q4.exit_code == 0, q4.output


def test_pipe_stdin_to_stdout(tmp_path, model_dir):
    write_points(tmp_path / "in.bin", scan())
    cmd = LATTICE + ["model-run", str(model_dir), "-", "--format", "kitti", "-o", "-", "--json"]
    r = subprocess.run(
        cmd, input=(tmp_path / "in.bin").read_bytes(), capture_output=True, timeout=120, cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr.decode()
    with np.load(io.BytesIO(r.stdout), allow_pickle=False) as z:
        assert z["pred_label"].shape == (3000,) and z["points"].shape == (3000, 3)
    assert json.loads(r.stderr)["output"] == "-"  # the summary goes to stderr when stdout carries data
    cmd = LATTICE + ["model-run", str(model_dir), "-", "--format", "kitti", "-o", "-", "-F", "ply"]
    r = subprocess.run(
        cmd, input=(tmp_path / "in.bin").read_bytes(), capture_output=True, timeout=120, cwd=tmp_path
    )
    assert r.returncode == 0 and r.stdout.startswith(b"ply\n")


def test_batch_mode(tmp_path, model_dir):
    d = tmp_path / "scans"
    (d / "sub").mkdir(parents=True)
    write_points(d / "a.ply", scan(1000, 1))
    write_points(d / "sub" / "b.bin", scan(2000, 2))
    (d / "bad.ply").write_bytes(b"ply\nformat ascii 1.0\nend_header\n")
    r = run(model_dir, d, "-d", tmp_path / "out", "--json")
    assert r.exit_code == 1, r.output  # one bad file
    s = json.loads(r.stdout)
    assert (s["done"], s["skipped"], s["failed"]) == (2, 0, 1)
    assert read_points(tmp_path / "out" / "sub" / "b.npz").attributes["pred_label"].shape == (2000,)
    again = json.loads(run(model_dir, d, "-d", tmp_path / "out", "--json").stdout)
    assert (again["done"], again["skipped"]) == (0, 2)
    r = run(model_dir, d, "-d", tmp_path / "out", "-F", "ply", "--json")  # batch in another format
    assert r.exit_code == 1 and json.loads(r.stdout)["done"] == 2
    assert read_points(tmp_path / "out" / "sub" / "b.ply").attributes["pred_label"].shape == (2000,)


def test_errors_exit_codes_and_no_partial_output(tmp_path, model_dir):
    write_points(tmp_path / "rgb.ply", PointCloud(scan().points, {"red": np.zeros(3000, np.uint8)}))
    r = run(model_dir, tmp_path / "rgb.ply", "-o", tmp_path / "out.ply")
    assert r.exit_code == 1 and "needs the point attribute 'intensity'" in r.output
    assert not (tmp_path / "out.ply").exists()
    r = run(tmp_path / "missing", tmp_path / "rgb.ply", "-o", tmp_path / "out.ply")
    assert r.exit_code == 1 and "no such model bundle" in r.output
    r = run(model_dir, tmp_path / "rgb.ply", "-o", tmp_path / "out.ply", "--quantize", "int2")
    assert r.exit_code == 2
    r = run(model_dir, tmp_path / "rgb.ply", "-o", tmp_path / "out.bin")
    assert r.exit_code == 1 and "formats that hold per-point labels" in r.output
    r = run(model_dir, tmp_path / "a.ply", tmp_path / "b.ply", "-o", tmp_path / "out.ply")
    assert r.exit_code == 2
    assert list(tmp_path.glob(".*tmp*")) == [] and not (tmp_path / "out.ply").exists()


def test_nonfinite_points_are_kept_with_the_ignore_label(tmp_path, model_dir):
    cloud = scan()
    pts = cloud.points.copy()
    pts[:5] = np.nan
    write_points(tmp_path / "in.pcd", PointCloud(pts, cloud.attributes))
    r = run(model_dir, tmp_path / "in.pcd", "-o", tmp_path / "out.npz")
    assert r.exit_code == 0 and "5 points with non-finite coordinates get the ignore label" in r.stdout
    labels = read_points(tmp_path / "out.npz").attributes["pred_label"]
    assert labels.shape == (3000,) and (labels[:5] == 0).all() and (labels[5:] > 0).all()


@pytest.mark.skipif(not (SHIPPED.is_dir() and KITTI.is_file()), reason="shipped model or KITTI scan absent")
def test_shipped_model_on_the_kitti_scan(tmp_path):
    r = subprocess.run(
        LATTICE + ["model-run", str(SHIPPED), str(KITTI), "-o", str(tmp_path / "out.ply"), "--json"],
        capture_output=True,
        timeout=300,
        cwd=tmp_path,  # outside the checkout: its source folders would shadow the installed package
    )
    assert r.returncode == 0, r.stderr.decode()
    out = read_points(tmp_path / "out.ply")
    assert len(out) == 123389 and out.attributes["pred_label"].shape == (123389,)
    assert json.loads(r.stdout)["domain_warnings"] == []  # the held-out scan is in the training domain
    truth = np.fromfile(KITTI.with_suffix(".label"), np.uint32) & 0xFFFF
    road = out.attributes["pred_label"][truth == 40]  # raw 40 = road -> learning id 9
    assert (road == 9).mean() > 0.5
