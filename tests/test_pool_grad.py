"""Gradients of the pooling family.

The reference is a central difference of the float64 NumPy oracle of
``L = sum(Y * G)`` for a fixed random cotangent ``G``; the library's gradient comes
from ``mx.grad`` in float32 through the native VJPs. Max pooling with tied maxima
is checked against the oracle gradient that sends each ``G[o, c]`` to the smallest
input row among the ties. The input-exclusive backward (a pure gather) and the
general one (per-offset scatter) must agree wherever both apply. Second order: the
VJP of the backward primitive (sum / avg: the forward again; max: Select).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from reference import pool as rp
from test_pool import ALL_CLOUDS, cloud_coords, features, scan_cloud

from lattice import ops
from lattice.backends.cpu import pool as cpu_pool
from lattice.core import KernelSpec, RelationKind, SparseTensor
from lattice.routing import PoolRequest, route_pool_backward
from lattice.routing.pool import windows_exclusive

MODES = ("sum", "avg", "max")
GEOMETRIES = [
    (2, 2, 0, 1),
    (3, 2, 1, 1),
    (1, 2, 0, 1),
    (2, 3, 1, 2),
    ((3, 1, 2), (3, 2, 2), (1, 0, 0), (1, 1, 1)),
]
EXCLUSIVE = [(2, 2, 0, 1), (1, 2, 0, 1), (2, 3, 1, 2), (3, 3, 1, 1), ((2, 1, 3), (2, 1, 3), (0, 0, 1), 1)]


def _ids(items):
    return [str(g).replace(" ", "") for g in items]


def small_cloud(seed: int = 0, n: int = 16) -> np.ndarray:
    """About ``n`` unique points in a small box, batch members 0 and 2 (member 1 empty)."""
    rng = np.random.default_rng(seed)
    pts = np.unique(rng.integers(-3, 4, size=(4 * n, 3)), axis=0)
    pts = pts[rng.permutation(len(pts))[:n]]
    b = np.where(np.arange(len(pts)) % 3 == 0, 2, 0)
    return np.concatenate([b[:, None], pts], axis=1).astype(np.int32)


def central_difference(loss, f: np.ndarray, eps: float = 1e-4) -> np.ndarray:
    f = f.astype(np.float64)
    g = np.zeros_like(f)
    for idx in np.ndindex(*f.shape):
        hi, lo = f.copy(), f.copy()
        hi[idx] += eps
        lo[idx] -= eps
        g[idx] = (loss(hi) - loss(lo)) / (2 * eps)
    return g


def check_grad(op, x: SparseTensor, oracle, *, tol=1e-4, seed=0):
    """mx.grad of sum(op(x) * G) against central differences of sum(oracle(f) * G)."""
    f = np.asarray(x.feats, np.float64)
    y = op(x)
    ref_coords, _ = oracle(f)
    rng = np.random.default_rng(seed)
    g_ref = rng.standard_normal((len(ref_coords), x.channels))
    g_lib = mx.array(rp.align(np.asarray(y.coords), ref_coords, g_ref).astype(np.float32))
    got = mx.grad(lambda feats: (op(x.replace(feats=feats)).feats * g_lib).sum())(x.feats)
    expected = central_difference(lambda ff: float((oracle(ff)[1] * g_ref).sum()), f)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=tol, atol=tol)
    return got


# ---- local pooling -----------------------------------------------------------------------


@pytest.mark.parametrize("geom", GEOMETRIES, ids=_ids(GEOMETRIES))
@pytest.mark.parametrize("mode", MODES)
def test_pool_grad_finite_differences(mode, geom):
    coords = small_cloud(1)
    x = SparseTensor(coords, mx.array(features(len(coords), 2, seed=1)))
    size, stride, padding, dilation = geom

    def op(t):
        return ops.pool3d(t, mode=mode, kernel_size=size, stride=stride, padding=padding, dilation=dilation)

    check_grad(op, x, lambda ff: rp.local_pool(coords, ff, mode, *geom))


@pytest.mark.parametrize("geom", GEOMETRIES, ids=_ids(GEOMETRIES))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ALL_CLOUDS)
def test_pool_grad_matches_oracle(name, mode, geom):
    coords = cloud_coords(name)
    f = features(len(coords), 3, ties=True)  # many tied maxima: the smallest row must win
    x = SparseTensor(coords, mx.array(f))
    size, stride, padding, dilation = geom

    def loss(feats, g):
        y = ops.pool3d(
            x.replace(feats=feats),
            mode=mode,
            kernel_size=size,
            stride=stride,
            padding=padding,
            dilation=dilation,
        )
        return (y.feats * g).sum()

    y = ops.pool3d(x, mode=mode, kernel_size=size, stride=stride, padding=padding, dilation=dilation)
    g = np.random.default_rng(2).standard_normal(y.feats.shape).astype(np.float32)
    got = mx.grad(loss)(x.feats, mx.array(g))
    ref_coords, _ = rp.local_pool(coords, f, mode, *geom)
    g_ref = rp.align(ref_coords, np.asarray(y.coords), g)
    np.testing.assert_allclose(
        np.asarray(got), rp.local_pool_grad(coords, f, g_ref, mode, *geom), rtol=1e-5, atol=1e-5
    )


def test_max_tie_goes_to_the_smallest_row():
    coords = np.array([[0, 1, 1, 1], [0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0]], np.int32)
    f = mx.array([[2.0, 1.0], [2.0, 0.0], [1.0, 1.0], [2.0, 1.0]])
    x = SparseTensor(coords, f)
    got = mx.grad(lambda ff: ops.max_pool3d(x.replace(feats=ff)).feats.sum())(f)
    # channel 0: rows 0, 1, 3 tie at 2 -> row 0; channel 1: rows 0, 2, 3 tie at 1 -> row 0
    np.testing.assert_array_equal(np.asarray(got), [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    g = mx.grad(lambda ff: ops.global_max_pool(x.replace(feats=ff)).sum())(f)
    np.testing.assert_array_equal(np.asarray(g), [[1.0, 1.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])


# ---- the input-exclusive path ------------------------------------------------------------


def _request(geom) -> PoolRequest:
    spec = KernelSpec(*geom)
    return PoolRequest(
        op="pool3d",
        mode="max",
        dtype="float32",
        channels=4,
        kernel_size=spec.size,
        stride=spec.stride,
        dilation=spec.dilation,
        n_in=10,
    )


@pytest.mark.parametrize("geom", EXCLUSIVE + GEOMETRIES, ids=_ids(EXCLUSIVE + GEOMETRIES))
def test_backward_route_follows_the_window_predicate(geom):
    spec = KernelSpec(*geom)
    exclusive = all(
        s >= (k - 1) * d + 1 for k, s, d in zip(spec.size, spec.stride, spec.dilation, strict=True)
    )
    route = route_pool_backward(_request(geom))
    assert windows_exclusive(spec.size, spec.stride, spec.dilation) == exclusive
    assert route.algorithm == ("input_exclusive_gather" if exclusive else "scatter_general")
    assert {r.algorithm for r in route.rejected} == {"scatter_general", "input_exclusive_gather"} - {
        route.algorithm
    }


def _both_paths(x: SparseTensor, geom, mode: str, g: mx.array) -> list[np.ndarray]:
    rel = x.coord_manager.relation(RelationKind.FORWARD, x.coord_key, KernelSpec(*geom))
    if windows_exclusive(rel.spec.size, rel.spec.stride, rel.spec.dilation):
        # the predicate's promise: every input row has at most one edge
        assert np.bincount(np.asarray(rel.edges.in_rows), minlength=1).max(initial=0) <= 1
    out = []
    for backward in ("input_exclusive_gather", "scatter_general"):
        fn = mx.grad(
            lambda feats, b=backward: (cpu_pool.segment_reduce(feats, rel, mode, backward=b) * g).sum()
        )
        out.append(np.asarray(fn(x.feats)))
    return out


@pytest.mark.usefixtures("cpu_device")  # the CPU backward paths, bit for bit
@pytest.mark.parametrize("geom", EXCLUSIVE, ids=_ids(EXCLUSIVE))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ALL_CLOUDS)
def test_exclusive_and_general_backward_agree(name, mode, geom):
    coords = cloud_coords(name)
    x = SparseTensor(coords, mx.array(features(len(coords), 4, ties=mode == "max")))
    y = ops.pool3d(x, mode=mode, kernel_size=geom[0], stride=geom[1], padding=geom[2], dilation=geom[3])
    g = mx.array(np.random.default_rng(3).standard_normal(y.feats.shape).astype(np.float32))
    exclusive, general = _both_paths(x, geom, mode, g)
    np.testing.assert_allclose(exclusive, general, rtol=1e-6, atol=1e-6)
    expected = mx.grad(
        lambda ff: (
            ops.pool3d(
                x.replace(feats=ff),
                mode=mode,
                kernel_size=geom[0],
                stride=geom[1],
                padding=geom[2],
                dilation=geom[3],
            ).feats
            * g
        ).sum()
    )
    np.testing.assert_array_equal(np.asarray(expected(x.feats)), exclusive)


@pytest.mark.usefixtures("cpu_device")  # the CPU backward paths, bit for bit
@pytest.mark.parametrize("mode", MODES)
def test_exclusive_and_general_backward_agree_on_real_scan(kitti_points, mode):
    coords = scan_cloud(kitti_points, 15.0)
    x = SparseTensor(coords, mx.array(features(len(coords), 8, seed=5)))
    y = ops.pool3d(x, mode=mode)
    g = mx.array(np.random.default_rng(4).standard_normal(y.feats.shape).astype(np.float32))
    exclusive, general = _both_paths(x, (2, 2, 0, 1), mode, g)
    np.testing.assert_allclose(exclusive, general, rtol=1e-6, atol=1e-6)


def test_exclusive_request_on_overlapping_windows_is_still_right():
    # the native gather checks exclusivity and falls back to the scatter when it does not hold
    coords = cloud_coords("dense_block")
    x = SparseTensor(coords, mx.array(features(len(coords), 2)))
    g = mx.ones((ops.avg_pool3d(x, kernel_size=3).active_count, 2))
    exclusive, general = _both_paths(x, (3, 2, 0, 1), "avg", g)
    np.testing.assert_allclose(exclusive, general, rtol=1e-6, atol=1e-6)


# ---- upsampling and global pooling -------------------------------------------------------


@pytest.mark.parametrize("target", [False, True], ids=["generated", "target"])
@pytest.mark.parametrize(
    "geom",
    [(2, 2, 0, 1), (3, 2, 1, 1), ((3, 2, 1), (2, 1, 2), (1, 0, 0), 1)],
    ids=["k2s2", "k3s2p1", "aniso"],
)
def test_pool_transpose_grad(geom, target):
    coords = small_cloud(2, 10)
    x = SparseTensor(coords, mx.array(features(len(coords), 2, seed=2)), 2)
    size, stride, padding, dilation = geom
    support = rp.contributor_average(coords, np.zeros((len(coords), 1)), *geom)[0] if target else None
    t = None if support is None else np.concatenate([support[::2], [[0, 50, 50, 50]]]).astype(np.int32)

    def op(x_):
        return ops.pool_transpose3d(
            x_, t, kernel_size=size, stride=stride, padding=padding, dilation=dilation
        )

    check_grad(op, x, lambda ff: rp.contributor_average(coords, ff, *geom, target=t))


@pytest.mark.parametrize("target", [False, True], ids=["generated", "target"])
@pytest.mark.parametrize("stride", [2, 3, (1, 2, 3)], ids=["s2", "s3", "s123"])
def test_trilinear_grad(stride, target):
    coords = small_cloud(3, 10)
    x = SparseTensor(coords, mx.array(features(len(coords), 2, seed=3)), 6)
    support = rp.trilinear(coords, np.zeros((len(coords), 1)), stride)[0] if target else None
    t = None if support is None else np.concatenate([support[::3], [[1, 90, 0, 0]]]).astype(np.int32)
    check_grad(
        lambda x_: ops.trilinear_upsample3d(x_, t, stride=stride),
        x,
        lambda ff: rp.trilinear(coords, ff, stride, target=t),
    )


@pytest.mark.parametrize("mode", MODES)
def test_global_grad(mode):
    coords = small_cloud(4)
    if mode == "max":
        coords = coords[coords[:, 0] == 0]
    f = features(len(coords), 3, seed=4)
    x = SparseTensor(coords, mx.array(f))
    g = np.random.default_rng(5).standard_normal((4, 3))
    got = mx.grad(
        lambda ff: (
            ops.global_pool(x.replace(feats=ff), mode=mode, batch_size=4 if mode != "max" else 1)
            * mx.array(g[: 4 if mode != "max" else 1].astype(np.float32))
        ).sum()
    )(x.feats)
    b = 4 if mode != "max" else 1
    expected = central_difference(lambda ff: float((rp.global_pool(coords, ff, mode, b) * g[:b]).sum()), f)
    np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-4, atol=1e-4)


# ---- second order, dtypes, compile -------------------------------------------------------


@pytest.mark.parametrize("kind", ["sum", "avg", "max", "global_avg", "global_max", "trilinear"])
def test_vjp_of_the_backward(kind):
    coords = small_cloud(5)
    coords = coords[coords[:, 0] == 0] if kind == "global_max" else coords
    x = SparseTensor(coords, mx.array(features(len(coords), 2, seed=6, ties=True)), 2)

    def forward(feats):
        t = x.replace(feats=feats)
        if kind.startswith("global"):
            return ops.global_pool(t, mode=kind.removeprefix("global_"))
        if kind == "trilinear":
            return ops.trilinear_upsample3d(t).feats
        return ops.pool3d(t, mode=kind, kernel_size=3, stride=2, padding=1).feats

    y = forward(x.feats)
    rng = np.random.default_rng(7)
    g0 = rng.standard_normal(y.shape).astype(np.float32)
    v = mx.array(rng.standard_normal(x.feats.shape).astype(np.float32))

    def h(g):  # <d/dx sum(forward(x) * g), v>: linear in g
        return (mx.grad(lambda ff: (forward(ff) * g).sum())(x.feats) * v).sum()

    got = np.asarray(mx.grad(h)(mx.array(g0)))
    expected = central_difference(lambda gg: float(h(mx.array(gg.astype(np.float32))).item()), g0, eps=0.5)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
@pytest.mark.parametrize("mode", MODES)
def test_grad_half_precision(mode, dtype):
    coords = cloud_coords("dense_block")
    f = mx.array(features(len(coords), 4)).astype(dtype)
    x = SparseTensor(coords, f)

    def grad(feats):
        return mx.grad(
            lambda ff: (
                ops.pool3d(x.replace(feats=ff), mode=mode, kernel_size=3, padding=1)
                .feats.astype(mx.float32)
                .sum()
            )
        )(feats)

    lo, hi = grad(f), grad(f.astype(mx.float32))
    assert lo.dtype == dtype
    np.testing.assert_allclose(np.asarray(lo.astype(mx.float32)), np.asarray(hi), rtol=1e-2, atol=1e-2)


def test_grad_compiles():
    coords = cloud_coords("random_sparse")
    x = SparseTensor(coords, mx.array(features(len(coords), 4)))

    def loss(feats):
        t = x.replace(feats=feats)
        p = ops.max_pool3d(t, kernel_size=3, padding=1)
        u = ops.trilinear_upsample3d(p, t)
        return ops.global_avg_pool(u).sum() + ops.avg_pool3d(t).feats.square().sum()

    eager = mx.value_and_grad(loss)(x.feats)
    compiled = mx.compile(mx.value_and_grad(loss))(x.feats)
    np.testing.assert_allclose(np.asarray(compiled[0]), np.asarray(eager[0]), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(compiled[1]), np.asarray(eager[1]), rtol=1e-6, atol=1e-7)
