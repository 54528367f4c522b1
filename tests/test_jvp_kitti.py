"""``mx.jvp`` on the real SemanticKITTI scan at 0.05 m (94,444 voxels): the six ops the
mlx-lattice drop-in promises forward-mode derivatives for, against central differences.

Each op is linear in its features (and, for the convolutions, in the weight), so a central
difference is exact up to float32 rounding of the two evaluations; max pooling is linear
away from ties, and the features are built so that no pooling window holds a near-tie: a
voxel's value is set by its position inside its 2x2x2 parent cell (eight distinct levels
0.1 apart) plus noise below 0.01, far larger than the step ``eps * |tangent|``.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import lattice
from lattice import ops

VOXEL = 0.05
EPS = 1e-3


@pytest.fixture(scope="module")
def scan(kitti_points) -> lattice.SparseTensor:
    q = lattice.core.sparse_quantize(mx.array(kitti_points[:, :3]), VOXEL)
    coords = np.asarray(q.coords[: q.active_count])
    child = (coords[:, 1] & 1) * 4 + (coords[:, 2] & 1) * 2 + (coords[:, 3] & 1)  # 0..7 inside the parent
    rng = np.random.default_rng(0)
    levels = (child[:, None] + np.arange(4)[None, :]) % 8
    feats = (0.1 * levels + 0.01 * rng.random((len(coords), 4))).astype(np.float32)
    return lattice.SparseTensor(coords, feats)


def _central_difference(f, primals, tangents):
    plus = f(*[p + EPS * t for p, t in zip(primals, tangents, strict=True)])
    minus = f(*[p - EPS * t for p, t in zip(primals, tangents, strict=True)])
    return (np.asarray(plus, np.float64) - np.asarray(minus, np.float64)) / (2 * EPS)


def _check(f, primals, seed=1):
    rng = np.random.default_rng(seed)
    tangents = [mx.array(rng.uniform(-1, 1, size=p.shape).astype(np.float32)) for p in primals]
    (_,), (jt,) = mx.jvp(f, primals, tangents)
    want = _central_difference(f, primals, tangents)
    got = np.asarray(jt, np.float64)
    assert got.shape == want.shape and got.size > 0
    scale = max(1.0, float(np.abs(want).max()))
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=2e-3 * scale)


def test_the_scan_has_the_documented_size(scan):
    assert scan.active_count == 94_444


@pytest.mark.parametrize(
    "op, wshape, kwargs",
    [
        ("subm_conv3d", (27, 4, 8), {}),
        ("conv3d", (8, 4, 8), {"kernel_size": 2, "stride": 2}),
        ("conv_transpose3d", (8, 8, 4), {"kernel_size": 2, "stride": 2}),
    ],
)
def test_jvp_of_convolutions_on_the_scan(scan, op, wshape, kwargs):
    x = scan
    if op == "conv_transpose3d":  # go up from the coarse level
        x = ops.conv3d(scan, mx.full((8, 4, 8), 0.05), kernel_size=2, stride=2)
    w = mx.array(np.random.default_rng(2).normal(scale=0.3, size=wshape).astype(np.float32))
    fn = getattr(ops, op)
    _check(lambda feats, weight: fn(x.replace(feats=feats), weight, **kwargs).feats, [x.feats, w])


@pytest.mark.parametrize("op", ["max_pool3d", "avg_pool3d"])
def test_jvp_of_pooling_on_the_scan(scan, op):
    fn = getattr(ops, op)
    _check(lambda feats: fn(scan.replace(feats=feats), kernel_size=2, stride=2).feats, [scan.feats])


def test_jvp_of_linear_on_the_scan(scan):
    w = mx.array(np.random.default_rng(3).normal(size=(16, 4)).astype(np.float32))
    b = mx.array(np.random.default_rng(4).normal(size=(16,)).astype(np.float32))
    _check(
        lambda feats, weight, bias: ops.linear(scan.replace(feats=feats), weight, bias).feats,
        [scan.feats, w, b],
    )
