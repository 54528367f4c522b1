"""voxelize / devoxelize against NumPy references (floor + unique, trilinear formula)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import lattice
from lattice.ops import build_point_voxel_map, devoxelize, voxelize, voxelize_features


def _ref_voxelize(points, feats, voxel, reduction):
    v = np.floor(points.astype(np.float64) / voxel).astype(np.int64)
    keys, first, inverse, counts = np.unique(
        v, axis=0, return_index=True, return_inverse=True, return_counts=True
    )
    inverse = inverse.reshape(-1)
    out = {}
    for u in range(len(keys)):
        rows = np.nonzero(inverse == u)[0]
        f = feats[rows]
        val = {
            "mean": f.mean(0),
            "sum": f.sum(0),
            "max": f.max(0),
            "first": f[rows.min() - rows.min()],
            "count": np.array([len(rows)], np.float32),
        }[reduction]
        out[tuple(keys[u])] = val
    return out


@pytest.mark.parametrize("reduction", ["mean", "sum", "max", "first", "count"])
def test_voxelize_matches_reference(reduction):
    rng = np.random.default_rng(0)
    pts = rng.normal(size=(600, 3)).astype(np.float32) * 2
    feats = rng.normal(size=(600, 3)).astype(np.float32)
    x, inv = voxelize(
        pts, None if reduction == "count" else feats, 0.5, reduction=reduction, return_index=True
    )
    ref = _ref_voxelize(pts, feats, 0.5, reduction)
    coords = np.array(x.coords)
    assert x.active_count == len(ref)
    got = {tuple(c[1:]): np.array(f) for c, f in zip(coords, np.array(x.feats), strict=True)}
    assert set(got) == set(ref)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-5)
    # the point -> voxel index maps every point to the voxel that contains it
    np.testing.assert_array_equal(coords[np.array(inv), 1:], np.floor(pts.astype(np.float64) / 0.5))


@pytest.mark.parametrize("kind", ["random", "dense", "single"])
def test_voxelize_per_channel_reductions_match_the_loop_oracle(kind):
    """One reduction per channel (min and mode too), against tests/reference's point-by-point loop."""
    from reference import coords as rc

    rng = np.random.default_rng(3)
    n = {"random": 800, "dense": 2000, "single": 1}[kind]
    scale = {"random": 3.0, "dense": 0.6, "single": 1.0}[kind]
    pts = (rng.normal(size=(n, 3)) * scale).astype(np.float32)
    feats = np.stack(
        [
            rng.normal(size=n),
            rng.integers(0, 4, n),
            rng.normal(size=n),
            rng.integers(-2, 3, n),
            rng.random(n),
        ],
        1,
    ).astype(np.float32)
    per = ("mean", "mode", "min", "mode", "max")
    x = voxelize(pts, feats, 0.5, reduction=per)
    coords, want, _ = rc.voxel_reduce(pts, feats, 0.5, 0.0, list(per))
    np.testing.assert_array_equal(np.array(x.coords), coords)
    # means: float32 sums, which the GPU route adds atomically in any order (a few ulps apart)
    np.testing.assert_allclose(np.array(x.feats), want, rtol=1e-5, atol=1e-6)
    for k, r in enumerate(per):  # a per-channel tuple equals each reduction alone
        alone = voxelize(pts, feats[:, k : k + 1], 0.5, reduction=r)
        np.testing.assert_allclose(np.array(x.feats)[:, k], np.array(alone.feats)[:, 0], rtol=1e-5, atol=1e-6)


def test_voxelize_min_gradient_and_mode_passes_none():
    pts = np.array([[0.1, 0, 0], [0.2, 0, 0], [1.5, 0, 0]], np.float32)
    feats = mx.array([[2.0, 1.0], [2.0, 1.0], [3.0, 4.0]])
    g = mx.grad(lambda f: voxelize(pts, f, 1.0, reduction=("min", "mode")).feats.sum())(feats)
    np.testing.assert_array_equal(np.array(g), [[1, 0], [0, 0], [1, 0]])  # min: the first holder


def test_voxelize_per_channel_errors():
    with pytest.raises(ValueError, match=r"\[voxelize\] 2 reductions for 3 feature channels"):
        voxelize(np.zeros((2, 3)), np.zeros((2, 3)), reduction=("mean", "mode"))
    with pytest.raises(ValueError, match=r"per-channel reductions must be among"):
        voxelize(np.zeros((2, 3)), np.zeros((2, 1)), reduction=("count",))


