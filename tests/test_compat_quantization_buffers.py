"""The documented fixed-capacity ``SparseQuantization`` of ``mlx_lattice`` (issue 17):
``sparse_quantize`` returns buffers of one row per point, ``voxelize_features`` and
``voxelize_with_quantization`` take them (and a template tensor on the padded buffer),
against a slow NumPy oracle."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import lattice
from mlx_lattice import SparseTensor
from mlx_lattice.core.coords.quantization import SparseQuantization, voxelize_features
from mlx_lattice.ops import sparse_quantize, voxelize, voxelize_with_quantization


def _cloud(kind: str, seed: int = 0):
    """(points (N, 3) float32, batch (N,) int32 or None, voxel_size, origin)."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        pts = rng.uniform(-5, 5, size=(120, 3))
        return pts.astype(np.float32), None, 1.0, 0.0
    if kind == "clustered":  # many points per voxel
        centres = rng.uniform(-20, 20, size=(6, 3))
        pts = centres[rng.integers(0, 6, 150)] + rng.normal(scale=0.7, size=(150, 3))
        return (
            pts.astype(np.float32),
            rng.integers(0, 3, 150).astype(np.int32),
            (2.0, 1.5, 1.0),
            (0.3, -0.2, 0.1),
        )
    if kind == "one voxel":
        pts = rng.uniform(0.01, 0.99, size=(30, 3))
        return pts.astype(np.float32), None, 1.0, 0.0
    if kind == "batch with an empty member":  # member 1 has no point
        pts = rng.uniform(-3, 3, size=(80, 3))
        batch = np.where(np.arange(80) % 2 == 0, 0, 2).astype(np.int32)
        return pts.astype(np.float32), batch, 0.5, 0.0
    if kind == "empty":
        return np.zeros((0, 3), np.float32), None, 1.0, 0.0
    raise AssertionError(kind)


KINDS = ["uniform", "clustered", "one voxel", "batch with an empty member", "empty"]


def _oracle(pts, batch, voxel_size, origin, live):
    """Padded coords, voxel count, inverse rows, padded counts: a Python loop over the points."""
    n = len(pts)
    vs = np.broadcast_to(np.asarray(voxel_size, np.float32), (3,))
    org = np.broadcast_to(np.asarray(origin, np.float32), (3,))
    b = np.zeros(n, np.int32) if batch is None else batch
    rows: dict[tuple, int] = {}
    coords = np.zeros((n, 4), np.int32)
    inverse = np.full(n, -1, np.int32)
    counts = np.zeros(n, np.int32)
    for i in range(live):
        v = np.floor((pts[i] - org) / vs).astype(np.int64)
        key = (int(b[i]), int(v[0]), int(v[1]), int(v[2]))
        if key not in rows:
            rows[key] = len(rows)
            coords[rows[key]] = key
        inverse[i] = rows[key]
        counts[rows[key]] += 1
    return coords, len(rows), inverse, counts


def _voxel_oracle(feats, inverse, counts, reduction):
    """Sums of the live points per voxel; ``mean`` divides by the quantization's ``counts``
    (every quantized point, as lattice documents), rows past the voxels 0."""
    out = np.zeros((len(feats), feats.shape[1]), np.float64)
    for i, r in enumerate(inverse):
        if r >= 0:
            out[r] += feats[i]
    if reduction == "mean":
        out /= np.maximum(counts, 1)[:, None]
    return out


