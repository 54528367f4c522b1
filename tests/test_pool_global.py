"""Global pooling to dense (B, C) rows against the NumPy oracle: batches with an empty
member, ``batch_size`` beyond the last member, empty input, the max rules."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from reference import pool as rp
from test_pool import ALL_CLOUDS, cloud_coords, features, scan_cloud

from lattice import ops
from lattice.core import SparseTensor

MODES = ("sum", "avg", "max")
FNS = {"sum": ops.global_sum_pool, "avg": ops.global_avg_pool, "max": ops.global_max_pool}


def assert_pooled_close(y, coords, f, mode, batch_size=None, rel=1e-5):
    """``y`` against the oracle, each sum / average within ``rel`` of its members' sum of
    magnitudes (float32 atomics add in any order: a sum with cancellation is only that
    exact), a max exactly (in any order it is one of the values)."""
    ref = rp.global_pool(coords, f, mode, batch_size)
    y = np.asarray(y)
    assert y.shape == ref.shape
    if mode == "max":
        np.testing.assert_array_equal(y, ref)
        return
    magnitude = rp.global_pool(coords, np.abs(f), mode, ref.shape[0])
    np.testing.assert_array_less(np.abs(y - ref), rel * magnitude + 1e-6)


def _x(name, c=3, dtype=mx.float32, seed=0):
    coords = cloud_coords(name)
    f = features(len(coords), c, seed)
    return coords, f, SparseTensor(coords, mx.array(f).astype(dtype))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", [n for n in ALL_CLOUDS if n != "empty"])
def test_global_matches_oracle(name, mode):
    coords, f, x = _x(name)
    if mode == "max" and name == "batched":  # member 1 is empty
        with pytest.raises(
            ValueError,
            match=r"\[global_pool\] max over an empty batch member is undefined: "
            r"member\(s\) \[1\] of batch_size 3 have no rows",
        ):
            ops.global_pool(x, mode=mode)
        return
    y = ops.global_pool(x, mode=mode)
    ref = rp.global_pool(coords, f, mode)
    assert y.shape == ref.shape and y.dtype == mx.float32
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-5, atol=1e-5)
    if mx.default_device() == mx.cpu:  # one route, one order: bit-equal
        np.testing.assert_array_equal(np.asarray(FNS[mode](x)), np.asarray(y))
    else:  # the GPU route's float32 atomics add in any order (sum / avg)
        np.testing.assert_allclose(np.asarray(FNS[mode](x)), np.asarray(y), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["sum", "avg"])
def test_empty_members_give_zero(mode):
    coords, f, x = _x("batched")
    y = ops.global_pool(x, mode=mode, batch_size=5)
    ref = rp.global_pool(coords, f, mode, batch_size=5)
    assert y.shape == (5, 3)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(np.asarray(y)[[1, 3, 4]], 0.0)


def test_empty_input():
    x = SparseTensor(np.zeros((0, 4), np.int32), mx.zeros((0, 4)))
    for mode in MODES:
        assert ops.global_pool(x, mode=mode).shape == (0, 4)
    np.testing.assert_array_equal(np.asarray(ops.global_avg_pool(x, batch_size=2)), np.zeros((2, 4)))
    np.testing.assert_array_equal(np.asarray(ops.global_sum_pool(x, batch_size=2)), np.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"\[global_max_pool\] max over an empty batch member"):
        ops.global_max_pool(x, batch_size=2)


def test_many_rows_one_member_and_many_members():
    # more rows than one reduction run (4096), and more members than threads
    rng = np.random.default_rng(0)
    xyz = np.unique(rng.integers(-40, 40, (20000, 3)), axis=0)
    b = rng.integers(0, 37, len(xyz))
    for batch in (np.zeros(len(xyz), np.int64), b):
        coords = np.concatenate([batch[:, None], xyz], axis=1).astype(np.int32)
        f = rng.standard_normal((len(coords), 5)).astype(np.float32)
        x = SparseTensor(coords, mx.array(f))
        for mode in MODES:
            assert_pooled_close(ops.global_pool(x, mode=mode), coords, f, mode)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
@pytest.mark.parametrize("mode", MODES)
def test_global_half_precision(mode, dtype):
    coords, f, x = _x("grid", 4, dtype)
    f = np.asarray(x.feats.astype(mx.float32))
    y = ops.global_pool(x, mode=mode)
    assert y.dtype == dtype
    tol = 3e-2 if dtype == mx.bfloat16 else 5e-3
    np.testing.assert_allclose(
        np.asarray(y.astype(mx.float32)), rp.global_pool(coords, f, mode), rtol=tol, atol=tol
    )


@pytest.mark.parametrize("mode", MODES)
def test_global_real_scan(kitti_points, mode):
    coords = scan_cloud(kitti_points, 30.0)
    f = features(len(coords), 8, seed=3)
    x = SparseTensor(coords, mx.array(f))
    if mode == "max":  # member 1 is empty: members 0 and 2 are checked on their own below
        with pytest.raises(ValueError, match="empty batch member"):
            ops.global_pool(x, mode=mode)
        return
    assert_pooled_close(ops.global_pool(x, mode=mode, batch_size=3), coords, f, mode, 3)


def test_global_max_real_scan_members(kitti_points):
    coords = scan_cloud(kitti_points, 30.0)
    coords = coords[coords[:, 0] == 2]
    coords[:, 0] = 0
    f = features(len(coords), 8, seed=4)
    y = ops.global_max_pool(SparseTensor(coords, mx.array(f)))
    np.testing.assert_array_equal(np.asarray(y), f.max(axis=0, keepdims=True))


def test_global_errors():
    _, _, x = _x("batched")
    with pytest.raises(
        ValueError,
        match=r"\[global_sum_pool\] batch_size 2 is smaller than the largest batch "
        r"index \+ 1 \(3\)",
    ):
        ops.global_sum_pool(x, batch_size=2)
    with pytest.raises(
        ValueError, match=r"\[global_avg_pool\] batch_size must be a non-negative int or None"
    ):
        ops.global_avg_pool(x, batch_size=-1)
    with pytest.raises(ValueError, match=r"\[global_pool\] mode must be one of"):
        ops.global_pool(x, mode="min")
    with pytest.raises(TypeError, match=r"\[global_pool\] x must be a SparseTensor"):
        ops.global_pool(mx.zeros((3, 3)))
