"""lattice.models: a feature some clouds lack (``missing`` fill, ``indicator`` channel) through
model.json, point_features, domain_stats and model-run; the Lovász-softmax against a NumPy
reference; the training script's checkpoint round trip."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from lattice.io import PointCloud
from lattice.models import (
    BundleError,
    ClassInfo,
    FeatureSpec,
    Outputs,
    Preprocessing,
    domain_stats,
    load_model,
    minkunet,
    point_features,
    predict_cloud,
    save_model,
)
from lattice.models.losses import lovasz_softmax, weighted_cross_entropy

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared/data/semantickitti"

PRE = Preprocessing(
    (0.5, 0.5, 0.5),
    (
        FeatureSpec("ones"),
        FeatureSpec("z"),
        FeatureSpec("intensity", 0.3, 0.2, ("remission",), missing=0.3),
        FeatureSpec("intensity", aliases=("remission",), indicator=True),
    ),
)
OUT = Outputs(tuple(ClassInfo(k, f"c{k}") for k in range(3)), ClassInfo(-1, "none"))


def _cloud(n=500, seed=0, rem=True):
    rng = np.random.default_rng(seed)
    pts = rng.normal(scale=4.0, size=(n, 3)).astype(np.float32)
    return PointCloud(pts, {"Remission": rng.uniform(0, 1, n).astype(np.float32)} if rem else {})


def test_missing_and_indicator_features():
    c = _cloud()
    f = point_features(c.points, c.attributes, PRE)
    np.testing.assert_allclose(f[:, 2], (c.attributes["Remission"] - 0.3) / 0.2, rtol=1e-5, atol=1e-5)
    assert (f[:, 3] == 1).all()
    f0 = point_features(c.points, {}, PRE)
    assert (f0[:, 2] == 0).all() and (f0[:, 3] == 0).all()
    np.testing.assert_array_equal(f0[:, :2], f[:, :2])
    # without ``missing`` a cloud lacking the attribute is still an error naming it
    strict = Preprocessing((1.0,) * 3, (FeatureSpec("intensity", aliases=("remission",)),))
    with pytest.raises(ValueError, match="needs the point attribute 'intensity' or 'remission'"):
        point_features(c.points, {}, strict)


def test_missing_and_indicator_json_round_trip_and_errors():
    doc = PRE.to_json()
    assert doc["features"][2]["missing"] == 0.3 and doc["features"][3]["indicator"] is True
    assert "missing" not in doc["features"][1] and "indicator" not in doc["features"][2]
    assert Preprocessing.from_json(json.loads(json.dumps(doc))) == PRE
    bad = {"voxel_size": 1, "features": [{"name": "intensity", "indicator": 1}]}
    with pytest.raises(BundleError, match=r"features\[0\]\.indicator must be true or false"):
        Preprocessing.from_json(bad)
    bad = {"voxel_size": 1, "features": [{"name": "intensity", "missing": "zero"}]}
    with pytest.raises(BundleError, match=r"features\[0\]\.missing must be a finite number"):
        Preprocessing.from_json(bad)
    with pytest.raises(BundleError, match="computed from the coordinates"):
        FeatureSpec("z", missing=0.0)


def test_bundle_runs_with_and_without_the_attribute(tmp_path):
    mx.random.seed(0)
    model = minkunet(14, 4, 3, width=4)
    model.eval()
    scans = [_cloud(seed=1), _cloud(seed=2, rem=False)]
    domain = domain_stats(scans, PRE)  # statistics of the attribute over the clouds that have it
    assert [v.name for v in domain.values] == ["x", "y", "z", "intensity"]
    np.testing.assert_allclose(
        domain.value("intensity").mean, scans[0].attributes["Remission"].mean(), rtol=1e-6
    )
    bundle = load_model(save_model(model, tmp_path / "m", preprocessing=PRE, outputs=OUT, domain=domain))
    assert bundle.preprocessing == PRE
    with_rem = predict_cloud(bundle, scans[0], probabilities=True)
    without = predict_cloud(bundle, PointCloud(scans[0].points), probabilities=True)
    assert with_rem.labels.shape == without.labels.shape == (500,)
    assert not np.allclose(with_rem.probabilities, without.probabilities)  # the inputs differ


def test_model_run_on_a_scan_without_remission(tmp_path):
    from typer.testing import CliRunner

    from lattice_cli.main import app

    mx.random.seed(0)
    model = minkunet(14, 4, 3, width=4)
    model.eval()
    bundle = save_model(model, tmp_path / "m", preprocessing=PRE, outputs=OUT)
    np.save(tmp_path / "xyz.npy", _cloud(rem=False).points)
    r = CliRunner().invoke(
        app, ["model-run", str(bundle), str(tmp_path / "xyz.npy"), "-o", str(tmp_path / "o.npz")]
    )
    assert r.exit_code == 0, r.output
    assert np.load(tmp_path / "o.npz")["pred_label"].shape == (500,)


def lovasz_reference(probs: np.ndarray, labels: np.ndarray) -> float:
    """Berman et al.'s ``lovasz_softmax_flat`` (classes='present'), in NumPy, one class at a time."""
    losses = []
    for c in range(probs.shape[1]):
        fg = (labels == c).astype(np.float64)
        if fg.sum() == 0:
            continue
        errors = np.abs(fg - probs[:, c])
        order = np.argsort(-errors, kind="stable")
        gt_sorted = fg[order]
        gts = gt_sorted.sum()
        intersection = gts - np.cumsum(gt_sorted)
        union = gts + np.cumsum(1 - gt_sorted)
        jaccard = 1.0 - intersection / union
        jaccard[1:] = jaccard[1:] - jaccard[:-1]
        losses.append(float(errors[order] @ jaccard))
    return float(np.mean(losses)) if losses else 0.0


