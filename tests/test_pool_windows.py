"""The window_reduce route: local pooling whose windows are the cells of the downsample
(kernel == stride, even sizes or 1, no padding, dilation 1) reduces the downsample's
window map instead of building and sorting the forward relation.

The window map (``_ext.downsample``) is checked against the NumPy oracle
``reference.pool.window_map``; the route against the relation route it replaces
(``cpu.segment_reduce``) bit for bit -- values, gradients, second order -- on every
distribution of ``conftest.CLOUDS`` (empty, single point, a batch with an empty member,
...), a grid and the SemanticKITTI scan; the fresh path (new tensor) against the cached
one. Also: the route is named by ``explain`` and the CLI, and coordinate sets whose rows
arrive strictly sorted defer their hash table to the first lookup.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from reference import coords as rc
from reference import pool as rp
from test_pool import ALL_CLOUDS, cloud_coords, scan_cloud
from typer.testing import CliRunner

from lattice import _ext, ops
from lattice.backends.cpu import pool as cpu_pool
from lattice.core import KernelSpec, RelationKind, SparseTensor, lookup_coords
from lattice.routing import Capability, PoolRequest, Tier, route_pool
from lattice.routing.explain import explain
from lattice_cli.main import app

# The CPU window_reduce route and its equality with segment_reduce; with a GPU as MLX's
# default device pooling takes cuda.map_pool (tested in test_cuda_routes.py).
pytestmark = pytest.mark.usefixtures("cpu_device")

MODES = ("sum", "avg", "max")
STRIDES = [(2, 2, 2), (1, 2, 3), (2, 1, 2), (4, 4, 2), (3, 3, 3)]
CELL_KERNELS = [2, (2, 1, 2), (4, 2, 2)]  # kernel == stride, even sizes or 1
BACKWARD = "input_exclusive_gather"


def _ids(items):
    return [str(g).replace(" ", "") for g in items]


def special_features(n: int, c: int = 4, seed: int = 0) -> np.ndarray:
    """Normal values with ties, signed zeros, infinities and NaNs sprinkled in."""
    rng = np.random.default_rng(seed)
    f = rng.standard_normal((n, c)).astype(np.float32)
    pick = rng.random((n, c))
    f[pick < 0.25] = np.round(f[pick < 0.25])  # ties, and +-0.0 from rounding
    f[(pick >= 0.25) & (pick < 0.3)] = -0.0
    f[(pick >= 0.3) & (pick < 0.32)] = np.inf
    f[(pick >= 0.32) & (pick < 0.34)] = -np.inf
    f[(pick >= 0.34) & (pick < 0.36)] = np.nan
    return f


def _bits(a: mx.array) -> np.ndarray:
    return np.asarray(a.astype(mx.float32)).view(np.uint32)


def _both_routes(x: SparseTensor, size):
    spec = KernelSpec(size, size)
    windows = x.coord_manager.windows(x.coord_key, spec)
    rel = x.coord_manager.relation(RelationKind.FORWARD, x.coord_key, spec)
    assert windows is not None and windows.out_key == rel.out_key
    return windows, rel


# ---- the window map ------------------------------------------------------------------------


@pytest.mark.parametrize("stride", STRIDES, ids=_ids(STRIDES))
@pytest.mark.parametrize("name", ALL_CLOUDS)
def test_downsample_window_map_matches_oracle(name, stride):
    coords = cloud_coords(name)
    cells, inverse, rows, out = _ext.downsample(_ext.build_table(mx.array(coords), "test"), stride)
    ref_cells, ref_inverse, ref_rows, ref_out = rp.window_map(coords, stride)
    np.testing.assert_array_equal(np.asarray(cells.coords).reshape(-1, 4), ref_cells)
    np.testing.assert_array_equal(np.asarray(inverse), ref_inverse)
    np.testing.assert_array_equal(np.asarray(rows), ref_rows)
    np.testing.assert_array_equal(np.asarray(out), ref_out)


def test_window_map_on_the_real_scan(kitti_points):
    coords = scan_cloud(kitti_points, 12.0)
    cells, inverse, rows, out = _ext.downsample(_ext.build_table(mx.array(coords), "test"), (2, 2, 2))
    ref = rp.window_map(coords, 2)
    for got, want in zip((np.asarray(cells.coords), inverse, rows, out), ref, strict=True):
        np.testing.assert_array_equal(np.asarray(got), want)


def test_cells_of_more_than_32_points_have_no_window_map():
    coords = cloud_coords("dense_block")
    _, _, rows, out = _ext.downsample(_ext.build_table(mx.array(coords), "test"), (4, 4, 4))
    assert rows is None and out is None
    x = SparseTensor(coords, mx.array(special_features(len(coords))))
    assert x.coord_manager.windows(x.coord_key, KernelSpec(4, 4)) is None
    assert explain(ops.max_pool3d, x, kernel_size=4, stride=4).name == "cpu.segment_reduce"


def test_manager_windows_only_for_cell_windows():
    x = SparseTensor(cloud_coords("batched"), mx.zeros((len(cloud_coords("batched")), 1)))
    m, key = x.coord_manager, x.coord_key
    for spec in (
        KernelSpec(3, 3),
        KernelSpec(3, 2, 1),
        KernelSpec(2, 2, 1),
        KernelSpec(2, 2, 0, 2),
        KernelSpec(2, 1),
    ):
        assert not spec.cell_windows and m.windows(key, spec) is None
    w = m.windows(key, KernelSpec(2, 2))
    assert KernelSpec(2, 2).cell_windows and w.out_key == m.downsample(key, 2)
    assert m.windows(key, KernelSpec(2, 2)) is w  # cached with the downsample
    ident = m.windows(key, KernelSpec(1, 1))
    assert ident.out_key == key
    np.testing.assert_array_equal(np.asarray(ident.in_rows), np.arange(x.active_count))


# ---- window_reduce against segment_reduce, bit for bit --------------------------------------


@pytest.mark.parametrize("dtype", [mx.float32, mx.float16, mx.bfloat16], ids=["f32", "f16", "bf16"])
@pytest.mark.parametrize("size", CELL_KERNELS, ids=_ids(CELL_KERNELS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ALL_CLOUDS)
def test_window_reduce_equals_segment_reduce(name, mode, size, dtype):
    coords = cloud_coords(name)
    x = SparseTensor(coords, mx.array(special_features(len(coords))).astype(dtype))
    windows, rel = _both_routes(x, size)
    a = cpu_pool.window_reduce(x.feats, windows, mode, backward=BACKWARD)
    b = cpu_pool.segment_reduce(x.feats, rel, mode, backward=BACKWARD)
    assert a.dtype == dtype and a.shape == b.shape
    np.testing.assert_array_equal(_bits(a), _bits(b))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", ["batched", "dense_block", "random_sparse", "single", "empty"])
def test_window_reduce_gradients_equal_segment_reduce(name, mode):
    coords = cloud_coords(name)
    f = mx.array(np.random.default_rng(1).integers(-2, 3, (len(coords), 3)).astype(np.float32))  # ties
    x = SparseTensor(coords, f)
    windows, rel = _both_routes(x, 2)
    g = mx.array(np.random.default_rng(2).standard_normal((windows.out_count, 3)).astype(np.float32))
    v = mx.array(np.random.default_rng(3).standard_normal(f.shape).astype(np.float32))

    def first(reduce):
        return mx.grad(lambda ff: (reduce(ff) * g).sum())(f)

    def second(reduce):  # d/dg <d/dx sum(pool(x) * g), v>: the VJP of the backward primitive
        return mx.grad(lambda gg: (mx.grad(lambda ff: (reduce(ff) * gg).sum())(f) * v).sum())(g)

    win = lambda ff: cpu_pool.window_reduce(ff, windows, mode, backward=BACKWARD)  # noqa: E731
    seg = lambda ff: cpu_pool.segment_reduce(ff, rel, mode, backward=BACKWARD)  # noqa: E731
    np.testing.assert_array_equal(_bits(first(win)), _bits(first(seg)))
    np.testing.assert_array_equal(_bits(second(win)), _bits(second(seg)))


def test_window_edges_in_any_order_pool_the_same():
    coords = cloud_coords("dense_block")
    f = mx.array(np.random.default_rng(4).standard_normal((len(coords), 5)).astype(np.float32))
    x = SparseTensor(coords, f)
    w = x.coord_manager.windows(x.coord_key, KernelSpec(2, 2))
    perm = mx.array(np.random.default_rng(5).permutation(w.edge_count).astype(np.int32))
    for mode in MODES:
        grouped = _ext.sparse_pool(f, w.in_rows, w.out_rows, [0, w.edge_count], w.out_count, mode, BACKWARD)
        shuffled = _ext.sparse_pool(
            f, w.in_rows[perm], w.out_rows[perm], [0, w.edge_count], w.out_count, mode, BACKWARD
        )
        np.testing.assert_allclose(np.asarray(shuffled), np.asarray(grouped), rtol=1e-6, atol=1e-6)


# ---- the fresh path, the cached path, the real scan ----------------------------------------


def _kitti_voxels(points: np.ndarray, voxel: float) -> np.ndarray:
    v = np.unique(np.floor(points[:, :3].astype(np.float64) / voxel).astype(np.int32), axis=0)
    return np.concatenate([np.zeros((len(v), 1), np.int32), v], axis=1)


@pytest.mark.parametrize("order", ["sorted", "shuffled"])
def test_fresh_and_cached_paths_equal_on_the_scan(kitti_points, order):
    coords = _kitti_voxels(kitti_points, 0.05)  # the benchmark's input: 94,444 voxels, rows sorted
    if order == "shuffled":
        coords = coords[np.random.default_rng(0).permutation(len(coords))]
    coords_mx = mx.array(coords)
    feats = mx.array(special_features(len(coords), 8, seed=7))
    for mode in MODES:
        fresh = [ops.pool3d(SparseTensor(coords_mx, feats), mode=mode) for _ in range(2)]
        x = SparseTensor(coords_mx, feats)
        cached = [ops.pool3d(x, mode=mode) for _ in range(2)]
        windows, rel = _both_routes(x, 2)
        relation = cpu_pool.segment_reduce(feats, rel, mode, backward=BACKWARD)
        for y in (*fresh, *cached):
            np.testing.assert_array_equal(np.asarray(y.coords), np.asarray(rel.out_coords))
            np.testing.assert_array_equal(_bits(y.feats), _bits(relation))
    crop = np.flatnonzero((np.abs(coords[:, 1:3]) < 100).all(axis=1) & (np.abs(coords[:, 3] + 10) < 30))
    assert len(crop) > 5000
    f = np.random.default_rng(9).standard_normal((len(crop), 8)).astype(np.float32)
    for mode in MODES:
        ref_coords, ref_feats = rp.local_pool(coords[crop], f, mode)
        y = ops.pool3d(SparseTensor(coords[crop], mx.array(f)), mode=mode)
        want = rp.align(np.asarray(y.coords), ref_coords, ref_feats)
        np.testing.assert_allclose(np.asarray(y.feats), want, rtol=1e-5, atol=1e-5)


def test_pooling_empty_and_single_point():
    for name in ("empty", "single"):
        coords = cloud_coords(name)
        x = SparseTensor(coords, mx.ones((len(coords), 3)))
        for mode in MODES:
            y = ops.pool3d(x, mode=mode)
            assert y.shape == (len(coords), 3) and y.stride == (2, 2, 2)
            np.testing.assert_array_equal(np.asarray(y.coords).reshape(-1, 4), rc.downsample(coords, 2))


# ---- routes ----------------------------------------------------------------------------------


def test_route_names_window_reduce():
    x = SparseTensor(cloud_coords("batched"), mx.zeros((len(cloud_coords("batched")), 4)))
    route = explain(ops.max_pool3d, x)
    assert route.name == "cpu.window_reduce" and route.facts["windows"] is True
    assert route.facts["backward"] == "cpu.input_exclusive_gather"
    assert [r.algorithm for r in route.rejected] == ["segment_reduce"]
    assert explain("avg_pool3d", x, kernel_size=(2, 1, 2), stride=(2, 1, 2)).name == "cpu.window_reduce"
    for kwargs in (
        {"kernel_size": 3},
        {"kernel_size": 3, "stride": 3},
        {"padding": 1},
        {"dilation": 2},
        {"kernel_size": 2, "stride": 1},
    ):
        route = explain(ops.max_pool3d, x, **kwargs)
        assert route.name == "cpu.segment_reduce" and route.facts["windows"] is False
        assert "window_reduce" in [r.algorithm for r in route.rejected]


def test_route_function_is_pure():
    req = PoolRequest(
        op="max_pool3d",
        mode="max",
        dtype="float32",
        channels=32,
        kernel_size=(2, 2, 2),
        stride=(2, 2, 2),
        dilation=(1, 1, 1),
        n_in=100,
        windows=True,
    )
    assert route_pool(req) == route_pool(req) and route_pool(req).name == "cpu.window_reduce"
    gpu = route_pool(PoolRequest(**{**req.__dict__, "device": "gpu"}), Capability((Tier.CPU,), ("cpu",)))
    assert gpu.name == "cpu.window_reduce" and gpu.rejected[0].backend.startswith("gpu")


def test_cli_explain_shows_the_route():
    res = CliRunner().invoke(app, ["explain", "max_pool3d", "-k", "2", "-s", "2", "--rows", "2000"])
    assert res.exit_code == 0, res.output
    assert "cpu.window_reduce" in res.output and "cpu.segment_reduce" in res.output


# ---- sorted rows defer the input's hash table ------------------------------------------------


def test_sorted_rows_defer_the_hash_table():
    rng = np.random.default_rng(8)
    coords = np.unique(
        np.concatenate([rng.integers(0, 2, (300, 1)), rng.integers(-9, 10, (300, 3))], 1), axis=0
    )
    coords = coords.astype(np.int32)
    x = SparseTensor(coords, mx.ones((len(coords), 2)))
    table = x.coord_manager.table(x.coord_key)
    assert not table.hashed  # strictly increasing rows are unique without hashing
    ops.max_pool3d(x)  # the window route reads the rows only
    assert not table.hashed
    queries = np.concatenate([coords[::7], coords[:20] + np.array([0, 1, 0, 0], np.int32)])
    np.testing.assert_array_equal(np.asarray(lookup_coords(x, queries)), rc.lookup(coords, queries))
    assert table.hashed
    shuffled = SparseTensor(coords[rng.permutation(len(coords))], mx.ones((len(coords), 2)))
    assert shuffled.coord_manager.table(shuffled.coord_key).hashed


@pytest.mark.parametrize(
    "coords, message",
    [
        ([[0, 0, 0, 0], [0, 0, 0, 1], [0, 0, 0, 1]], r"rows 1 and 2 both hold \(0, 0, 0, 1\)"),  # sorted
        ([[0, 5, 0, 0], [0, 1, 2, 3], [0, 1, 2, 3], [0, 5, 0, 0]], r"rows 1 and 2 both hold \(0, 1, 2, 3\)"),
    ],
)
def test_duplicates_still_raise(coords, message):
    with pytest.raises(ValueError, match=r"^\[SparseTensor\] duplicate active coordinates: " + message):
        SparseTensor(np.array(coords, np.int32), mx.ones((len(coords), 1)))