def _quantize(kind, live=None):
    pts, batch, vs, org = _cloud(kind)
    q = sparse_quantize(
        mx.array(pts),
        vs,
        batch_indices=None if batch is None else mx.array(batch),
        origin=org,
        active_rows=None if live is None else mx.array([live], mx.int32),
    )
    return pts, batch, vs, org, q


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("fraction", [None, 0.6, 0.0])
def test_sparse_quantize_is_the_documented_buffer(kind, fraction):
    n = len(_cloud(kind)[0])
    live = None if fraction is None else int(n * fraction)
    pts, batch, vs, org, q = _quantize(kind, live)
    coords, m, inverse, counts = _oracle(pts, batch, vs, org, n if live is None else live)
    assert isinstance(q, SparseQuantization) and isinstance(q, lattice.core.SparseQuantization)
    assert q.capacity == n and len(q) == m
    assert q.active_count is q.active_rows
    assert q.active_rows.dtype == mx.int32 and q.active_rows.tolist() == [m]
    for name, want in (("coords", coords), ("inverse_rows", inverse), ("counts", counts)):
        got = getattr(q, name)
        assert got.dtype == mx.int32 and got.shape == want.shape, name
        np.testing.assert_array_equal(np.asarray(got), want, err_msg=name)
    exact = q.exact  # lattice's record of the live rows
    assert type(exact) is lattice.core.SparseQuantization and exact.active_count == m
    np.testing.assert_array_equal(np.asarray(exact.coords), coords[:m])
    np.testing.assert_array_equal(np.asarray(exact.counts), counts[:m])
    np.testing.assert_array_equal(np.asarray(exact.inverse_rows), inverse[inverse >= 0])


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reduction", ["sum", "mean"])
@pytest.mark.parametrize("feature_rows", [None, 0.5])
def test_voxelize_features_and_with_quantization_on_the_buffer(kind, reduction, feature_rows):
    pts, batch, vs, org, q = _quantize(kind)
    n = len(pts)
    feats = np.random.default_rng(7).normal(size=(n, 3)).astype(np.float32)
    live = None if feature_rows is None else int(n * feature_rows)
    active = None if live is None else mx.array([live], mx.int32)
    _, m, inverse, counts = _oracle(pts, batch, vs, org, n)
    used = inverse.copy()
    if live is not None:
        used[live:] = -1
    want = _voxel_oracle(feats, used, counts, reduction)

    got = voxelize_features(mx.array(feats), q, active_rows=active, reduction=reduction)
    assert got.shape == (n, 3)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)

    x = voxelize_with_quantization(q, mx.array(feats), active_rows=active, reduction=reduction, stride=2)
    assert x.coords is q.coords and x.capacity == n and x.active_count == m and x.stride == (2, 2, 2)
    np.testing.assert_allclose(np.asarray(x.feats), want, rtol=1e-5, atol=1e-5)
    if live is None:  # the same voxels and features as voxelize in one step
        direct = voxelize(
            mx.array(pts),
            mx.array(feats),
            vs,
            batch_indices=None if batch is None else mx.array(batch),
            origin=org,
            reduction=reduction,
        )
        np.testing.assert_array_equal(np.asarray(direct.coords), np.asarray(x.coords[:m]))
        np.testing.assert_allclose(np.asarray(direct.feats), want[:m], rtol=1e-5, atol=1e-5)

    template = SparseTensor(q.coords, mx.zeros((n, 3)), active_rows=q.active_rows)
    y = voxelize_with_quantization(
        q, mx.array(feats), active_rows=active, reduction=reduction, template=template
    )
    assert y.same_coords(template) and y.coords is template.coords
    np.testing.assert_allclose(np.asarray(y.feats), want, rtol=1e-5, atol=1e-5)


def test_the_buffer_form_checks_its_inputs():
    pts, _, _, _, q = _quantize("clustered")
    n = len(pts)
    with pytest.raises(
        ValueError, match=r"^\[voxelize_features\] feats and quantization metadata must share rows"
    ):
        voxelize_features(mx.zeros((n - 1, 2)), q)
    with pytest.raises(ValueError, match="reduction must be 'sum' or 'mean'"):
        voxelize_features(mx.zeros((n, 2)), q, reduction="max")
    copy = SparseTensor(mx.array(np.asarray(q.coords)), mx.zeros((n, 1)), active_rows=q.active_rows)
    with pytest.raises(ValueError, match="template must use the quantization coordinate array"):
        voxelize_with_quantization(q, mx.zeros((n, 1)), template=copy)
    fewer = SparseTensor(q.coords, mx.zeros((n, 1)), active_rows=len(q) - 1)
    with pytest.raises(ValueError, match="template must use the quantization active_rows"):
        voxelize_with_quantization(q, mx.zeros((n, 1)), template=fewer)


def test_a_record_built_by_hand():
    coords = mx.array([[0, 1, 0, 0], [1, 0, 0, 2], [0, 0, 0, 0], [0, 0, 0, 0]], mx.int32)
    inverse = mx.array([0, 1, 0, -1], mx.int32)
    counts = mx.array([2, 1, 0, 0], mx.int32)
    q = SparseQuantization(coords, mx.array([2], mx.int32), inverse, counts)
    assert q.capacity == 4 and len(q) == 2 and q.active_count.tolist() == [2]
    assert q.exact.inverse_rows.tolist() == [0, 1, 0] and q.exact.coords.shape == (2, 4)
    got = voxelize_features(mx.array([[1.0], [5.0], [3.0], [100.0]]), q, reduction="mean")
    assert got.tolist() == [[2.0], [5.0], [0.0], [0.0]]
    with pytest.raises(ValueError, match=r"inverse_rows must have shape \(4,\) and int32 dtype"):
        SparseQuantization(coords, mx.array([2], mx.int32), inverse[:3], counts)
    with pytest.raises(ValueError, match=r"counts must have shape \(4,\) and int32 dtype"):
        SparseQuantization(coords, mx.array([2], mx.int32), inverse, counts.astype(mx.int64))


def test_lattice_s_own_record_still_passes_through():
    pts, _, vs, org, _ = _quantize("uniform")
    q = lattice.core.sparse_quantize(mx.array(pts), vs, origin=org)
    feats = mx.array(np.random.default_rng(1).normal(size=(len(pts), 2)).astype(np.float32))
    x = voxelize_with_quantization(q, feats)
    want = lattice.ops.voxelize_with_quantization(q, feats)
    assert x.capacity == len(q) and x.coords is q.coords
    # the CPU sums in a fixed order; the GPU's float32 atomics differ by an ulp run to run
    same = (
        np.testing.assert_array_equal
        if mx.default_device() == mx.cpu
        else lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)
    )
    same(np.asarray(x.feats), np.asarray(want.feats))
    same(np.asarray(voxelize_features(feats, q)), np.asarray(want.feats))