@pytest.mark.parametrize("n, c, seed", [(1, 3, 0), (7, 2, 1), (200, 5, 2), (1000, 19, 3)])
def test_lovasz_softmax_matches_the_reference(n, c, seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(scale=2.0, size=(n, c))
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    labels = rng.integers(0, max(1, c - 1), n)  # the last class absent: it must not count
    got = float(lovasz_softmax(mx.array(probs.astype(np.float32)), mx.array(labels.astype(np.int32))))
    assert got == pytest.approx(lovasz_reference(probs, labels), rel=1e-5, abs=1e-6)


def test_lovasz_softmax_perfect_empty_and_gradient():
    labels = np.array([0, 1, 2, 1], np.int32)
    perfect = np.eye(3, dtype=np.float32)[labels]
    assert float(lovasz_softmax(mx.array(perfect), mx.array(labels))) == 0.0
    assert float(lovasz_softmax(mx.zeros((0, 3)), mx.zeros((0,), mx.int32))) == 0.0
    # the gradient is that of the piecewise-linear extension: central differences agree
    rng = np.random.default_rng(5)
    p = rng.uniform(0.05, 0.95, size=(30, 4))
    lab = rng.integers(0, 4, 30)
    g = np.asarray(mx.grad(lambda q: lovasz_softmax(q, mx.array(lab)))(mx.array(p, mx.float32)))
    eps = 1e-4
    for i, k in [(0, 0), (3, 2), (17, 1), (29, 3)]:
        d = np.zeros_like(p)
        d[i, k] = eps
        num = (lovasz_reference(p + d, lab) - lovasz_reference(p - d, lab)) / (2 * eps)
        assert g[i, k] == pytest.approx(num, abs=1e-3)
    with pytest.raises(ValueError, match=r"needs probs \(N, C\)"):
        lovasz_softmax(mx.zeros((4,)), mx.zeros((4,), mx.int32))


def test_weighted_cross_entropy_is_the_weighted_mean():
    rng = np.random.default_rng(0)
    logits, labels, w = rng.normal(size=(50, 4)), rng.integers(0, 4, 50), np.array([1.0, 2.0, 0.5, 3.0])
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    want = -(w[labels] * logp[np.arange(50), labels]).sum() / w[labels].sum()
    got = weighted_cross_entropy(mx.array(logits, mx.float32), mx.array(labels), mx.array(w, mx.float32))
    assert float(got) == pytest.approx(want, rel=1e-5)


def _train_script():
    spec = importlib.util.spec_from_file_location(
        "train_semantickitti", ROOT / "examples/train_semantickitti.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules["train_semantickitti"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.skipif(not DATA.exists(), reason="needs ../shared/data/semantickitti")
def test_training_resumes_exactly(tmp_path, monkeypatch):
    """Two steps, stop, resume for two more: the same weights and optimizer state, bit for bit,
    as four steps in one call (tiny network, coarse voxels, three scans)."""
    train = _train_script()
    monkeypatch.setattr(train, "TRAIN", ["demo_000750", "sqsv3_seq00_000001", "kitti_01_000002"])
    common = ["--data", str(DATA), "--steps", "4", "--width", "4", "--voxel-size", "0.4", "--batch", "1"]
    common += ["--warmup", "2", "--bn-passes", "1", "--val-scan", "kitti_01_000002"]
    train.main([*common, "--output", str(tmp_path / "a")])
    train.main([*common, "--output", str(tmp_path / "b"), "--stop-at", "2"])
    state = json.loads((tmp_path / "b/checkpoint/state.json").read_text())
    assert state["step"] == 2 and state["total"] == 4 and not (tmp_path / "b/final").exists()
    train.main([*common, "--output", str(tmp_path / "b"), "--resume", str(tmp_path / "b")])
    for f in ("weights.safetensors", "optimizer.safetensors"):
        a, b = mx.load(str(tmp_path / "a/checkpoint" / f)), mx.load(str(tmp_path / "b/checkpoint" / f))
        assert a.keys() == b.keys()
        for k in a:
            assert mx.array_equal(a[k], b[k]).item(), (f, k)
    sa = json.loads((tmp_path / "a/final/scores.json").read_text())
    assert sa == json.loads((tmp_path / "b/final/scores.json").read_text())
    assert sa["scan"] == "kitti_01_000002"  # a --val-scan run never scores the held-out scan
    shipped = load_model(tmp_path / "b/final/minkunet14-semantickitti")
    assert shipped.domain is not None and shipped.metadata["training"]["held_out"] == "kitti_01_000002"
    assert "kitti_01_000002" not in shipped.metadata["training"]["train_scans"]
    # a resume with other training arguments is refused
    with pytest.raises(SystemExit, match="arguments differ"):
        train.main([*common, "--output", str(tmp_path / "b"), "--resume", str(tmp_path / "b"), "--mix", "0"])


def test_height_above_min_against_brute_force():
    from lattice.models.neighbourhood import height_above_min

    rng = np.random.default_rng(3)
    pts = np.column_stack([rng.uniform(-20, 30, 400), rng.uniform(5, 40, 400), rng.normal(100, 5, 400)])
    got = height_above_min(pts, 7.0)
    cell = np.floor(pts[:, :2] / 7.0)
    near = (np.abs(cell[:, None, :] - cell[None, :, :]) <= 1).all(axis=2)  # 3 x 3 block of cells
    want = pts[:, 2] - np.where(near, pts[None, :, 2], np.inf).min(axis=1)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-9)
    assert height_above_min(np.zeros((0, 3)), 1.0).shape == (0,)


def test_planarity_against_brute_force():
    from lattice.models.neighbourhood import planarity

    rng = np.random.default_rng(4)
    plane = np.column_stack([rng.uniform(0, 4, 300), rng.uniform(0, 4, 300), rng.normal(0.5, 0.01, 300)])
    blob = rng.uniform(10, 14, size=(300, 3))
    pts = np.concatenate([plane, blob, [[50.5, 50.5, 50.5], [50.6, 50.5, 50.5]]])
    got = planarity(pts, 4.0)
    keys = np.floor(pts / 4.0)
    for i in (0, 150, 300, 450, 600):
        same = (keys == keys[i]).all(axis=1)
        if same.sum() < 3:
            assert got[i] == 0.0
            continue
        lam = np.sort(np.linalg.eigvalsh(np.cov(pts[same].T, bias=True)))[::-1]
        assert got[i] == pytest.approx((lam[1] - lam[2]) / lam[0], abs=1e-9)
    assert got[:300].min() > 0.8 and got[300:600].max() < 0.5  # a plane and a volume


def test_neighbourhood_features_in_a_bundle():
    pre = Preprocessing(
        1.0, (FeatureSpec("height_above_min", 2.0, 3.0, scale=10.0), FeatureSpec("planarity", scale=2))
    )
    assert Preprocessing.from_json(json.loads(json.dumps(pre.to_json()))) == pre
    assert pre.to_json()["features"][0]["scale"] == 10.0
    pts = np.random.default_rng(0).normal(scale=5, size=(200, 3))
    from lattice.models.neighbourhood import height_above_min

    f = point_features(pts, {}, pre)
    np.testing.assert_allclose(f[:, 0], (height_above_min(pts, 10.0) - 2.0) / 3.0, rtol=1e-5, atol=1e-6)
    with pytest.raises(BundleError, match="'scale'"):
        FeatureSpec("planarity")
    with pytest.raises(BundleError, match="'scale'"):
        FeatureSpec("z", scale=1.0)
    with pytest.raises(BundleError, match=r"features\[0\].*scale must be a positive"):
        Preprocessing.from_json({"voxel_size": 1, "features": [{"name": "planarity", "scale": -1}]})