def test_voxelize_first_takes_the_first_point():
    pts = np.array([[0.1, 0, 0], [0.2, 0, 0], [1.5, 0, 0]], np.float32)
    feats = np.array([[1.0], [2.0], [3.0]], np.float32)
    x = voxelize(pts, feats, 1.0, reduction="first")
    assert np.array(x.feats).ravel().tolist() == [1.0, 3.0]


def test_voxelize_max_gradient_goes_to_the_first_maximum():
    pts = mx.array(np.array([[0.1, 0, 0], [0.2, 0, 0], [0.3, 0, 0]], np.float32))
    feats = mx.array(np.array([[5.0], [5.0], [1.0]], np.float32))
    g = mx.grad(lambda f: voxelize(pts, f, 1.0, reduction="max").feats.sum())(feats)
    assert np.array(g).ravel().tolist() == [1.0, 0.0, 0.0]


def test_voxelize_mean_is_differentiable():
    rng = np.random.default_rng(1)
    pts = rng.uniform(0, 3, (50, 3)).astype(np.float32)
    feats = mx.array(rng.normal(size=(50, 2)).astype(np.float32))
    x, inv = voxelize(pts, feats, 1.0, return_index=True)
    counts = np.bincount(np.array(inv))
    g = mx.grad(lambda f: voxelize(pts, f, 1.0).feats.sum())(feats)
    np.testing.assert_allclose(np.array(g)[:, 0], 1.0 / counts[np.array(inv)], rtol=1e-6)
    # a cotangent that differs per voxel and channel: grad_i = w[inv_i] / count[inv_i]
    w = mx.array(rng.normal(size=(x.feats.shape[0], 2)).astype(np.float32))
    g = mx.grad(lambda f: (voxelize(pts, f, 1.0).feats * w).sum())(feats)
    want = np.array(w)[np.array(inv)] / counts[np.array(inv)][:, None]
    np.testing.assert_allclose(np.array(g), want, rtol=1e-6)
    # the native mean against MLX's scatter route (voxelize_features) on the same quantization
    scatter = voxelize_features(feats, lattice.sparse_quantize(pts, 1.0))
    np.testing.assert_allclose(np.array(x.feats), np.array(scatter), rtol=1e-6, atol=1e-6)


def test_voxelize_batches_origin_and_stride():
    pts = np.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [2.5, 0, 0]], np.float32)
    x = voxelize(
        pts, np.ones((3, 1), np.float32), 1.0, batch_indices=[0, 2, 2], origin=(0.0, 0.0, -1.0), stride=2
    )
    assert x.stride == (2, 2, 2)
    assert sorted(map(tuple, np.array(x.coords).tolist())) == [(0, 0, 0, 1), (2, 0, 0, 1), (2, 2, 0, 1)]
    assert np.array(x.batch_counts).tolist() == [1, 0, 2]


def test_voxelize_errors():
    with pytest.raises(ValueError, match=r"\[voxelize\] reduction"):
        voxelize(np.zeros((2, 3)), np.zeros((2, 1)), reduction="median")
    with pytest.raises(ValueError, match=r"feats are required"):
        voxelize(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"voxel_size must be positive"):
        voxelize(np.zeros((2, 3)), np.zeros((2, 1)), 0.0)
    with pytest.raises(ValueError, match=r"not finite"):
        voxelize(np.array([[np.nan, 0, 0]]), np.zeros((1, 1)))


def test_voxelize_empty():
    x = voxelize(np.zeros((0, 3), np.float32), np.zeros((0, 4), np.float32), 0.1)
    assert x.active_count == 0 and x.channels == 4


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(*[st.floats(-1e3, 1e3, allow_nan=False, width=32)] * 3), min_size=0, max_size=200),
    st.floats(0.01, 10.0),
)
def test_voxel_set_equals_numpy_floor_unique(points, voxel):
    pts = np.array(points, np.float32).reshape(-1, 3)
    q = lattice.sparse_quantize(pts, voxel)
    ref = np.unique(np.floor(pts.astype(np.float64) / voxel).astype(np.int64), axis=0)
    got = np.array(q.coords)[:, 1:]
    assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, ref.tolist()))


def _ref_devoxelize(points, coords, feats, voxel):
    table = {tuple(c): i for i, c in enumerate(coords[:, 1:].tolist())}
    out = np.zeros((len(points), feats.shape[1]))
    for n, p in enumerate(points.astype(np.float64) / voxel):
        base = np.floor(p - 0.5)
        t = p - 0.5 - base
        acc, wsum = np.zeros(feats.shape[1]), 0.0
        for dx in (0, 1):
            for dy in (0, 1):
                for dz in (0, 1):
                    key = (int(base[0] + dx), int(base[1] + dy), int(base[2] + dz))
                    w = (t[0] if dx else 1 - t[0]) * (t[1] if dy else 1 - t[1]) * (t[2] if dz else 1 - t[2])
                    if key in table:
                        acc += w * feats[table[key]]
                        wsum += w
        out[n] = acc / wsum if wsum > 0 else 0.0
    return out


