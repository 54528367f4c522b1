"""Run a loaded model bundle on a point cloud and map its outputs back to every point.

>>> bundle = load_model("examples/models/minkunet14-semantickitti")
>>> pred = predict_cloud(bundle, read_points("scan.bin"), probabilities=True)
>>> pred.labels            # int32 (N,): a class id per input point, in input order
>>> pred.probabilities     # float32 (N, K) softmax scores, classes in bundle.outputs order

Steps, exactly as ``model.json``'s ``preprocessing`` says:

1. per-point input features (:func:`point_features`): each ``FeatureSpec`` gives one
   channel, ``(value - mean) / std``;
2. ``lattice.ops.voxelize`` at the bundle's voxel size and origin, features averaged per
   voxel, with the point -> voxel row index;
3. the network, batch of one, in eval mode;
4. back to the points: ``nearest`` takes each point's own voxel (the index of step 2);
   ``linear`` samples the voxel logits trilinearly at the point (``lattice.ops.devoxelize``).

Points with a non-finite coordinate are not fed to the network; they get the bundle's
``ignore`` class (and NaN probabilities), so the output still has one row per point.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from lattice.io import PointCloud
from lattice.models.bundle import ModelBundle
from lattice.models.neighbourhood import NEIGHBOURHOOD_FEATURES
from lattice.models.spec import INTERPOLATIONS, FeatureSpec, Preprocessing
from lattice.ops import devoxelize, voxelize

DEVICES = ("cpu", "gpu")
_LOCAL = {"x_local": 0, "y_local": 1, "z_local": 2}
_AXES = {"x": 0, "y": 1, "z": 2}


@dataclass(frozen=True, eq=False)
class Prediction:
    """Per-point results of :func:`predict_points`.

    ``labels``: int32 ``(N,)`` class ids (``outputs.classes[k].id``), the ignore id where
    a point has a non-finite coordinate. ``probabilities``: float32 ``(N, K)`` or None.
    ``voxel_labels``: int32 ``(M,)`` class ids per voxel; ``point_voxel``: int32 ``(N,)``
    each point's voxel row (-1 for non-finite points). ``timings``: seconds per stage.
    """

    labels: np.ndarray
    probabilities: np.ndarray | None
    voxel_labels: np.ndarray
    point_voxel: np.ndarray
    nonfinite: int
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def num_voxels(self) -> int:
        """Number of occupied voxels the network saw."""
        return int(self.voxel_labels.shape[0])


def attribute_key(spec: FeatureSpec, attributes: Mapping[str, np.ndarray]) -> str | None:
    """The key of ``attributes`` that feeds ``spec`` (its name or an alias, any case), or None."""
    lower = {k.lower(): k for k in attributes}
    for name in (spec.name, *spec.aliases):
        key = name if name in attributes else lower.get(name.lower())
        if key is not None:
            return key
    return None


def feature_attribute(spec: FeatureSpec, attributes: Mapping[str, np.ndarray]) -> np.ndarray:
    """The float64 values of the point attribute that feeds ``spec`` (its name or an alias)."""
    key = attribute_key(spec, attributes)
    if key is not None:
        a = np.asarray(attributes[key])
        if a.ndim != 1 or a.dtype.kind not in "biuf":
            raise ValueError(
                f"the model's input feature {key!r} must be a numeric (N,) attribute, got {a.dtype} {a.shape}"
            )
        return a.astype(np.float64)
    wanted = " or ".join(repr(n) for n in (spec.name, *spec.aliases))
    raise ValueError(
        f"the model needs the point attribute {wanted}; this cloud has {sorted(attributes) or 'no attributes'}"
    )


def point_features(
    points: np.ndarray, attributes: Mapping[str, np.ndarray], pre: Preprocessing
) -> np.ndarray:
    """float32 ``(N, C)``: one normalised column per ``pre.features`` entry for finite ``points``."""
    pts = np.asarray(points, dtype=np.float64)
    cols = []
    local = None
    for spec in pre.features:
        if spec.name == "ones":
            v = np.ones(len(pts))
        elif spec.name in _AXES:
            v = pts[:, _AXES[spec.name]]
        elif spec.name in _LOCAL:
            if local is None:
                u = (pts - np.asarray(pre.origin)) / np.asarray(pre.voxel_size)
                local = u - np.floor(u) - 0.5
            v = local[:, _LOCAL[spec.name]]
        elif spec.name in NEIGHBOURHOOD_FEATURES:
            v = NEIGHBOURHOOD_FEATURES[spec.name](pts, spec.scale)
        elif spec.indicator:
            v = np.full(len(pts), 0.0 if attribute_key(spec, attributes) is None else 1.0)
        elif spec.missing is not None and attribute_key(spec, attributes) is None:
            v = np.full(len(pts), spec.missing)
        else:
            v = feature_attribute(spec, attributes)
        cols.append((v - spec.mean) / spec.std)
    return np.stack(cols, axis=1).astype(np.float32) if cols else np.zeros((len(pts), 0), np.float32)


@contextmanager
def _on(device: str | None) -> Iterator[None]:
    if device is None:
        yield
        return
    if device not in DEVICES:
        raise ValueError(f"device must be one of {list(DEVICES)}, got {device!r}")
    dev = mx.gpu if device == "gpu" else mx.cpu
    if not mx.is_available(dev):
        raise ValueError(f"device {device!r} is not available to MLX on this machine")
    with mx.stream(dev):
        yield


def _softmax(logits: mx.array) -> mx.array:
    return mx.softmax(logits.astype(mx.float32), axis=-1)


def predict_points(
    bundle: ModelBundle,
    points: np.ndarray,
    attributes: Mapping[str, np.ndarray] | None = None,
    *,
    probabilities: bool = False,
    interpolation: str | None = None,
    device: str | None = None,
) -> Prediction:
    """Labels (and optionally class probabilities) for every one of ``points`` (N, 3).

    ``interpolation``: ``nearest`` or ``linear`` (default: the bundle's ``outputs``).
    ``device``: ``cpu`` or ``gpu`` for MLX's own ops (lattice's primitives run on the CPU).
    """
    interp = interpolation or bundle.outputs.interpolation
    if interp not in INTERPOLATIONS:
        raise ValueError(f"interpolation must be one of {list(INTERPOLATIONS)}, got {interp!r}")
    pts = np.asarray(points)
    if pts.ndim != 2 or pts.shape[1] != 3:
        raise ValueError(f"points must have shape (N, 3), got {pts.shape}")
    attributes = attributes or {}
    finite = np.isfinite(pts).all(axis=1)
    keep = pts if finite.all() else pts[finite]
    attrs = attributes if finite.all() else {k: np.asarray(v)[finite] for k, v in attributes.items()}
    pre, out = bundle.preprocessing, bundle.outputs
    ids = np.array([c.id for c in out.classes], np.int32)
    timings: dict[str, float] = {}
    with _on(device):
        t0 = time.perf_counter()
        feats = point_features(keep, attrs, pre)
        x, index = voxelize(keep, mx.array(feats), pre.voxel_size, origin=pre.origin, return_index=True)
        mx.eval(x.feats, index)
        timings["voxelize"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        logits = _network(bundle, x)
        mx.eval(logits)
        timings["network"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        labels, probs, voxel_labels, point_voxel = _map_back(
            bundle, keep, x, logits, index, interp, probabilities
        )
        timings["map_back"] = time.perf_counter() - t0
    n = len(pts)
    full_labels = np.full(n, out.ignore.id, np.int32)
    full_labels[finite] = ids[labels]
    full_voxel = np.full(n, -1, np.int32)
    full_voxel[finite] = point_voxel
    full_probs = None
    if probs is not None:
        full_probs = np.full((n, len(ids)), np.nan, np.float32)
        full_probs[finite] = probs
    return Prediction(full_labels, full_probs, ids[voxel_labels], full_voxel, int(n - finite.sum()), timings)


def _network(bundle: ModelBundle, x) -> mx.array:
    """Voxel logits ``(M, K)``; a classifier's one row of logits is repeated for every voxel."""
    if x.active_count == 0:
        return mx.zeros((0, bundle.config.num_classes), mx.float32)
    y = bundle.model(x)
    if bundle.task == "classification":
        return mx.broadcast_to(y[:1], (x.active_count, y.shape[-1]))
    return y.feats[: x.active_count]


