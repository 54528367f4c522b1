"""`lattice model-run` adds prediction fields and never destroys the input's own.

Regression tests for issue 16, through the installed ``lattice`` command on real files and
the shipped bundle: a labelled RGB PLY keeps ``label`` and its colours byte for byte,
``--label-field label`` needs ``--replace-field``, ``--colorize`` writes ``pred_*`` colours
(or ``red/green/blue`` for a cloud without colour), LAS ``classification`` changes only
with ``--to-classification`` (to the bundle's ASPRS codes), and ``lattice render`` draws
``pred_label`` by default.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import data_file, lattice

from lattice.io import PointCloud, read_points, write_points
from lattice.models import load_model
from lattice.pipeline.model_fields import asprs_classes, class_colours
from lattice.render import label_field, point_colors

REPO = Path(__file__).resolve().parents[1]
SHIPPED = REPO / "examples" / "models" / "minkunet14-semantickitti"
RGBA = ("red", "green", "blue", "alpha")


@pytest.fixture(scope="module")
def outputs():
    if not SHIPPED.is_dir():
        pytest.skip("shipped model absent")
    return load_model(SHIPPED).outputs


@pytest.fixture(scope="module")
def labelled(tmp_path_factory):
    """A CGAL-style labelled PLY with RGB(A): the finite points of mOSD learn0, label and colour kept."""
    cloud = read_points(data_file("osd_labeled/learn0.pcd")).drop_nan()
    path = tmp_path_factory.mktemp("labelled") / "learn0.ply"
    write_points(path, cloud)
    return path, read_points(path)


@pytest.fixture(scope="module")
def base_run(labelled, outputs, tmp_path_factory):
    """One default model-run of the labelled PLY: (output cloud, summary)."""
    out = tmp_path_factory.mktemp("run") / "out.ply"
    r = lattice("model-run", SHIPPED, labelled[0], "-o", out, "--json", cwd=out.parent)
    assert r.returncode == 0, r.stderr
    return read_points(out), json.loads(r.stdout)


def test_input_label_and_rgb_survive_byte_for_byte(labelled, base_run):
    src = labelled[1]
    out, summary = base_run
    for name in ("label", *RGBA):
        assert out.attributes[name].dtype == src.attributes[name].dtype, name
        np.testing.assert_array_equal(out.attributes[name], src.attributes[name], err_msg=name)
    assert list(out.attributes) == [*src.attributes, "pred_label"]
    assert out.attributes["pred_label"].dtype == np.int32
    assert set(np.unique(out.attributes["pred_label"])) <= set(range(1, 20))
    assert summary["label_field"] == "pred_label" and summary["written_fields"] == ["pred_label"]
    assert summary["replaced_field"] is None and summary["replaced_fields"] == []


def test_label_field_label_needs_replace_field(labelled, base_run, tmp_path):
    r = lattice(
        "model-run", SHIPPED, labelled[0], "-o", tmp_path / "x.ply", "--label-field", "label", cwd=tmp_path
    )
    assert r.returncode == 1 and not (tmp_path / "x.ply").exists()
    (line,) = r.stderr.strip().splitlines()  # one line, before any domain warning or prediction
    assert line.startswith("lattice: error: ") and "already has 'label'" in line and "--replace-field" in line
    r = lattice(
        "model-run", SHIPPED, labelled[0], "-o", tmp_path / "y.ply", "--label-field", "label",
        "--replace-field", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["replaced_field"] == "label" and s["written_fields"] == ["label"]
    out = read_points(tmp_path / "y.ply")
    assert "pred_label" not in out.attributes and out.attributes["label"].dtype == np.int32
    np.testing.assert_array_equal(out.attributes["label"], base_run[0].attributes["pred_label"])
    for name in RGBA:
        np.testing.assert_array_equal(out.attributes[name], labelled[1].attributes[name])


def test_colorize_adds_pred_colours_beside_the_input_rgb(labelled, base_run, outputs, tmp_path):
    r = lattice("model-run", SHIPPED, labelled[0], "-o", tmp_path / "c.ply", "--colorize", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = read_points(tmp_path / "c.ply")
    for name in RGBA:
        np.testing.assert_array_equal(out.attributes[name], labelled[1].attributes[name])
    want = class_colours(out.attributes["pred_label"], outputs)
    got = np.stack([out.attributes[f"pred_{c}"] for c in ("red", "green", "blue")], axis=1)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, want)
    assert want[0].tolist() == list(
        next(c.color for c in outputs.classes if c.id == out.attributes["pred_label"][0])
    )


def test_a_kitti_scan_without_colour_gets_red_green_blue(outputs, tmp_path):
    scan = data_file("semantickitti/seq00_000000.bin")
    r = lattice(
        "model-run", SHIPPED, scan, "-o", tmp_path / "k.ply", "--colorize", "-p", "--json", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    out = read_points(tmp_path / "k.ply")
    rgb = np.stack([out.attributes[c] for c in ("red", "green", "blue")], axis=1)
    assert rgb.dtype == np.uint8 and "pred_red" not in out.attributes
    np.testing.assert_array_equal(rgb, class_colours(out.attributes["pred_label"], outputs))
    probs = [f"pred_prob_{n.replace('-', '_')}" for n in outputs.names]
    assert s["written_fields"] == ["pred_label", *probs, "red", "green", "blue"]
    p = np.stack([out.attributes[n] for n in probs], axis=1)
    assert p.dtype == np.float32 and "pred_prob_other_vehicle" in out.attributes
    np.testing.assert_array_equal(
        np.array([c.id for c in outputs.classes])[p.argmax(axis=1)], out.attributes["pred_label"]
    )
    np.testing.assert_array_equal(out.attributes["intensity"], read_points(scan).attributes["intensity"])


def test_npz_output_has_class_names(labelled, outputs, tmp_path):
    r = lattice("model-run", SHIPPED, labelled[0], "-o", tmp_path / "o.npz", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["written_fields"] == ["pred_label", "pred_class"]
    with np.load(tmp_path / "o.npz", allow_pickle=False) as z:
        names = dict(zip([c.id for c in outputs.classes], outputs.names, strict=True))
        assert z["pred_class"].dtype.kind == "U"
        assert z["pred_class"].tolist() == [names[int(i)] for i in z["pred_label"]]
        np.testing.assert_array_equal(z["label"], labelled[1].attributes["label"])


def test_las_classification_only_with_to_classification(outputs, tmp_path):
    laspy = pytest.importorskip("laspy")
    src = data_file("aerial_lidar/autzen_trim.las")
    original = laspy.read(src)
    r = lattice("model-run", SHIPPED, src, "-o", tmp_path / "kept.las", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    kept = laspy.read(tmp_path / "kept.las")
    np.testing.assert_array_equal(np.asarray(kept.classification), np.asarray(original.classification))
    for c in ("red", "green", "blue"):
        np.testing.assert_array_equal(np.asarray(kept[c]), np.asarray(original[c]))
    r = lattice(
        "model-run", SHIPPED, src, "-o", tmp_path / "cls.las", "--to-classification", "--json", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["written_fields"] == ["pred_label", "classification"] and s["replaced_fields"] == [
        "classification"
    ]
    las = laspy.read(tmp_path / "cls.las")
    pred = np.asarray(las["pred_label"])
    table = outputs.asprs_map
    want = np.array([table[int(v)] for v in pred])
    np.testing.assert_array_equal(np.asarray(las.classification), want)
    np.testing.assert_array_equal(asprs_classes(pred, outputs), want)


def test_to_classification_is_a_usage_error_for_other_formats(labelled, tmp_path):
    r = lattice(
        "model-run", SHIPPED, labelled[0], "-o", tmp_path / "x.ply", "--to-classification", cwd=tmp_path
    )
    assert r.returncode == 2 and "LAS/LAZ classification" in r.stderr and not (tmp_path / "x.ply").exists()
    r = lattice("model-run", SHIPPED, labelled[0], "-d", tmp_path / "d", "--to-classification", cwd=tmp_path)
    assert r.returncode == 2


def test_render_draws_pred_label_by_default(base_run, outputs, tmp_path):
    out = base_run[0]
    assert label_field(out) == "pred_label"
    colours, legend = point_colors(out, "label")
    np.testing.assert_array_equal(colours, class_colours(out.attributes["pred_label"], outputs))
    assert {name.split(" (")[0] for name, _ in legend} <= set(outputs.names)
    src = tmp_path / "out.ply"
    write_points(src, out)
    size = ["--width", "300", "--height", "150"]
    r = lattice("render", src, "-o", tmp_path / "view.png", "--color", "label", *size, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "colour label (pred_label)" in r.stdout and (tmp_path / "view.png").stat().st_size > 0
    # by default the prediction is drawn whenever it holds more than one class (a street model
    # may give an indoor scan one class everywhere; a constant label falls back to rgb)
    two = out.attributes["pred_label"].copy()
    two[: len(two) // 2], two[len(two) // 2 :] = outputs.classes[0].id, outputs.classes[1].id
    write_points(
        src, PointCloud(out.points, {**out.attributes, "pred_label": two}, metadata=dict(out.metadata))
    )
    r = lattice("render", src, "-o", tmp_path / "view.png", *size, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "colour label (pred_label)" in r.stdout


def test_las_output_names_its_classes_for_render(labelled, outputs, tmp_path):
    """A LAS prediction carries the class table in lattice's comments VLR: read back as
    ``comments``, drawn with the model's class names, and rewritten once, not twice."""
    laspy = pytest.importorskip("laspy")
    out = tmp_path / "pred.las"
    r = lattice("model-run", SHIPPED, labelled[0], "-o", out, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    vlrs = [(v.user_id, v.record_id) for v in laspy.read(out).header.vlrs]
    assert vlrs.count(("lattice", 1)) == 1
    cloud = read_points(out)
    rows = [c for c in cloud.metadata["comments"] if c.startswith("class ")]
    table = (*outputs.classes, outputs.ignore)
    assert rows == [f"class {c.id} {c.name} {' '.join(map(str, c.color))}" for c in table]
    _, legend = point_colors(cloud, "label")
    assert legend and {name.split(" (")[0] for name, _ in legend} <= set(outputs.names)
    again = tmp_path / "again.las"
    write_points(again, cloud)
    assert [(v.user_id, v.record_id) for v in laspy.read(again).header.vlrs].count(("lattice", 1)) == 1
    assert read_points(again).metadata["comments"] == cloud.metadata["comments"]
    size = ["--width", "300", "--height", "150"]
    r = lattice("render", out, "-o", tmp_path / "v.png", "--color", "label", *size, cwd=tmp_path)
    assert r.returncode == 0 and "colour label (pred_label)" in r.stdout, r.stderr
    # a re-run over its own output replaces the table instead of stacking a second one
    rerun = tmp_path / "rerun.las"
    r = lattice("model-run", SHIPPED, out, "-o", rerun, "--replace-field", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert read_points(rerun).metadata["comments"] == cloud.metadata["comments"]


def test_ply_comments_survive_a_las_round_trip(tmp_path):
    pytest.importorskip("laspy")
    pts = np.arange(12, dtype=np.float64).reshape(4, 3)
    src = PointCloud(pts, {}, metadata={"comments": ["scanned by hand", "unit metre"]})
    write_points(tmp_path / "a.ply", src)
    write_points(tmp_path / "a.las", read_points(tmp_path / "a.ply"))
    write_points(tmp_path / "b.ply", read_points(tmp_path / "a.las"))
    assert read_points(tmp_path / "b.ply").metadata["comments"] == ["scanned by hand", "unit metre"]
    las = read_points(tmp_path / "a.las")
    write_points(tmp_path / "u.las", PointCloud(pts, {}, metadata={**las.metadata, "comments": ["Zürich"]}))
    assert read_points(tmp_path / "u.las").metadata["comments"] == ["Zürich"]  # a VLR holds UTF-8
    write_points(tmp_path / "u.ply", read_points(tmp_path / "u.las"))
    assert read_points(tmp_path / "u.ply").metadata["comments"] == ["Z?rich"]  # a PLY header ASCII
    write_points(tmp_path / "plain.las", PointCloud(pts, {}))
    assert "comments" not in read_points(tmp_path / "plain.las").metadata
