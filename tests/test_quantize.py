"""sparse_quantize against the point-by-point reference."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import point_cloud
from reference import coords as rc

import lattice
from lattice.core import SparseQuantization, sparse_quantize

KINDS = ["empty", "single", "random", "isolated", "line", "plane", "on_boundaries"]
SETTINGS = [
    {"voxel_size": 1.0},
    {"voxel_size": 0.5},
    {"voxel_size": 0.2, "origin": -0.05},
    {"voxel_size": (0.5, 1.0, 0.25), "origin": (0.1, -0.2, 0.3)},
]


def _check(q: SparseQuantization, ref) -> None:
    coords, inverse, counts = ref
    assert isinstance(q, SparseQuantization)
    assert q.active_count == len(coords) == q.capacity and q.active_rows.tolist() == [len(coords)]
    assert q.coords.dtype == mx.int32
    np.testing.assert_array_equal(np.asarray(q.coords)[: q.active_count].reshape(-1, 4), coords)
    np.testing.assert_array_equal(np.asarray(q.inverse_rows), inverse)
    np.testing.assert_array_equal(np.asarray(q.counts), counts)


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("kind", KINDS)
def test_sparse_quantize_matches_reference(kind, settings):
    pts = point_cloud(kind)
    _check(sparse_quantize(pts, **settings), rc.sparse_quantize(pts, **settings))


@pytest.mark.parametrize("kind", ["random", "plane", "single", "empty"])
def test_sparse_quantize_with_batches(kind):
    pts = point_cloud(kind)
    # batch ids 0 and 2 (member 1 empty), interleaved; the same xyz in two members stays distinct
    batch = (np.arange(len(pts)) % 3 == 0).astype(np.int32) * 2
    q = sparse_quantize(pts, 0.5, batch_indices=batch)
    _check(q, rc.sparse_quantize(pts, 0.5, batch_indices=batch))
    assert set(np.asarray(q.coords)[:, 0].tolist()) <= {0, 2}
    # batch indices as an mx.array give the same result
    _check(
        sparse_quantize(mx.array(pts), 0.5, batch_indices=mx.array(batch)),
        rc.sparse_quantize(pts, 0.5, batch),
    )


def test_sparse_quantize_active_rows():
    pts = point_cloud("random")
    batch = np.arange(len(pts)) % 2
    for n in (0, 1, 777):
        q = sparse_quantize(pts, 0.5, batch_indices=batch, active_rows=n)
        _check(q, rc.sparse_quantize(pts[:n], 0.5, batch_indices=batch[:n]))
        assert q.inverse_rows.shape == (n,)
    q = sparse_quantize(pts, 0.5, active_rows=mx.array(10, dtype=mx.int32))
    _check(q, rc.sparse_quantize(pts[:10], 0.5))


def test_sparse_quantize_hand_checked():
    pts = np.array(
        [[0.1, 0.2, 0.3], [-0.1, 0.0, 0.0], [0.9, 0.5, 0.0], [-1.0, -1.0, -1.0], [-0.5, 0, 0]], np.float32
    )
    q = sparse_quantize(pts, 1.0)
    assert np.asarray(q.coords).tolist() == [[0, 0, 0, 0], [0, -1, 0, 0], [0, -1, -1, -1]]
    assert np.asarray(q.inverse_rows).tolist() == [0, 1, 0, 2, 1]
    assert np.asarray(q.counts).tolist() == [2, 2, 1]


def test_sparse_quantize_is_exported_at_top_level():
    assert lattice.sparse_quantize is sparse_quantize


def test_sparse_quantize_float64_points():
    pts = point_cloud("random").astype(np.float64)
    _check(sparse_quantize(pts, 0.3), rc.sparse_quantize(pts, 0.3))


def test_vectorized_quantize_oracle_agrees_with_loop_oracle():
    pts = point_cloud("random")
    batch = np.arange(len(pts)) % 3
    for a, b in zip(
        rc.sparse_quantize(pts, 0.4, batch, (0.1, 0.0, -0.1)),
        rc.sparse_quantize_vectorized(pts, 0.4, batch, (0.1, 0.0, -0.1)),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


def test_scan_quantize(kitti_points):
    pts = kitti_points[:, :3]
    batch = np.where(np.arange(len(pts)) < len(pts) // 2, 0, 2)
    q = sparse_quantize(pts, 0.2, batch_indices=batch, origin=(-0.05, 0.0, 0.1))
    _check(q, rc.sparse_quantize_vectorized(pts, 0.2, batch, (-0.05, 0.0, 0.1)))
    assert int(np.asarray(q.counts).sum()) == len(pts)


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,exc,message",
    [
        (
            {"voxel_size": 0.0},
            ValueError,
            r"\[sparse_quantize\] voxel_size must be positive, got \(0.0, 0.0, 0.0\)",
        ),
        ({"voxel_size": (1.0, -1.0, 1.0)}, ValueError, r"\[sparse_quantize\] voxel_size must be positive"),
        (
            {"voxel_size": (1.0, 1.0)},
            ValueError,
            r"\[sparse_quantize\] voxel_size must be a number or 3 numbers",
        ),
        ({"voxel_size": float("nan")}, ValueError, r"\[sparse_quantize\] voxel_size must be finite"),
        ({"origin": float("inf")}, ValueError, r"\[sparse_quantize\] origin must be finite"),
        ({"active_rows": 5}, ValueError, r"\[sparse_quantize\] active_rows must be in \[0, 3\], got 5"),
        (
            {"batch_indices": [0, 1]},
            ValueError,
            r"\[sparse_quantize\] batch_indices must have shape \(N,\) with N = 3",
        ),
        (
            {"batch_indices": [0.0, 1.0, 0.0]},
            TypeError,
            r"\[sparse_quantize\] batch_indices must be integers",
        ),
        (
            {"batch_indices": [0, -1, 0]},
            ValueError,
            r"\[sparse_quantize\] point 1 .* has a negative batch index -1",
        ),
    ],
)
def test_sparse_quantize_rejects_bad_arguments(kwargs, exc, message):
    pts = np.zeros((3, 3), np.float32)
    with pytest.raises(exc, match=message):
        sparse_quantize(pts, **kwargs)


def test_sparse_quantize_rejects_bad_points():
    with pytest.raises(
        ValueError, match=r"\[sparse_quantize\] points must have shape \(N, 3\), got \(4, 2\)"
    ):
        sparse_quantize(np.zeros((4, 2), np.float32))
    bad = np.zeros((3, 3), np.float32)
    bad[2, 1] = np.nan
    with pytest.raises(
        ValueError, match=r"\[sparse_quantize\] point 2 .* is not finite or its voxel index overflows int32"
    ):
        sparse_quantize(bad)
    far = np.array([[0, 0, 0], [3e9, 0, 0]], np.float32)
    with pytest.raises(ValueError, match=r"\[sparse_quantize\] point 1 .* overflows int32"):
        sparse_quantize(far, 1.0)


def test_sparse_quantize_rejects_bad_points_anywhere_in_a_long_cloud():
    """The blocked pass proves the cells in range from the extremes first; a bad point in a later
    block, an infinity or a negative batch index sends the call to the checked pass, which names it."""
    pts = np.random.default_rng(3).uniform(-5, 5, (70000, 3)).astype(np.float32)
    for value, row in ((np.inf, 69999), (-np.inf, 40000), (np.nan, 65)):
        bad = pts.copy()
        bad[row, 2] = value
        with pytest.raises(ValueError, match=rf"\[sparse_quantize\] point {row} .* is not finite"):
            sparse_quantize(bad, 0.1)
    batch = np.zeros(len(pts), np.int32)
    batch[50000] = -1
    with pytest.raises(ValueError, match=r"point 50000 .* has a negative batch index -1"):
        sparse_quantize(pts, 0.1, batch_indices=batch)


def test_sparse_quantize_cells_at_the_int32_limits():
    """Cells of exactly -2^31 and 2^31 - 1 are in range (float64 points, voxel 1); one past is not."""
    pts = np.array([[-2147483648.0, 0, 0], [2147483647.5, 0, 0], [-0.5, 0, 0], [0.0, -1e-300, 0]], np.float64)
    _check(sparse_quantize(pts, 1.0), rc.sparse_quantize(pts, 1.0))
    assert np.asarray(sparse_quantize(pts, 1.0).coords)[:, 1].tolist() == [-(2**31), 2**31 - 1, -1, 0]
    with pytest.raises(ValueError, match=r"point 0 .* overflows int32"):
        sparse_quantize(np.array([[2147483648.0, 0, 0]], np.float64), 1.0)


def test_sparse_quantize_dense_indoor_frame_matches_reference():
    """The organized stereo frame of few voxels (6.4 points each) at 5 mm, rows in scan order."""
    from conftest import DATA

    from lattice.io import read_points

    path = DATA / "indoor" / "table_scene_mug_stereo_textured.pcd"
    if not path.exists():
        pytest.skip(f"{path} not present")
    pts = np.ascontiguousarray(read_points(path).drop_nan().points, np.float32)
    _check(sparse_quantize(pts, 0.005), rc.sparse_quantize_vectorized(pts, 0.005))
    _check(
        sparse_quantize(pts, 0.005, origin=-0.0025), rc.sparse_quantize_vectorized(pts, 0.005, None, -0.0025)
    )


def test_sparse_quantize_float64_points_keep_their_precision():
    # x = 500000.049 lies in voxel 10000000 and x = 500000.051 in voxel 10000001 (0.05 m voxels);
    # both round to 500000.0625 in float32
    pts = np.array([[500000.049, 4000000.0, 12.0], [500000.051, 4000000.0, 12.0]], np.float64)
    ref = rc.sparse_quantize(pts, 0.05)
    assert ref[0][:, 1].tolist() == [10000000, 10000001]
    _check(sparse_quantize(pts, 0.05), ref)
