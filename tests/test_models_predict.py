"""lattice.models.predict: preprocessing as model.json says, labels mapped back to every point
(against a NumPy reference of the voxel grid), non-finite points, probabilities, interpolation."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

from lattice import ops
from lattice.io import PointCloud
from lattice.models import (
    ClassInfo,
    FeatureSpec,
    Outputs,
    Preprocessing,
    load_model,
    minkunet,
    point_features,
    predict_cloud,
    predict_points,
    save_model,
    sparse_resnet,
)

PRE = Preprocessing(
    (0.3, 0.3, 0.5),
    (
        FeatureSpec("ones"),
        FeatureSpec("z", -1.0, 2.0),
        FeatureSpec("z_local"),
        FeatureSpec("intensity", 0.5, 0.25, aliases=("remission",)),
    ),
    origin=(0.1, -0.2, 0.05),
)
OUT = Outputs(
    tuple(ClassInfo(10 + k, f"c{k}", (30 * k, 0, 0)) for k in range(4)), ClassInfo(255, "none", (0, 0, 0))
)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    mx.random.seed(4)
    model = minkunet(14, 4, 4, width=4)
    model.eval()
    return load_model(save_model(model, tmp_path_factory.mktemp("b") / "m", preprocessing=PRE, outputs=OUT))


def cloud(n=4000, seed=0, attr="intensity") -> PointCloud:
    rng = np.random.default_rng(seed)
    pts = rng.normal(scale=3.0, size=(n, 3)).astype(np.float32)
    return PointCloud(pts, {attr: rng.uniform(0, 1, n).astype(np.float32)})


def reference_labels(bundle, pts: np.ndarray, intensity: np.ndarray) -> np.ndarray:
    """NumPy: voxel keys of every point, per-voxel mean features, network, label of the point's voxel."""
    p = pts.astype(np.float64)
    u = (p - np.array(PRE.origin)) / np.array(PRE.voxel_size)
    keys = np.floor(u).astype(np.int64)
    feats = np.stack(
        [np.ones(len(p)), (p[:, 2] + 1.0) / 2.0, u[:, 2] - np.floor(u[:, 2]) - 0.5, (intensity - 0.5) / 0.25],
        axis=1,
    )
    uniq, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first)  # voxels in first-occurrence order, like lattice
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    row = rank[inverse.reshape(-1)]
    mean = np.zeros((len(uniq), 4))
    np.add.at(mean, row, feats)
    mean /= np.bincount(row)[:, None]
    coords = np.concatenate([np.zeros((len(uniq), 1), np.int64), uniq[order]], axis=1).astype(np.int32)
    x = ops.sparse_from_coordinates(mx.array(coords), mx.array(mean.astype(np.float32)))
    logits = np.asarray(bundle.model(x).feats)
    return np.array([c.id for c in OUT.classes])[logits.argmax(axis=1)][row]


def test_point_features_follow_the_spec():
    c = cloud(50)
    f = point_features(c.points, c.attributes, PRE)
    z = c.points[:, 2].astype(np.float64)
    uz = (z - 0.05) / 0.5
    np.testing.assert_allclose(f[:, 0], 1)
    np.testing.assert_allclose(f[:, 1], (z + 1) / 2, rtol=1e-6)
    np.testing.assert_allclose(f[:, 2], uz - np.floor(uz) - 0.5, atol=1e-6)
    np.testing.assert_allclose(f[:, 3], (c.attributes["intensity"] - 0.5) / 0.25, rtol=1e-6)


def test_labels_map_back_to_every_point(bundle):
    c = cloud()
    pred = predict_cloud(bundle, c)
    assert pred.labels.shape == (len(c),) and pred.labels.dtype == np.int32
    np.testing.assert_array_equal(pred.labels, reference_labels(bundle, c.points, c.attributes["intensity"]))
    np.testing.assert_array_equal(pred.labels, pred.voxel_labels[pred.point_voxel])
    assert set(pred.timings) == {"voxelize", "network", "map_back"}


def test_alias_attribute_and_missing_attribute(bundle):
    a, b = cloud(attr="intensity"), cloud(attr="Remission")
    np.testing.assert_array_equal(predict_cloud(bundle, a).labels, predict_cloud(bundle, b).labels)
    with pytest.raises(ValueError, match=r"needs the point attribute 'intensity' or 'remission'.*\['rgb'\]"):
        predict_cloud(bundle, cloud(attr="rgb"))


def test_nonfinite_points_get_the_ignore_label(bundle):
    c = cloud(1000)
    pts = c.points.copy()
    pts[[3, 500]] = np.nan
    pts[7, 1] = np.inf
    pred = predict_points(bundle, pts, c.attributes, probabilities=True)
    bad = [3, 7, 500]
    assert pred.nonfinite == 3 and pred.labels.shape == (1000,)
    assert (pred.labels[bad] == 255).all() and (pred.point_voxel[bad] == -1).all()
    assert np.isnan(pred.probabilities[bad]).all()
    good = np.setdiff1d(np.arange(1000), bad)
    ref = reference_labels(bundle, pts[good], c.attributes["intensity"][good])
    np.testing.assert_array_equal(pred.labels[good], ref)


def test_probabilities_and_linear_interpolation(bundle):
    c = cloud()
    pred = predict_cloud(bundle, c, probabilities=True)
    p = pred.probabilities
    assert p.shape == (len(c), 4) and p.dtype == np.float32
    np.testing.assert_allclose(p.sum(axis=1), 1, rtol=1e-5)
    ids = np.array([k.id for k in OUT.classes])
    np.testing.assert_array_equal(ids[p.argmax(axis=1)], pred.labels)
    lin = predict_cloud(bundle, c, probabilities=True, interpolation="linear")
    np.testing.assert_allclose(lin.probabilities.sum(axis=1), 1, rtol=1e-5)
    assert (lin.labels == pred.labels).mean() > 0.5  # smooth across voxel borders, same field
    with pytest.raises(ValueError, match="interpolation must be one of"):
        predict_cloud(bundle, c, interpolation="cubic")


def test_empty_and_single_point_clouds(bundle):
    one = predict_cloud(bundle, cloud(1))
    assert one.labels.shape == (1,) and one.num_voxels == 1
    empty = predict_points(
        bundle, np.zeros((0, 3), np.float32), {"intensity": np.zeros(0)}, probabilities=True
    )
    assert empty.labels.shape == (0,) and empty.probabilities.shape == (0, 4)


def test_a_classifier_labels_every_point_with_the_cloud_label(tmp_path):
    mx.random.seed(0)
    model = sparse_resnet(14, 4, 4, width=4)
    model.eval()
    b = load_model(save_model(model, tmp_path / "r", preprocessing=PRE, outputs=OUT))
    pred = predict_cloud(b, cloud(2000))
    assert len(set(pred.labels.tolist())) == 1


def test_quantized_predictions_mostly_agree(tmp_path, bundle):
    q = load_model(bundle.path, quantize_bits=8)
    c = cloud()
    assert (predict_cloud(q, c).labels == predict_cloud(bundle, c).labels).mean() > 0.9


def test_device_errors(bundle):
    with pytest.raises(ValueError, match="device must be one of"):
        predict_cloud(bundle, cloud(10), device="tpu")
    if not mx.is_available(mx.gpu):
        with pytest.raises(ValueError, match="not available"):
            predict_cloud(bundle, cloud(10), device="gpu")