def _map_back(bundle, points, x, logits, index, interp, probabilities):
    point_voxel = np.asarray(index).astype(np.int32)
    voxel_labels = (
        np.asarray(mx.argmax(logits, axis=1)).astype(np.int32) if logits.shape[0] else np.zeros(0, np.int32)
    )
    if interp == "nearest" or len(points) == 0:
        labels = voxel_labels[point_voxel]
        probs = np.asarray(_softmax(logits))[point_voxel] if probabilities else None
        return labels, probs, voxel_labels, point_voxel
    pre = bundle.preprocessing
    sampled = devoxelize(points, x.replace(feats=logits), pre.voxel_size, origin=pre.origin)
    labels = np.asarray(mx.argmax(sampled, axis=1)).astype(np.int32)
    probs = np.asarray(_softmax(sampled)) if probabilities else None
    return labels, probs, voxel_labels, point_voxel


def predict_cloud(bundle: ModelBundle, cloud: PointCloud, **kwargs) -> Prediction:
    """:func:`predict_points` on a :class:`~lattice.io.PointCloud` (its attributes feed the features)."""
    return predict_points(bundle, cloud.points, cloud.attributes, **kwargs)


__all__ = [
    "DEVICES",
    "Prediction",
    "attribute_key",
    "feature_attribute",
    "point_features",
    "predict_cloud",
    "predict_points",
]
