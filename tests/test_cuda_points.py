"""voxelize / devoxelize on lattice's CUDA kernels (cuda/points.cu) against the CPU route.

Each comparison makes the same call with ``device="gpu"`` and ``device="cpu"`` (separate
tensors, so nothing built on one device is reused by the other). Integer results (voxels,
inverse, counts, voxel rows) and max / first features compare exactly; sums and means at
float32 1e-5 relative (the GPU adds in float32 with atomics, the CPU route in float64),
float16 3e-3 (one half-precision ulp); devoxelize weights at 1e-6 (the kernel follows the
NumPy operation order). Error cases raise the CPU route's exception, word for word.

The GPU tests skip where MLX has no CUDA device; the routing and ``explain`` tests at the
end run everywhere (a fake CUDA capability: ``explain`` runs no kernel).
"""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
from conftest import point_cloud
from typer.testing import CliRunner

import lattice
import lattice.routing.points as routing_points
from lattice.core.kernel import KernelSpec
from lattice.ops import build_point_voxel_map, devoxelize, voxelize
from lattice.routing import Capability, Tier
from lattice.routing.points import PointsRequest, route_points
from lattice_cli.main import app

HAS_CUDA = hasattr(mx, "cuda") and mx.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device in this process")

REDUCTIONS = ("mean", "sum", "max", "first", "count")
TOL = {mx.float32: 1e-5, mx.float16: 3e-3}


KINDS = ["empty", "single", "random", "line", "on_boundaries", "far"]
SETTINGS = [
    {"voxel_size": 0.5},
    {"voxel_size": 0.1, "origin": -0.05},
    {"voxel_size": (0.5, 1.0, 0.25), "origin": (0.1, -0.2, 0.3)},
]


def _batches(n: int) -> np.ndarray:
    return (np.arange(n) % 3 == 0).astype(np.int32) * 2  # members 0 and 2, member 1 empty


def _feats(n: int, c: int = 3, dtype=mx.float32, seed: int = 1) -> mx.array:
    f = np.random.default_rng(seed).normal(size=(n, c)).astype(np.float32)
    f[::4] = np.round(f[::4])  # ties for max
    return mx.array(f).astype(dtype)


def _both(fn):
    """fn(device) on the GPU and on the CPU."""
    return fn("gpu"), fn("cpu")


def _same_error(fn):
    """fn(device) raises on the GPU exactly what it raises on the CPU."""
    try:
        fn("cpu")
    except (ValueError, OverflowError, TypeError) as err:
        cpu_err = err
    else:
        raise AssertionError("the CPU route raised nothing")
    with pytest.raises(type(cpu_err)) as gpu_err:
        fn("gpu")
    assert str(gpu_err.value) == str(cpu_err)


def _assert_feats(got: mx.array, ref: mx.array, reduction: str, dtype) -> None:
    a, b = np.array(got.astype(mx.float32)), np.array(ref.astype(mx.float32))
    if reduction in ("max", "first", "count"):
        np.testing.assert_array_equal(a, b)
    else:
        tol = TOL[dtype]
        np.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, float(np.abs(b).max(initial=0))))


# ---- voxelize ------------------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(f"{k}={v}" for k, v in s.items()))
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("batched", [False, True])
def test_gpu_voxelize_equals_the_cpu_route(kind, settings, batched):
    pts = point_cloud(kind)
    batch = _batches(len(pts)) if batched else None
    for dtype in (mx.float32, mx.float16):
        f = _feats(len(pts), dtype=dtype)
        for reduction in REDUCTIONS:
            feats = None if reduction == "count" else f
            (g, gi), (c, ci) = _both(
                lambda d, feats=feats, reduction=reduction: voxelize(
                    pts,
                    feats,
                    **settings,
                    batch_indices=batch,
                    reduction=reduction,
                    return_index=True,
                    device=d,
                )
            )
            np.testing.assert_array_equal(np.array(g.coords), np.array(c.coords))
            np.testing.assert_array_equal(np.array(gi), np.array(ci))
            assert g.feats.dtype == c.feats.dtype and g.feats.shape == c.feats.shape
            _assert_feats(g.feats, c.feats, reduction, dtype)


