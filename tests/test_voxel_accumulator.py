"""The streaming voxelizer's native state (_ext.VoxelAccumulator behind StreamingVoxelizer)
against the loop oracle: every chunking gives the oracle's voxels, order and features bit
for bit; the table grows in place across chunks; errors leave the state unchanged; the
thread count does not change a bit; the table-rows writer keeps every check but uniqueness.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys

import numpy as np
import pytest
from reference import coords as rc

from lattice import _ext
from lattice.data import synthetic_room
from lattice.io import PointCloud, PointCloudError, SparseFile, read_sparse
from lattice.io.sparse import _write_table_rows
from lattice.pipeline import voxelize_cloud

REDUCTIONS = ["mean", "sum", "max", "min", "first", "mode", "count"]


def _cloud(kind: str) -> PointCloud:
    rng = np.random.default_rng(sum(map(ord, kind)))
    if kind == "empty":
        pts = np.zeros((0, 3), np.float32)
    elif kind == "single":
        pts = np.array([[-0.3, 1.7, -2.2]], np.float32)
    elif kind == "isolated":
        pts = (rng.integers(-50, 50, size=(300, 3)) * 7.3).astype(np.float32)
    elif kind == "line":
        t = np.linspace(-5, 5, 601)
        pts = np.stack([t, 0.5 * t - 1, np.full_like(t, 0.25)], axis=1).astype(np.float32)
    elif kind == "plane":
        u, v = rng.uniform(-4, 4, size=(2, 1500))
        pts = np.stack([u, v, 0.1 * u + 0.05], axis=1).astype(np.float32)
    elif kind == "grid":
        g = np.arange(-4, 5) * 0.5
        pts = np.stack([a.ravel() for a in np.meshgrid(g, g, g, indexing="ij")], axis=1).astype(np.float32)
    elif kind == "dense":  # many points per voxel
        pts = rng.normal(scale=0.6, size=(3000, 3)).astype(np.float32)
    elif kind == "utm":  # float64 coordinates far from 0, as in projected LAS data
        pts = rng.uniform(0, 30, size=(1500, 3)) + [5.0e5, 4.2e6, 100.0]
    elif kind == "scan":
        return synthetic_room(4000, seed=5)
    else:
        raise KeyError(kind)
    n = len(pts)
    attrs = {
        "intensity": rng.random(n).astype(np.float32),
        "label": rng.integers(0, 7, n).astype(np.uint8),
        "time": rng.uniform(1e5, 2e5, n),  # float64: sums must keep it
    }
    return PointCloud(pts, attrs)


KINDS = ["empty", "single", "isolated", "line", "plane", "grid", "dense", "utm", "scan"]


def _oracle(cloud: PointCloud, size, reduction, origin=0.0):
    """The loop oracle; features in float64 when an attribute is float64 (the voxelizer keeps them)."""
    names = list(cloud.attributes)
    feats = None
    if names:
        feats = np.stack([cloud.attributes[k].astype(np.float64) for k in names], axis=1)
    wide = any(cloud.attributes[k].dtype == np.float64 for k in names)
    return rc.voxel_reduce(cloud.points, feats, size, origin, reduction, np.float64 if wide else np.float32)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("kind", KINDS)
def test_every_chunking_equals_the_oracle_bit_for_bit(kind, reduction):
    cloud = _cloud(kind)
    coords, feats, _ = _oracle(cloud, 0.5, reduction, origin=(0.1, -0.2, 0.05))
    for chunk in (1, 7, 256, 10**7):
        if chunk == 1 and len(cloud) > 700:
            continue
        sf, _ = voxelize_cloud(cloud, 0.5, origin=(0.1, -0.2, 0.05), reduction=reduction, chunk_points=chunk)
        np.testing.assert_array_equal(sf.coords, coords, err_msg=f"chunk {chunk}")
        assert sf.feats.dtype == feats.dtype and sf.feats.shape == feats.shape
        np.testing.assert_array_equal(sf.feats, feats, err_msg=f"chunk {chunk}")


def test_table_grows_in_place_across_chunks():
    rng = np.random.default_rng(0)
    pts = rng.uniform(-300, 300, size=(60_000, 3)).astype(np.float32)  # almost one point per voxel
    f = rng.random((len(pts), 2))
    acc = _ext.VoxelAccumulator([1.0, 1.0, 1.0], [0.0, 0.0, 0.0], "sum", 2)
    capacities = []
    for s in range(0, len(pts), 4000):
        acc.add(pts[s : s + 4000], f[s : s + 4000])
        cap = acc.table_capacity
        assert cap & (cap - 1) == 0 and 4 * acc.size <= 3 * cap  # power of two, load <= 3/4
        capacities.append(cap)
    assert len(set(capacities)) >= 3 and capacities == sorted(capacities)
    coords, feats, counts = acc.finish()
    ref_coords, ref_feats, ref_counts = rc.voxel_reduce(pts, f, 1.0, 0.0, "sum", np.float64)
    np.testing.assert_array_equal(coords, ref_coords)
    np.testing.assert_array_equal(feats, ref_feats)
    np.testing.assert_array_equal(counts, ref_counts)
    assert counts.dtype == np.int64 and acc.size == 0 and acc.table_capacity == 0


def test_finish_hands_over_numpy_arrays_and_empties_the_accumulator():
    acc = _ext.VoxelAccumulator([0.5] * 3, [0.0] * 3, "max", 1)
    coords, feats, counts = acc.finish()
    assert coords.shape == (0, 4) and coords.dtype == np.int32
    assert feats.shape == (0, 1) and feats.dtype == np.float64 and counts.shape == (0,)
    acc.add(
        np.array([[0.1, 0.1, 0.1], [0.2, 0.2, 0.2], [3.0, 0, 0]]),
        np.array([[1.0], [2.0], [-1.0]]),
    )
    coords, feats, counts = acc.finish()
    del acc  # the arrays own the buffers
    np.testing.assert_array_equal(coords, [[0, 0, 0, 0], [0, 6, 0, 0]])
    np.testing.assert_array_equal(feats[:, 0], [2.0, -1.0])
    np.testing.assert_array_equal(counts, [2, 1])
    feats[0] = 5.0  # writable, like any NumPy array


def test_reuse_after_finish_starts_from_scratch():
    acc = _ext.VoxelAccumulator([1.0] * 3, [0.0] * 3, "count", 0)
    acc.add(np.array([[0.5, 0.5, 0.5]]))
    acc.finish()
    acc.add(np.array([[5.5, 0.5, 0.5], [5.6, 0.2, 0.1]], np.float32))
    coords, feats, counts = acc.finish()
    np.testing.assert_array_equal(coords, [[0, 5, 0, 0]])
    assert feats.shape == (1, 0)  # count: no feature columns, the counts are the result
    np.testing.assert_array_equal(counts, [2])


def test_nan_features_propagate_in_sum_mean_and_max():
    pts = np.array([[0.1, 0, 0], [0.2, 0, 0], [0.3, 0, 0], [5.0, 0, 0]], np.float32)
    f = np.array([[1.0], [np.nan], [3.0], [4.0]])
    for reduction in ("sum", "mean", "max", "min", "first", "mode", "count"):
        sf, _ = voxelize_cloud(PointCloud(pts, {"a": f[:, 0]}), 1.0, reduction=reduction, chunk_points=2)
        ref = _oracle(PointCloud(pts, {"a": f[:, 0]}), 1.0, reduction)[1]
        np.testing.assert_array_equal(sf.feats, ref)
        propagates = reduction in ("sum", "mean", "max", "min")  # mode and count skip the NaN
        assert np.isnan(sf.feats[0, 0]) == propagates and sf.feats[1, 0] == (
            1.0 if reduction == "count" else 4.0
        )


def test_rejected_chunks_leave_the_state_unchanged():
    acc = _ext.VoxelAccumulator([1.0] * 3, [0.0] * 3, "mean", 1)
    acc.add(np.array([[0.5, 0.5, 0.5]]), np.array([[2.0]]))
    with pytest.raises(ValueError, match=r"too large to pack into a 64-bit key"):
        acc.add(np.array([[-1e9, -1e9, -1e9], [1e9, 1e9, 1e9]]), np.zeros((2, 1)))
    with pytest.raises(
        ValueError, match=r"\[voxelize\] features must be a float64 \(1, 1\) array, got float64 \(1, 2\)"
    ):
        acc.add(np.array([[0.5, 0.5, 0.5]]), np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"features must be a float64 \(1, 1\) array, got float32 \(1, 1\)"):
        acc.add(np.array([[0.5, 0.5, 0.5]]), np.array([[1.0]], np.float32))
    with pytest.raises(
        ValueError, match=r"points must be a float32 or float64 \(N, 3\) array, got int64 with 3"
    ):
        acc.add(np.array([[0, 0, 0]]), np.array([[1.0]]))
    with pytest.raises(
        ValueError, match=r"points must be a float32 or float64 \(N, 3\) array, got float64 with 2"
    ):
        acc.add(np.array([[0.5, 0.5]]), np.array([[1.0]]))
    with pytest.raises(ValueError, match=r"features are required"):
        acc.add(np.array([[0.5, 0.5, 0.5]]))
    with pytest.raises(ValueError, match=r"point 0 \(nan, 0, 0\) is not finite"):
        acc.add(np.array([[np.nan, 0.0, 0.0]]), np.array([[1.0]]))
    acc.add(np.array([[0.7, 0.2, 0.9]]), np.array([[4.0]]))
    coords, feats, counts = acc.finish()
    np.testing.assert_array_equal(coords, [[0, 0, 0, 0]])
    np.testing.assert_array_equal(feats, [[3.0]])
    np.testing.assert_array_equal(counts, [2])


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (
            ([1.0] * 3, [0.0] * 3, "median", 1),
            r"reduction must be one of count, sum, mean, max, min, first, got 'median'",
        ),
        (([1.0] * 3, [0.0] * 3, "mean", 0), r"needs at least one channel, got 0"),
        (([1.0, 0.0, 1.0], [0.0] * 3, "sum", 1), r"voxel size must be positive"),
        (([1.0] * 3, [0.0, float("inf"), 0.0], "sum", 1), r"origin finite"),
    ],
)
def test_constructor_errors(args, match):
    with pytest.raises(ValueError, match=match):
        _ext.VoxelAccumulator(*args)


_DIGEST = (
    "import hashlib, numpy as np; from lattice.data import synthetic_room; from lattice.pipeline import voxelize_cloud;"
    "sf, _ = voxelize_cloud(synthetic_room(30000, seed=1), 0.05, chunk_points=3000);"
    "print(hashlib.sha256(sf.coords.tobytes() + sf.feats.tobytes()).hexdigest())"
)


def test_thread_count_does_not_change_a_bit(tmp_path):
    digests = set()
    for threads in ("1", "3"):
        env = os.environ | {"LATTICE_NUM_THREADS": threads}
        r = subprocess.run(
            [sys.executable, "-c", _DIGEST],
            env=env,
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        digests.add(r.stdout.strip())
    assert len(digests) == 1


def test_table_rows_writer_keeps_every_check_but_uniqueness(tmp_path):
    sf, _ = voxelize_cloud(_cloud("scan"), 0.2)
    buf = io.BytesIO()
    _write_table_rows(buf, sf)
    buf.seek(0)
    back = read_sparse(buf)  # reading checks uniqueness again
    np.testing.assert_array_equal(back.coords, sf.coords)
    np.testing.assert_array_equal(back.feats, sf.feats)
    bad = SparseFile(
        -np.ones((1, 4), np.int32), np.zeros((1, 1), np.float32), sf.stride, sf.voxel_size, sf.origin, ("a",)
    )
    with pytest.raises(PointCloudError, match="batch indices"):
        _write_table_rows(tmp_path / "b.npz", bad)
    short = SparseFile(sf.coords, sf.feats[:-1], sf.stride, sf.voxel_size, sf.origin, sf.feature_names)
    with pytest.raises(PointCloudError, match="feats must be a numeric"):
        _write_table_rows(tmp_path / "s.npz", short)
    assert not (tmp_path / "b.npz").exists() and not (tmp_path / "s.npz").exists()


@pytest.mark.parametrize(
    "values",
    [
        lambda rng, n: rng.integers(0, 4, n),  # small range: the dense table
        lambda rng, n: rng.integers(-3, 2, n),  # negative ids
        lambda rng, n: rng.integers(0, 10**6, n) * 1000,  # wide range: pairs
        lambda rng, n: rng.integers(0, 3, n).astype(np.float64),  # floats: pairs
        lambda rng, n: np.where(rng.random(n) < 0.3, np.nan, rng.integers(0, 3, n)),  # NaN skipped
        lambda rng, n: np.concatenate([rng.integers(0, 3, n // 2), rng.integers(500, 900, n - n // 2)]),
    ],
    ids=["small", "negative", "wide", "float", "nan", "range-grows"],
)
@pytest.mark.parametrize("chunk", [1, 13, 1000])
def test_mode_accumulator_equals_the_loop_oracle(values, chunk):
    """Dense table, pairs, and a switch from one to the other mid-stream: the same modes, ties to the smallest."""
    from lattice.core.modes import ModeAccumulator, mode_reference

    rng = np.random.default_rng(chunk)
    n = 600
    rows = np.sort(rng.integers(0, 40, n)) if chunk == 13 else rng.integers(0, 40, n)
    v = values(rng, n)
    acc = ModeAccumulator(v.dtype)
    seen = 0
    for s in range(0, n, chunk):
        seen = max(seen, int(rows[: s + chunk].max()) + 1)
        acc.add(rows[s : s + chunk], v[s : s + chunk], seen)
    np.testing.assert_array_equal(acc.result(45), mode_reference(rows, v, 45))  # voxels 40..44: no points
