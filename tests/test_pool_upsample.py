"""Pool transpose (contributor average) and trilinear upsampling against their NumPy
formulas, on generated support and on explicit targets (rows and order kept)."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from reference import pool as rp
from test_pool import ALL_CLOUDS, cloud_coords, features, scan_cloud

from lattice import ops
from lattice.core import SparseTensor
from lattice.ops.pool import trilinear_weights

TRANSPOSE_GEOMETRIES = [
    (2, 2, 0, 1),
    (3, 2, 1, 1),
    (1, 2, 0, 1),
    (3, 3, 1, 2),
    (4, 2, 1, 1),
    ((3, 2, 1), (2, 1, 3), (1, 0, 2), (1, 2, 1)),
]
STRIDES = [1, 2, 3, (1, 2, 3), (2, 1, 2)]
LEVEL = (6, 6, 6)  # the input level: divisible by every stride above


def _ids(items):
    return [str(g).replace(" ", "") for g in items]


def _coarse(name: str, c: int = 3, seed: int = 0) -> tuple[np.ndarray, np.ndarray, SparseTensor]:
    coords = cloud_coords(name)
    f = features(len(coords), c, seed)
    return coords, f, SparseTensor(coords, mx.array(f), LEVEL)


def _fine_level(stride) -> tuple[int, int, int]:
    return tuple(a // b for a, b in zip(LEVEL, rp._t(stride), strict=True))


def _target(generated: np.ndarray, seed: int = 0) -> np.ndarray:
    """Two of every three generated rows plus rows nothing reaches, shuffled."""
    keep = generated[np.arange(len(generated)) % 3 != 1]
    extra = np.array([[0, 900, -900, 9], [1, 777, 777, 777]], np.int32)
    t = np.concatenate([keep, extra]).astype(np.int32)
    return t[np.random.default_rng(seed).permutation(len(t))]


def _check(y: SparseTensor, ref_coords, ref_feats, *, same_order: bool, tol=1e-5) -> None:
    assert y.active_count == len(ref_coords)
    if same_order:
        np.testing.assert_array_equal(np.asarray(y.coords), ref_coords)
        expected = ref_feats
    else:
        expected = rp.align(np.asarray(y.coords), ref_coords, ref_feats)
    np.testing.assert_allclose(np.asarray(y.feats.astype(mx.float32)), expected, rtol=tol, atol=tol)


# ---- pool transpose ----------------------------------------------------------------------


@pytest.mark.parametrize("geom", TRANSPOSE_GEOMETRIES, ids=_ids(TRANSPOSE_GEOMETRIES))
@pytest.mark.parametrize("name", ALL_CLOUDS)
def test_pool_transpose_generated(name, geom):
    coords, f, x = _coarse(name)
    size, stride, padding, dilation = geom
    y = ops.pool_transpose3d(x, kernel_size=size, stride=stride, padding=padding, dilation=dilation)
    assert y.stride == _fine_level(stride)
    _check(y, *rp.contributor_average(coords, f, size, stride, padding, dilation), same_order=False)


@pytest.mark.parametrize("geom", TRANSPOSE_GEOMETRIES[:4], ids=_ids(TRANSPOSE_GEOMETRIES[:4]))
@pytest.mark.parametrize("name", ["batched", "dense_block", "isolated", "grid", "empty"])
def test_pool_transpose_onto_target(name, geom):
    coords, f, x = _coarse(name)
    size, stride, padding, dilation = geom
    generated, _ = rp.contributor_average(coords, f, size, stride, padding, dilation)
    target = _target(generated)
    y = ops.pool_transpose3d(x, target, kernel_size=size, stride=stride, padding=padding, dilation=dilation)
    ref = rp.contributor_average(coords, f, size, stride, padding, dilation, target=target)
    _check(y, *ref, same_order=True)
    # rows nothing reaches are 0
    far = np.abs(target[:, 1:]).max(axis=1) >= 700
    np.testing.assert_array_equal(np.asarray(y.feats)[far], 0.0)


def test_pool_transpose_target_forms():
    coords, f, x = _coarse("random_sparse")
    fine = ops.pool_transpose3d(x)  # generated support at stride 3
    t = SparseTensor(
        np.ascontiguousarray(np.asarray(fine.coords)[::-1]), mx.zeros((fine.active_count, 1)), fine.stride
    )
    by_tensor = ops.pool_transpose3d(x, t)  # a tensor from another manager
    by_key = ops.pool_transpose3d(x, fine.coord_key)  # a key of x's manager
    by_coords = ops.pool_transpose3d(x, np.asarray(t.coords))  # coordinates at the fine level
    np.testing.assert_array_equal(np.asarray(by_tensor.coords), np.asarray(t.coords))
    np.testing.assert_array_equal(np.asarray(by_coords.feats), np.asarray(by_tensor.feats))
    np.testing.assert_array_equal(np.asarray(by_key.feats), np.asarray(fine.feats))


def test_pool_transpose_inverts_pooling_support():
    # stride 2 kernel 2 windows do not overlap: every fine row copies its parent, onto the input rows
    coords, f, _ = _coarse("dense_block")
    x = SparseTensor(coords, mx.array(f))
    coarse = ops.avg_pool3d(x)
    back = ops.pool_transpose3d(coarse, x)
    assert back.coord_key == x.coord_key and back.stride == (1, 1, 1)
    parent = rp.align(
        np.asarray(coords) // np.array([1, 2, 2, 2]), np.asarray(coarse.coords), np.asarray(coarse.feats)
    )
    np.testing.assert_allclose(np.asarray(back.feats), parent, rtol=1e-6)


def test_pool_transpose_errors():
    _, _, x = _coarse("random_sparse")
    wrong = SparseTensor(cloud_coords("single"), mx.ones((1, 3)), 2)
    with pytest.raises(
        ValueError,
        match=r"\[pool_transpose3d\] target stride must equal x.stride / stride = "
        r"\(3, 3, 3\), got \(2, 2, 2\)",
    ):
        ops.pool_transpose3d(x, wrong)
    with pytest.raises(
        ValueError,
        match=r"\[pool_transpose3d\] x.stride \(6, 6, 6\) is not divisible by "
        r"stride \(4, 4, 4\)",
    ):
        ops.pool_transpose3d(x, stride=4)
    with pytest.raises(ValueError, match=r"\[pool_transpose3d\] kernel_size must be positive"):
        ops.pool_transpose3d(x, kernel_size=0)


# ---- trilinear ---------------------------------------------------------------------------


def test_trilinear_weights_follow_the_design():
    assert trilinear_weights((2, 1, 1)) == (0.5, 1.0, 0.5)
    w = np.array(trilinear_weights((3, 3, 2))).reshape(5, 5, 3)
    axis3 = np.array([1 / 3, 2 / 3, 1.0, 2 / 3, 1 / 3])
    np.testing.assert_allclose(w, axis3[:, None, None] * axis3[None, :, None] * np.array([0.5, 1, 0.5]))


@pytest.mark.parametrize("stride", STRIDES, ids=_ids(STRIDES))
@pytest.mark.parametrize("name", ALL_CLOUDS)
def test_trilinear_generated(name, stride):
    coords, f, x = _coarse(name)
    y = ops.trilinear_upsample3d(x, stride=stride)
    assert y.stride == _fine_level(stride)
    _check(y, *rp.trilinear(coords, f, stride), same_order=False)


@pytest.mark.parametrize("stride", STRIDES, ids=_ids(STRIDES))
@pytest.mark.parametrize("name", ["batched", "plane", "line", "isolated", "empty"])
def test_trilinear_onto_target(name, stride):
    coords, f, x = _coarse(name)
    target = _target(rp.trilinear(coords, f, stride)[0], seed=5)
    y = ops.trilinear_upsample3d(x, target, stride=stride)
    _check(y, *rp.trilinear(coords, f, stride, target=target), same_order=True)


def test_trilinear_by_hand_on_a_line():
    # coarse x = 0, 1 (stride 2) -> fine x = -1..3: weights [0.5, 1, 0.5] around 0 and 2, normalised
    coords = np.array([[0, 0, 0, 0], [0, 1, 0, 0]], np.int32)
    x = SparseTensor(coords, mx.array([[2.0], [6.0]]), 2)
    y = ops.trilinear_upsample3d(x)
    line = {
        tuple(c): v
        for c, v in zip(np.asarray(y.coords).tolist(), np.asarray(y.feats)[:, 0], strict=True)
        if c[2] == 0 and c[3] == 0
    }
    assert line == {
        (0, -1, 0, 0): 2.0,
        (0, 0, 0, 0): 2.0,
        (0, 1, 0, 0): 4.0,
        (0, 2, 0, 0): 6.0,
        (0, 3, 0, 0): 6.0,
    }
    assert y.active_count == 5 * 3 * 3  # generated: 2s - 1 taps per axis around each coarse row


def test_trilinear_does_not_dim_edges():
    coords, _, _ = _coarse("isolated")
    x = SparseTensor(coords, mx.full((len(coords), 2), 3.5), LEVEL)
    for stride in (2, 3, (1, 2, 3)):
        np.testing.assert_allclose(
            np.asarray(ops.trilinear_upsample3d(x, stride=stride).feats), 3.5, rtol=1e-6
        )


def test_trilinear_stride_one_is_identity():
    coords, f, x = _coarse("random_sparse")
    y = ops.trilinear_upsample3d(x, stride=1)
    np.testing.assert_allclose(rp.align(coords, np.asarray(y.coords), np.asarray(y.feats)), f, rtol=1e-6)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_upsampling_half_precision(dtype):
    coords, f, x = _coarse("dense_block")
    f = np.asarray(mx.array(f).astype(dtype).astype(mx.float32))
    xh = SparseTensor(coords, mx.array(f).astype(dtype), LEVEL)
    tol = 2e-2 if dtype == mx.bfloat16 else 3e-3
    y = ops.trilinear_upsample3d(xh, stride=3)
    assert y.dtype == dtype
    _check(y, *rp.trilinear(coords, f, 3), same_order=False, tol=tol)
    _check(
        ops.pool_transpose3d(xh, kernel_size=3, padding=1),
        *rp.contributor_average(coords, f, 3, 2, 1),
        same_order=False,
        tol=tol,
    )


def test_upsampling_real_scan(kitti_points):
    # pool a crop of the scan, then bring it back onto the input rows both ways
    coords = scan_cloud(kitti_points, 6.0)
    x = SparseTensor(coords, mx.array(features(len(coords), 4, seed=2)))
    coarse = ops.avg_pool3d(x)
    cc, cf = np.asarray(coarse.coords), np.asarray(coarse.feats)
    _check(ops.trilinear_upsample3d(coarse, x), *rp.trilinear(cc, cf, 2, target=coords), same_order=True)
    _check(ops.pool_transpose3d(coarse, x), *rp.contributor_average(cc, cf, target=coords), same_order=True)
    _check(ops.trilinear_upsample3d(coarse), *rp.trilinear(cc, cf, 2), same_order=False)


def test_trilinear_errors():
    _, _, x = _coarse("random_sparse")
    with pytest.raises(
        ValueError, match=r"\[trilinear_upsample3d\] stride must be positive, got \(2, 0, 2\)"
    ):
        ops.trilinear_upsample3d(x, stride=(2, 0, 2))
    with pytest.raises(
        ValueError, match=r"\[trilinear_upsample3d\] target stride must equal x.stride / stride"
    ):
        ops.trilinear_upsample3d(x, SparseTensor(cloud_coords("single"), mx.ones((1, 3)), 6))
    with pytest.raises(ValueError, match=r"\[trilinear_upsample3d\] x.stride \(6, 6, 6\) is not divisible"):
        ops.trilinear_upsample3d(x, stride=4)