@needs_cuda
def test_gpu_voxelize_keeps_the_counts_inverse_and_table_of_the_cpu_quantizer():
    pts = point_cloud("random")
    batch = _batches(len(pts))
    (g, gi), (c, ci) = _both(
        lambda d: voxelize(
            pts, None, 0.5, batch_indices=batch, reduction="count", return_index=True, device=d
        )
    )
    counts = np.bincount(np.array(ci), minlength=c.active_count)
    np.testing.assert_array_equal(np.array(g.feats)[:, 0], counts)
    assert np.array(g.batch_counts).tolist() == np.array(c.batch_counts).tolist()
    assert np.array(g.batch_counts)[1] == 0
    # the GPU table of the voxels is registered: a GPU relation probes it without hashing again
    assert g.coord_key.id in g.coord_manager._gpu_tables
    spec = KernelSpec(3, op="t")
    rg = g.coord_manager.relation("submanifold", g.coord_key, spec, device="gpu")
    rc = c.coord_manager.relation("submanifold", c.coord_key, spec, device="cpu")
    assert rg.route.backend == "cuda"
    np.testing.assert_array_equal(np.array(rg.neighbor_map), np.array(rc.neighbor_map))
    # and its CPU table is built when a CPU route asks
    np.testing.assert_array_equal(np.array(g.coord_manager.table(g.coord_key).coords), np.array(c.coords))


@needs_cuda
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_gpu_voxelize_with_active_rows_stride_and_origin(reduction):
    pts = point_cloud("random")
    pts[-5:] = np.nan  # past active_rows: never read
    batch = _batches(len(pts))
    feats = None if reduction == "count" else _feats(len(pts))
    (g, gi), (c, ci) = _both(
        lambda d: voxelize(
            pts,
            feats,
            (0.4, 0.3, 0.5),
            batch_indices=batch,
            origin=(-1.0, 0.25, 2.0),
            active_rows=len(pts) - 5,
            reduction=reduction,
            stride=2,
            return_index=True,
            device=d,
        )
    )
    assert g.stride == c.stride == (2, 2, 2)
    np.testing.assert_array_equal(np.array(g.coords), np.array(c.coords))
    np.testing.assert_array_equal(np.array(gi), np.array(ci))
    _assert_feats(g.feats, c.feats, reduction, mx.float32)


@needs_cuda
def test_gpu_voxelize_takes_points_in_half_precision_and_mlx_arrays():
    pts = mx.array(point_cloud("random"))
    for dtype in (mx.float16, mx.bfloat16):
        p = pts.astype(dtype)
        g, c = _both(lambda d, p=p: voxelize(p, None, 0.25, reduction="count", device=d))
        np.testing.assert_array_equal(np.array(g.coords), np.array(c.coords))
        np.testing.assert_array_equal(np.array(g.feats), np.array(c.feats))
    assert (
        lattice.explain(voxelize, pts, None, 0.5, reduction="count", device="gpu").name
        == "cuda.hash_quantize"
    )


@needs_cuda
def test_gpu_voxelize_errors_are_the_cpu_errors():
    pts = point_cloud("random")[:50].copy()
    feats = _feats(50)
    nan = pts.copy()
    nan[7, 1] = np.nan
    _same_error(lambda d: voxelize(nan, feats, 0.5, device=d))
    inf = pts.copy()
    inf[3, 2] = np.inf
    _same_error(lambda d: voxelize(inf, feats, 0.5, device=d))
    _same_error(lambda d: voxelize(pts * 1e7, feats, 1e-3, device=d))  # indices past int32
    neg = _batches(50)
    neg[11] = -1
    _same_error(lambda d: voxelize(pts, feats, 0.5, batch_indices=neg, device=d))
    # indices within int32 whose box does not pack into the CPU core's 64-bit key
    wide = np.array([[-2e9, -2e9, -2e9], [2e9, 2e9, 2e9]], np.float32)
    _same_error(lambda d: voxelize(wide, np.ones((2, 1), np.float32), 1.0, device=d))


