"""Local pooling (sum / max / avg over the forward relation) against the dense-grid oracle.

Every distribution of ``conftest.CLOUDS`` plus a regular grid (isolated, line, plane,
grid, dense block, random sparse, a batch with an empty member, empty, single point;
negative coordinates throughout) meets a spread of kernel geometries, in every mode
and float dtype; a crop of the real SemanticKITTI scan, in two batch members with an
empty one between them, meets the common geometries.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest
from conftest import CLOUDS, make_cloud
from reference import pool as rp

from lattice import ops
from lattice.core import SparseTensor

# (kernel_size, stride, padding, dilation)
GEOMETRIES = [
    (2, 2, 0, 1),
    (3, 2, 1, 1),
    (3, 1, 1, 1),
    (1, 2, 0, 1),  # kernel smaller than stride: some output rows have no contributor
    (2, 3, 1, 2),
    (4, 2, 1, 1),
    (3, 3, 0, 1),
    ((3, 2, 1), (2, 1, 3), (1, 0, 2), (1, 2, 1)),
]
ALL_CLOUDS = (*CLOUDS, "grid")
MODES = ("sum", "avg", "max")


def _ids(geoms):
    return [str(g).replace(" ", "") for g in geoms]


def cloud_coords(name: str) -> np.ndarray:
    """A conftest distribution, or ``grid``: a regular lattice with spacing 3, two batch members."""
    if name != "grid":
        return make_cloud(name)
    g = np.arange(-7, 8, 3)
    xyz = np.stack(np.meshgrid(g, g, g, indexing="ij"), -1).reshape(-1, 3)
    b = np.repeat([0, 1], len(xyz))
    return np.concatenate([b[:, None], np.tile(xyz, (2, 1))], axis=1).astype(np.int32)


def features(n: int, c: int = 3, seed: int = 0, ties: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if ties:  # small integers: many tied maxima
        return rng.integers(-2, 3, size=(n, c)).astype(np.float32)
    return rng.standard_normal((n, c)).astype(np.float32)


def scan_cloud(points: np.ndarray, half_width: float, voxels=(0.2, 0.4)) -> np.ndarray:
    """A crop of the scan voxelized in NumPy: batch 0 at voxels[0], batch 2 at voxels[1], batch 1 empty."""
    xyz = points[:, :3].astype(np.float64)
    xyz = xyz[(np.abs(xyz[:, 0]) < half_width) & (np.abs(xyz[:, 1]) < half_width)]
    parts = []
    for batch, v in zip((0, 2), voxels, strict=True):
        vox = np.unique(np.floor(xyz / v).astype(np.int64), axis=0)
        parts.append(np.concatenate([np.full((len(vox), 1), batch), vox], axis=1))
    c = np.concatenate(parts).astype(np.int32)
    return c[np.random.default_rng(0).permutation(len(c))]


def check_pool(coords, feats, mode, geom, *, stride_in=1, dtype=mx.float32, rtol=1e-5, atol=1e-5):
    size, stride, padding, dilation = geom
    x = SparseTensor(coords, mx.array(feats).astype(dtype), stride_in)
    y = ops.pool3d(x, mode=mode, kernel_size=size, stride=stride, padding=padding, dilation=dilation)
    ref_coords, ref_feats = rp.local_pool(coords, feats, mode, size, stride, padding, dilation)
    assert y.active_count == len(ref_coords)
    assert y.feats.dtype == dtype
    assert y.stride == tuple(a * b for a, b in zip(x.stride, rp._t(stride), strict=True))
    got = np.asarray(y.feats.astype(mx.float32))
    np.testing.assert_allclose(
        got, rp.align(np.asarray(y.coords), ref_coords, ref_feats), rtol=rtol, atol=atol
    )
    return y


@pytest.mark.parametrize("geom", GEOMETRIES, ids=_ids(GEOMETRIES))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ALL_CLOUDS)
def test_pool_matches_dense_grid_oracle(name, mode, geom):
    coords = cloud_coords(name)
    check_pool(coords, features(len(coords), ties=mode == "max"), mode, geom)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["dense_block", "batched", "plane"])
def test_pool_half_precision(name, mode, dtype):
    coords = cloud_coords(name)
    feats = np.asarray(mx.array(features(len(coords), 4)).astype(dtype).astype(mx.float32))
    tol = 1e-2 if dtype == mx.bfloat16 else 2e-3
    check_pool(coords, feats, mode, (3, 2, 1, 1), dtype=dtype, rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", MODES)
def test_pool_keeps_the_input_level(mode):
    coords = cloud_coords("random_sparse")
    y = check_pool(coords, features(len(coords)), mode, (2, (2, 1, 3), 0, 1), stride_in=(2, 4, 1))
    assert y.stride == (4, 4, 3)
    z = ops.pool3d(y, mode=mode)
    assert z.stride == (8, 8, 6)


@pytest.mark.parametrize("geom", [(2, 2, 0, 1), (3, 2, 1, 1)], ids=["k2s2", "k3s2p1"])
@pytest.mark.parametrize("mode", MODES)
def test_pool_real_scan(kitti_points, mode, geom):
    coords = scan_cloud(kitti_points, 12.0)
    assert 5000 < len(coords) and not np.any(coords[:, 0] == 1)
    check_pool(coords, features(len(coords), 8, seed=1), mode, geom)


def test_avg_divides_by_contributors_not_kernel_volume():
    coords = np.array([[0, 0, 0, 0], [0, 1, 1, 1], [0, 2, 0, 0]], np.int32)
    x = SparseTensor(coords, mx.array([[1.0], [5.0], [7.0]]))
    y = ops.avg_pool3d(x)
    lookup = {
        tuple(c): f for c, f in zip(np.asarray(y.coords).tolist(), np.asarray(y.feats)[:, 0], strict=True)
    }
    assert lookup[(0, 0, 0, 0)] == pytest.approx(3.0)  # (1 + 5) / 2, not / 8
    assert lookup[(0, 1, 0, 0)] == pytest.approx(7.0)


def test_rows_without_contributors_are_zero():
    # kernel 1, stride 2: the output (0, 0, 0, 0) of input (0, 1, 1, 1) reads only (0, 0, 0, 0), absent
    coords = np.array([[0, 1, 1, 1], [0, 2, 2, 2]], np.int32)
    x = SparseTensor(coords, mx.array([[4.0, -3.0], [2.0, 6.0]]))
    for mode in MODES:
        y = ops.pool3d(x, mode=mode, kernel_size=1, stride=2)
        np.testing.assert_array_equal(np.asarray(y.coords), [[0, 0, 0, 0], [0, 1, 1, 1]])
        np.testing.assert_array_equal(np.asarray(y.feats), [[0.0, 0.0], [2.0, 6.0]])


def test_max_is_per_channel_and_propagates_nan():
    coords = np.array([[0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 1], [0, 4, 4, 4]], np.int32)
    f = np.array([[1.0, 9.0], [3.0, -1.0], [np.nan, 2.0], [-5.0, -6.0]], np.float32)
    y = ops.max_pool3d(SparseTensor(coords, mx.array(f)))
    got = np.asarray(y.feats)
    assert np.isnan(got[0, 0]) and got[0, 1] == 9.0
    np.testing.assert_array_equal(got[1], [-5.0, -6.0])


def test_functional_variants_match_pool3d():
    coords = cloud_coords("dense_block")
    x = SparseTensor(coords, mx.array(features(len(coords))))
    kw = dict(kernel_size=3, stride=2, padding=1)
    for fn, mode in ((ops.sum_pool3d, "sum"), (ops.max_pool3d, "max"), (ops.avg_pool3d, "avg")):
        a, b = fn(x, **kw), ops.pool3d(x, mode=mode, **kw)
        assert a.coord_key == b.coord_key
        np.testing.assert_array_equal(np.asarray(a.feats), np.asarray(b.feats))
    assert ops.pool3d(x, mode=ops.PoolMode.MAX).feats.shape == ops.max_pool3d(x).feats.shape


def test_pool_shares_relations_through_the_manager():
    coords = cloud_coords("random_sparse")
    x = SparseTensor(coords, mx.array(features(len(coords))))
    ops.max_pool3d(x)
    n = x.coord_manager.relation_count
    y1, y2 = ops.avg_pool3d(x), ops.sum_pool3d(x)
    assert x.coord_manager.relation_count == n
    assert y1.coord_key == y2.coord_key and y1.coord_manager is x.coord_manager


def test_pool_respects_active_rows():
    coords = cloud_coords("random_sparse")
    f = features(len(coords))
    x = SparseTensor(coords, mx.array(f), active_rows=100)
    y = ops.sum_pool3d(x)
    ref_coords, ref_feats = rp.local_pool(coords[:100], f[:100], "sum")
    np.testing.assert_allclose(
        np.asarray(y.feats), rp.align(np.asarray(y.coords), ref_coords, ref_feats), rtol=1e-5, atol=1e-5
    )


def test_pool_empty_input():
    x = SparseTensor(np.zeros((0, 4), np.int32), mx.zeros((0, 5)))
    for mode in MODES:
        y = ops.pool3d(x, mode=mode, kernel_size=3, stride=2)
        assert y.feats.shape == (0, 5) and y.stride == (2, 2, 2)


def test_pool_is_deterministic():
    coords = cloud_coords("dense_block")
    x = SparseTensor(coords, mx.array(features(len(coords), 16)))
    a = np.asarray(ops.avg_pool3d(x, kernel_size=3, stride=1, padding=1).feats)
    for _ in range(3):
        np.testing.assert_array_equal(
            np.asarray(ops.avg_pool3d(x, kernel_size=3, stride=1, padding=1).feats), a
        )


# ---- errors ------------------------------------------------------------------------------


def _x():
    return SparseTensor(cloud_coords("single"), mx.ones((1, 2)))


def test_error_kernel_size_not_positive():
    with pytest.raises(ValueError, match=r"^\[pool3d\] kernel_size must be positive, got \(2, 0, 2\)$"):
        ops.pool3d(_x(), kernel_size=(2, 0, 2))
    with pytest.raises(ValueError, match=r"\[max_pool3d\] stride must be positive, got \(0, 0, 0\)"):
        ops.max_pool3d(_x(), stride=0)
    with pytest.raises(ValueError, match=r"\[avg_pool3d\] padding must be >= 0"):
        ops.avg_pool3d(_x(), padding=-1)
    with pytest.raises(ValueError, match=r"\[sum_pool3d\] dilation must be an int or 3 ints"):
        ops.sum_pool3d(_x(), dilation=(1, 2))


def test_error_mode_and_inputs():
    with pytest.raises(
        ValueError, match=r"\[pool3d\] mode must be one of \('sum', 'max', 'avg'\), got 'mean'"
    ):
        ops.pool3d(_x(), mode="mean")
    with pytest.raises(TypeError, match=r"\[pool3d\] x must be a SparseTensor, got ndarray"):
        ops.pool3d(np.zeros((2, 4)))
    x = SparseTensor(cloud_coords("single"), mx.ones((1, 2), dtype=mx.int32))
    with pytest.raises(
        TypeError, match=r"\[max_pool3d\] features must be float32, float16 or bfloat16, got int32"
    ):
        ops.max_pool3d(x)


_THREADS_SCRIPT = """
import hashlib, sys
import mlx.core as mx, numpy as np
sys.path.insert(0, {tests!r})
from test_pool import cloud_coords, features
# after the test imports (conftest sets LATTICE_TEST_DEVICE's device): the CPU routes' thread
# count is the subject (the GPU's global sums use atomics)
mx.set_default_device(mx.cpu)
from lattice import ops
from lattice.core import SparseTensor
c = np.concatenate([cloud_coords("dense_block"), cloud_coords("batched")[:, :] + [[3, 0, 0, 0]]])
x = SparseTensor(c, mx.array(features(len(c), 7, seed=9)), 2)
outs = [ops.pool3d(x, mode=m, kernel_size=3).feats for m in ("sum", "avg", "max")]
outs += [ops.trilinear_upsample3d(x, stride=(2, 1, 2)).feats, ops.global_pool(x, mode="avg", batch_size=6)]
outs += [mx.grad(lambda f: (ops.avg_pool3d(x.replace(feats=f), kernel_size=3).feats ** 2).sum())(x.feats)]
print(hashlib.sha256(b"".join(np.asarray(o).tobytes() for o in outs)).hexdigest())
"""


def test_results_do_not_depend_on_the_thread_count(tmp_path):
    script = _THREADS_SCRIPT.format(tests=str(Path(__file__).resolve().parent))
    digests = set()
    for threads in ("1", "2", "5"):
        env = dict(os.environ, LATTICE_NUM_THREADS=threads)
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, cwd=tmp_path
        )  # outside the checkout, whose source folders would shadow the installed package
        digests.add(done.stdout.strip())
    assert len(digests) == 1