def test_devoxelize_trilinear_matches_reference():
    rng = np.random.default_rng(3)
    pts = rng.uniform(-2, 2, (300, 3)).astype(np.float32)
    x = voxelize(pts, rng.normal(size=(300, 2)).astype(np.float32), 0.5)
    got = np.array(devoxelize(pts, x, 0.5))
    ref = _ref_devoxelize(pts, np.array(x.coords), np.array(x.feats), 0.5)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_devoxelize_nearest_and_missing():
    pts = np.array([[0.2, 0.2, 0.2], [9.0, 9.0, 9.0]], np.float32)
    x = voxelize(pts[:1], np.array([[7.0]], np.float32), 1.0)
    got = np.array(devoxelize(pts, x, 1.0, interpolation="nearest")).ravel()
    assert got.tolist() == [7.0, 0.0]
    pvm = build_point_voxel_map(pts, x, 1.0)
    assert np.array(pvm.rows).shape == (2, 8) and float(np.array(pvm.weights)[1].sum()) == 0.0
    with pytest.raises(ValueError, match="interpolation"):
        devoxelize(pts, x, 1.0, interpolation="cubic")


def test_nearest_point_outside_int32_cells_is_in_no_voxel(recwarn):
    x = voxelize(mx.array([[0.2, 0.2, 0.2], [1.5, 0.5, 0.5]]), mx.ones((2, 1)), 1.0)
    far = np.array([[3e9, 0.0, 0.0], [-3e9, 0.5, 0.5], [1.5, 0.5, 0.5]], np.float32)
    m = build_point_voxel_map(far, x, 1.0, interpolation="nearest")
    assert np.asarray(m.rows).ravel().tolist() == [-1, -1, 1]
    assert np.asarray(m.weights).ravel().tolist() == [0.0, 0.0, 1.0]
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]  # no garbage cast


def test_devoxelize_is_differentiable_in_voxel_features():
    rng = np.random.default_rng(4)
    pts = rng.uniform(0, 2, (40, 3)).astype(np.float32)
    x = voxelize(pts, rng.normal(size=(40, 1)).astype(np.float32), 0.5)
    pvm = build_point_voxel_map(pts, x, 0.5)

    def f(v):
        return lattice.ops.interpolate_point_features(v, pvm).sum()

    g = np.array(mx.grad(f)(x.feats)).ravel()
    w = np.array(pvm.weights)
    rows = np.array(pvm.rows)
    ref = np.zeros(x.active_count)
    np.add.at(ref, rows[rows >= 0], w[rows >= 0])
    np.testing.assert_allclose(g, ref, rtol=1e-5, atol=1e-6)


def test_voxelize_kitti_scan_matches_numpy(kitti_points):
    pts = kitti_points[:, :3]
    x = voxelize(pts, kitti_points[:, 3:4], 0.05)
    ref = np.unique(np.floor(pts.astype(np.float64) / 0.05).astype(np.int64), axis=0)
    assert x.active_count == len(ref)
    got = np.array(x.coords)[:, 1:]
    assert np.array_equal(np.unique(got, axis=0), ref)


def _first_occurrence_reference(cells: np.ndarray):
    """(unique cells in first-occurrence order, inverse, counts) by a dict walk: the oracle."""
    seen: dict[tuple, int] = {}
    inverse = np.empty(len(cells), np.int64)
    for i, c in enumerate(map(tuple, cells.tolist())):
        inverse[i] = seen.setdefault(c, len(seen))
    keys = np.array(list(seen), np.int64).reshape(-1, 3)
    return keys, inverse, np.bincount(inverse, minlength=len(keys))