@needs_cuda
@pytest.mark.parametrize("reduction", ["mean", "sum", "max", "first"])
def test_gpu_voxelize_gradients_equal_the_cpu_route(reduction):
    pts = point_cloud("random")[:800]
    batch = _batches(len(pts))
    feats = _feats(len(pts), c=4)
    x_cpu = voxelize(pts, feats, 0.5, batch_indices=batch, reduction=reduction, device="cpu")
    wt = mx.array(np.random.default_rng(3).normal(size=(x_cpu.active_count, 4)).astype(np.float32))

    def loss(f, d):
        return (voxelize(pts, f, 0.5, batch_indices=batch, reduction=reduction, device=d).feats * wt).sum()

    g, r = _both(lambda d: mx.grad(lambda f: loss(f, d))(feats))
    np.testing.assert_allclose(np.array(g), np.array(r), rtol=1e-5, atol=1e-6)


# ---- devoxelize ----------------------------------------------------------------------------


def _scene(seed=0, stride=1, voxel=0.5, c=3, dtype=mx.float32):
    """Query points with their batches, and on each device the voxels of two thirds of
    them: the others fall in partial corner sets or in no voxel (the last 10, far away)."""
    pts = np.concatenate([point_cloud("random", seed), np.full((10, 3), 50.0, np.float32)])
    batch = _batches(len(pts))
    n = len(pts) - 10
    f = _feats(n, c=c, dtype=dtype)
    keep = slice(0, 2 * n // 3)
    make = lambda d: voxelize(  # noqa: E731
        pts[keep], f[keep], voxel * stride, batch_indices=batch[keep], stride=stride, device=d
    )
    return pts, batch, make("gpu"), make("cpu")


@needs_cuda
@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("dtype", [mx.float32, mx.float16])
def test_gpu_devoxelize_equals_the_cpu_route(interpolation, stride, dtype):
    pts, batch, xg, xc = _scene(stride=stride, dtype=dtype)
    kw = dict(batch_indices=batch, origin=0.0, interpolation=interpolation)
    mg = build_point_voxel_map(pts, xg, 0.5, **kw, device="gpu")
    mc = build_point_voxel_map(pts, xc, 0.5, **kw, device="cpu")
    rows = np.array(mc.rows)
    np.testing.assert_array_equal(np.array(mg.rows), rows)
    np.testing.assert_allclose(np.array(mg.weights), np.array(mc.weights), rtol=1e-6, atol=1e-7)
    assert (rows < 0).all(axis=1).any() and (rows >= 0).all(axis=1).any()  # points off and inside
    if interpolation == "linear":
        assert ((rows < 0).any(axis=1) & (rows >= 0).any(axis=1)).any()  # partial corner sets
    got = devoxelize(pts, xg, 0.5, **kw, device="gpu")
    ref = devoxelize(pts, xc, 0.5, **kw, device="cpu")
    tol = TOL[dtype] * 10 if dtype == mx.float16 else 1e-5
    np.testing.assert_allclose(
        np.array(got.astype(mx.float32)), np.array(ref.astype(mx.float32)), rtol=tol, atol=tol
    )
    # the same map passed in, and a voxel tensor made on the CPU (its GPU table built on first use)
    again = devoxelize(pts, xc, 0.5, **kw, point_voxel_map=mg, device="gpu")
    np.testing.assert_allclose(
        np.array(again.astype(mx.float32)), np.array(ref.astype(mx.float32)), rtol=tol, atol=tol
    )
    on_cpu_set = build_point_voxel_map(pts, xc, 0.5, **kw, device="gpu")
    np.testing.assert_array_equal(np.array(on_cpu_set.rows), rows)


@needs_cuda
def test_gpu_devoxelize_with_per_axis_voxels_origin_and_half_points():
    pts = point_cloud("random")
    vs, org = (0.4, 0.3, 0.5), (-1.0, 0.25, 2.0)
    xg, xc = _both(lambda d: voxelize(pts[::2], _feats(len(pts))[::2], vs, origin=org, device=d))
    for p in (pts, mx.array(pts).astype(mx.float16), mx.array(pts).astype(mx.bfloat16)):
        for interpolation in ("linear", "nearest"):
            mg = build_point_voxel_map(p, xg, vs, origin=org, interpolation=interpolation, device="gpu")
            mc = build_point_voxel_map(p, xc, vs, origin=org, interpolation=interpolation, device="cpu")
            np.testing.assert_array_equal(np.array(mg.rows), np.array(mc.rows))
            np.testing.assert_allclose(np.array(mg.weights), np.array(mc.weights), rtol=1e-6, atol=1e-7)


@needs_cuda
def test_gpu_devoxelize_on_empty_and_single_inputs_and_far_points():
    pts = point_cloud("random")[:20]
    xg, xc = _both(lambda d: voxelize(pts, _feats(20), 0.5, device=d))
    empty = np.zeros((0, 3), np.float32)
    assert devoxelize(empty, xg, 0.5, device="gpu").shape == (0, 3)
    far = np.full((4, 3), 1e4, np.float32)
    for interpolation in ("linear", "nearest"):
        m = build_point_voxel_map(far, xg, 0.5, interpolation=interpolation, device="gpu")
        assert (np.array(m.rows) == -1).all() and (np.array(m.weights) == 0).all()
        assert not np.array(devoxelize(far, xg, 0.5, interpolation=interpolation, device="gpu")).any()
    one = pts[:1]
    g, c = _both(lambda d: devoxelize(one, xg if d == "gpu" else xc, 0.5, device=d))
    np.testing.assert_allclose(np.array(g), np.array(c), rtol=1e-5, atol=1e-6)
    no_voxels = voxelize(empty, np.zeros((0, 3), np.float32), 0.5, device="gpu")
    out = devoxelize(pts, no_voxels, 0.5, device="gpu")
    assert out.shape == (20, 3) and not np.array(out).any()


@needs_cuda
def test_gpu_devoxelize_errors_are_the_cpu_errors():
    pts = point_cloud("random")[:30].copy()
    x = voxelize(pts, _feats(30), 0.5, device="cpu")
    nan = pts.copy()
    nan[4, 0] = np.nan
    for interpolation in ("linear", "nearest"):
        _same_error(lambda d, i=interpolation: devoxelize(nan, x, 0.5, interpolation=i, device=d))
    _same_error(lambda d: devoxelize(pts * 1e7, x, 1e-3, device=d))  # corner indices past int32
    # nearest past int32: the CPU route decides, the GPU route hands it over and agrees
    far = np.array([[3e9, 0.0, 0.0]], np.float32)
    g, c = _both(lambda d: build_point_voxel_map(far, x, 1.0, interpolation="nearest", device=d))
    np.testing.assert_array_equal(np.array(g.rows), np.array(c.rows))
    _same_error(lambda d: devoxelize(pts, x, 0.5, batch_indices=np.zeros(5, np.int32), device=d))


@needs_cuda
@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
def test_gpu_devoxelize_gradient_equals_the_cpu_route(interpolation):
    pts, batch, xg, xc = _scene(seed=2, c=4)
    wt = mx.array(np.random.default_rng(5).normal(size=(len(pts), 4)).astype(np.float32))

    def loss(x, v, d):
        y = devoxelize(
            pts, x.replace(feats=v), 0.5, batch_indices=batch, interpolation=interpolation, device=d
        )
        return (y * wt).sum()

    g = mx.grad(lambda v: loss(xg, v, "gpu"))(xg.feats)
    r = mx.grad(lambda v: loss(xc, v, "cpu"))(xc.feats)
    np.testing.assert_allclose(np.array(g), np.array(r), rtol=1e-5, atol=1e-6)


# ---- routing and explain (run everywhere) ---------------------------------------------------

CUDA = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
METAL = Capability((Tier.CPU, Tier.GPU_METAL), ("cpu",), "metal")
CPU_ONLY = Capability((Tier.CPU,), ("cpu",))


def _req(op="voxelize", **kw):
    return PointsRequest(op, 100, 3, **({"device": "gpu"} | kw))


@pytest.mark.parametrize("op, algorithm", [("voxelize", "hash_quantize"), ("devoxelize", "corner_lookup")])
def test_gpu_requests_take_the_cuda_kernels_under_the_cuda_tier(op, algorithm):
    route = route_points(_req(op), CUDA)
    assert route.name == f"cuda.{algorithm}" and not route.rejected
    assert route.facts["device"] == "gpu" and route.facts["points_dtype"] == "float32"
    for dtype in ("float16", "bfloat16"):
        assert route_points(_req(op, points_dtype=dtype, dtype=dtype), CUDA).backend == "cuda"
    cpu = route_points(_req(op, device="cpu"), CUDA)
    assert cpu.backend == "cpu" and not cpu.rejected


@pytest.mark.parametrize("op", ["voxelize", "devoxelize"])
def test_the_cuda_route_is_rejected_with_its_reason(op):
    f64 = route_points(_req(op, points_dtype="float64"), CUDA)
    assert f64.backend == "cpu" and f64.rejected[0].backend == "cuda"
    assert "float64" in f64.rejected[0].predicate and "points are float64" in f64.rejected[0].predicate
    ints = route_points(_req(op, points_dtype="int64"), CUDA)
    assert ints.backend == "cpu" and "points are int64" in ints.rejected[0].predicate
    feats64 = route_points(_req(op, dtype="float64"), CUDA)
    assert feats64.backend == "cpu" and "features are float64" in feats64.rejected[0].predicate
    metal = route_points(_req(op), METAL)
    assert metal.backend == "cpu" and metal.rejected[0].backend == "metal"
    assert "never run on Apple hardware" in metal.rejected[0].predicate
    none = route_points(_req(op), CPU_ONLY)
    assert none.backend == "cpu" and none.rejected[0].predicate == "no GPU device in this process"


@pytest.fixture
def fake_cuda(monkeypatch):
    """The CUDA tier as the point routes see it (plans only: explain runs no kernel)."""
    monkeypatch.setattr(routing_points, "capability", lambda: CUDA)


def test_explain_names_the_cuda_routes_without_running_them(fake_cuda):
    pts = point_cloud("random")[:100]
    feats = _feats(100)
    route = lattice.explain(voxelize, pts, feats, 0.5, reduction="max", device="gpu")
    assert route.name == "cuda.hash_quantize" and "max segment reduction" in route.reason
    assert route.facts["n_points"] == 100 and route.facts["channels"] == 3
    assert lattice.explain(voxelize, pts.astype(np.float64), feats, 0.5, device="gpu").name == (
        "cpu.hash_quantize_segment_reduce"
    )
    x = voxelize(pts, feats, 0.5, device="cpu")
    route = lattice.explain("devoxelize", pts, x, 0.5, interpolation="nearest", device="gpu")
    assert route.name == "cuda.corner_lookup" and "the voxel holding it" in route.reason
    assert lattice.explain(devoxelize, pts, x, 0.5, device="cpu").name == "cpu.hash_corner_lookup"


def test_cli_explain_names_the_point_routes(fake_cuda, monkeypatch):
    import lattice_cli.commands.explain as explain_cmd

    monkeypatch.setattr(explain_cmd, "gpu_available", lambda: True)  # the faked CUDA device
    runner = CliRunner()
    for op, route in (("voxelize", "cuda.hash_quantize"), ("devoxelize", "cuda.corner_lookup")):
        res = runner.invoke(app, ["explain", op, "--device", "gpu", "--rows", "500", "--json"])
        assert res.exit_code == 0, res.output
        out = json.loads(res.output)
        assert out["route"] == route and out["facts"]["n_points"] == 500
        res = runner.invoke(app, ["explain", op, "--device", "cpu", "--rows", "500"])
        assert res.exit_code == 0 and "cpu.hash_" in res.output


def test_voxelize_runs_the_route_explain_reports_on_the_cpu(monkeypatch):
    import lattice.backends.cpu.coords as cpu_coords

    seen = []
    real = cpu_coords.native_quantize
    monkeypatch.setattr(cpu_coords, "native_quantize", lambda inputs: seen.append("cpu") or real(inputs))
    pts, feats = point_cloud("line"), _feats(301)
    route = lattice.explain(voxelize, pts, feats, 0.5, device="cpu")
    voxelize(pts, feats, 0.5, device="cpu")
    assert route.name == "cpu.hash_quantize_segment_reduce" and seen == ["cpu"]


def test_devoxelize_onto_no_voxels_gives_zeros_on_the_cpu_route():
    empty = voxelize(np.zeros((0, 3), np.float32), np.zeros((0, 2), np.float32), 0.5, device="cpu")
    out = devoxelize(point_cloud("line")[:5], empty, 0.5, device="cpu")
    assert out.shape == (5, 2) and not np.array(out).any()