@pytest.mark.parametrize(
    "layout",
    [
        "dense runs",  # 8 consecutive points per voxel: the table starts small, stays small
        "duplicates first",  # the sampled run is one voxel, then 60k new ones: many doublings
        "all distinct",  # the estimate says m
        "shuffled dense",  # few voxels, no run structure
    ],
)
def test_quantize_numbering_survives_any_distinct_key_estimate(layout):
    rng = np.random.default_rng(7)
    if layout == "dense runs":
        cells = np.repeat(rng.integers(-500, 500, size=(6000, 3)), 8, axis=0)
    elif layout == "duplicates first":
        cells = np.concatenate(
            [np.zeros((9000, 3), np.int64), rng.integers(-(10**5), 10**5, size=(60000, 3))]
        )
    elif layout == "all distinct":
        cells = np.stack(np.unravel_index(rng.permutation(50**3)[:40000], (50, 50, 50)), 1) - 25
    else:
        cells = rng.integers(0, 12, size=(50000, 3))
    pts = (cells + rng.uniform(0.1, 0.9, size=cells.shape)).astype(np.float32)
    q = lattice.sparse_quantize(pts, 1.0)
    keys, inverse, counts = _first_occurrence_reference(cells)
    np.testing.assert_array_equal(np.asarray(q.coords)[:, 1:], keys)
    np.testing.assert_array_equal(np.asarray(q.inverse_rows), inverse)
    np.testing.assert_array_equal(np.asarray(q.counts), counts)
    from lattice import _ext

    probe = np.concatenate([np.zeros((len(keys), 1), np.int32), keys.astype(np.int32)], 1)[::-1]
    absent = probe[:50] + np.array([1, 0, 0, 0], np.int32)  # batch 1: in no voxel
    rows = np.asarray(_ext.lookup(q.table, mx.array(np.concatenate([probe, absent]))))  # the grown table
    np.testing.assert_array_equal(rows, np.concatenate([np.arange(len(keys))[::-1], np.full(50, -1)]))


@pytest.mark.parametrize(
    "n, m, c", [(0, 0, 3), (0, 5, 2), (1, 1, 1), (5000, 7, 6), (70000, 300, 4), (70000, 69000, 40)]
)
def test_native_segment_sum_equals_float64_bincount(n, m, c):
    from lattice import _ext

    rng = np.random.default_rng(n + m + c)
    inv = rng.integers(0, max(m, 1), size=n).astype(np.int32)
    feats = (rng.normal(size=(n, c)) * 100).astype(np.float32)
    got = np.asarray(_ext.segment_sum(mx.array(feats), mx.array(inv), m))
    want = np.stack([np.bincount(inv, weights=feats[:, k], minlength=m) for k in range(c)], 1) if n else 0
    assert got.shape == (m, c) and got.dtype == np.float32
    np.testing.assert_allclose(got, np.broadcast_to(want, (m, c)).astype(np.float32), rtol=1e-6, atol=1e-4)
    half = np.asarray(_ext.segment_sum(mx.array(feats).astype(mx.bfloat16), mx.array(inv), m))
    assert half.shape == (m, c)
    # with counts: the mean, divided in float64 (a voxel of no point reads 0)
    counts = np.bincount(inv, minlength=m).astype(np.int32)
    mean = np.asarray(_ext.segment_sum(mx.array(feats), mx.array(inv), m, mx.array(counts)))
    want_mean = np.broadcast_to(want, (m, c)) / np.maximum(counts, 1)[:, None]
    assert mean.shape == (m, c) and mean.dtype == np.float32
    np.testing.assert_allclose(mean, want_mean.astype(np.float32), rtol=1e-6, atol=1e-5)
    if m:
        with pytest.raises(ValueError, match="counts must have one row per voxel"):
            _ext.segment_sum(mx.array(feats), mx.array(inv), m, mx.array(counts[:-1]))


def test_native_segment_sum_rejects_rows_outside_the_voxels():
    from lattice import _ext

    f = mx.ones((3, 2))
    with pytest.raises(ValueError, match=r"inverse must lie in \[0, 2\)"):
        _ext.segment_sum(f, mx.array([0, 2, 1], dtype=mx.int32), 2)
    with pytest.raises(ValueError, match="one row per point"):
        _ext.segment_sum(f, mx.array([0, 1], dtype=mx.int32), 2)
    with pytest.raises(ValueError, match="float32, float16 or bfloat16"):
        _ext.segment_sum(mx.ones((3, 2), dtype=mx.int32), mx.array([0, 1, 1], dtype=mx.int32), 2)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_voxelize_features_have_a_jvp_and_compile(reduction):
    # the host segment sum is linear: its JVP is the segment sum of the tangent, and under
    # mx.compile (which refuses evaluation) it falls back to MLX's scatter-add
    rng = np.random.default_rng(11)
    pts = mx.array(rng.uniform(-3, 3, size=(60, 3)).astype(np.float32))
    feats = mx.array(rng.normal(size=(60, 2)).astype(np.float32))
    tangent = mx.array(rng.normal(size=(60, 2)).astype(np.float32))

    def f(a):
        return lattice.ops.voxelize(pts, a, 1.0, reduction=reduction).feats

    out = f(feats)
    _, (jvp,) = mx.jvp(f, [feats], [tangent])
    np.testing.assert_allclose(np.asarray(jvp), np.asarray(f(tangent)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(mx.compile(f)(feats)), np.asarray(out), rtol=1e-5, atol=1e-5)
