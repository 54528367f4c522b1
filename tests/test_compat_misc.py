"""Names of the documented mlx-lattice 0.6.3 API that lattice now serves (issue 17):
coordinate validators, sparse tensor components, the coordinate manager's documented
methods, quantized weight layouts, voxelizing with a precomputed quantization, and the
documented argument values of softplus, batch_norm and the point / voxel functions.

Each is tested as the documentation states it (and, where lattice computes something new,
against a slow NumPy oracle), through the documented ``mlx_lattice`` paths.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import lattice
import lattice.core
import mlx_lattice
from mlx_lattice.core.coords.validation import validate_coord_pair, validate_coords


def _same(a, b) -> None:
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---- validators ---------------------------------------------------------------------------------


def test_validators_are_lattice_s_in_every_documented_module():
    from mlx_lattice.core.coords import validate_coords as from_coords

    assert validate_coords is from_coords is lattice.core.validate_coords
    assert validate_coord_pair is lattice.core.validate_coord_pair


@pytest.mark.parametrize("dtype", [mx.int32, mx.int64])
def test_validate_coords_accepts_int32_and_int64(dtype):
    for n in (0, 1, 7):
        assert validate_coords(mx.zeros((n, 4), dtype)) is None
    assert validate_coord_pair(mx.zeros((3, 4), dtype), mx.zeros((0, 4), dtype)) is None


@pytest.mark.parametrize("shape", [(4,), (3, 3), (2, 5), (1, 4, 1), ()])
def test_validate_coords_shape(shape):
    with pytest.raises(ValueError, match=r"coords must have shape \(N, 4\)\."):
        validate_coords(mx.zeros(shape, mx.int32))
    with pytest.raises(ValueError, match=r"queries must have shape \(N, 4\)\."):
        validate_coords(mx.zeros(shape, mx.int32), name="queries")


@pytest.mark.parametrize("dtype", [mx.float32, mx.int16, mx.uint32, mx.bool_])
def test_validate_coords_dtype(dtype):
    with pytest.raises(ValueError, match=r"coords must be int32 or int64\."):
        validate_coords(mx.zeros((2, 4), dtype))


def test_validate_coords_checks_the_shape_first():
    with pytest.raises(ValueError, match=r"must have shape"):
        validate_coords(mx.zeros((2, 3), mx.float32))


def test_validate_coords_needs_an_mx_array():
    with pytest.raises(TypeError, match=r"\[validate_coords\] coords must be an mx.array, got ndarray"):
        validate_coords(np.zeros((2, 4), np.int32))


def test_validate_coord_pair():
    a, b = mx.zeros((2, 4), mx.int32), mx.zeros((3, 4), mx.int64)
    with pytest.raises(ValueError, match=r"coordinate arrays must have matching dtype\."):
        validate_coord_pair(a, b)
    with pytest.raises(ValueError, match=r"^\[validate_coords\] lhs must have shape"):
        validate_coord_pair(a[:, :3], a)
    with pytest.raises(ValueError, match=r"^\[validate_coords\] target must be int32 or int64"):
        validate_coord_pair(a, a.astype(mx.float32), rhs_name="target")


# ---- sparse tensor components ---------------------------------------------------------------------


def test_components_are_lattice_s_in_every_documented_module():
    from mlx_lattice.core import SparseTensorComponents as from_core
    from mlx_lattice.core.tensor import SparseTensorComponents as from_tensor

    assert (
        mlx_lattice.SparseTensorComponents is from_core is from_tensor is lattice.core.SparseTensorComponents
    )


def _padded_tensor():
    """A tensor whose buffer holds 2 rows past its 5 live ones (batches 0 and 2, batch 1 empty)."""
    coords = np.array(
        [[0, 0, 0, 0], [2, 1, 0, 0], [0, 3, 1, 2], [2, 1, 1, 1], [0, -4, 2, 0], [0, 0, 0, 0], [1, 9, 9, 9]],
        np.int32,
    )
    feats = np.arange(14, dtype=np.float32).reshape(7, 2)
    return mlx_lattice.SparseTensor(mx.array(coords), mx.array(feats), 2, active_rows=mx.array([5], mx.int32))


def test_export_components_keeps_the_buffers_and_the_count():
    x = _padded_tensor()
    c = x.export_components()
    assert isinstance(c, mlx_lattice.SparseTensorComponents)
    assert c.coords.shape == (7, 4) and c.feats.shape == (7, 2)
    assert c.active_rows.dtype == mx.int32 and c.active_rows.shape == (1,) and c.active_rows.tolist() == [5]
    assert c.stride == (2, 2, 2) and c.batch_counts == (3, 0, 2)
    y = mlx_lattice.SparseTensor.from_components(c)
    assert (y.capacity, y.active_count, y.stride) == (7, 5, (2, 2, 2))
    assert y.same_rows(x) and not y.same_coords(x) and y.coord_manager is not x.coord_manager
    _same(y.feats, x.feats)
    m = lattice.CoordinateManager()
    assert mlx_lattice.SparseTensor.from_components(c, coord_manager=m).coord_manager is m


def test_components_built_by_hand():
    coords = mx.array([[0, 1, 2, 3], [1, 0, 0, 0]], mx.int32)
    c = mlx_lattice.SparseTensorComponents(coords, mx.ones((2, 3)), mx.array([2], mx.int32))
    assert c.stride == (1, 1, 1) and c.batch_counts is None
    x = mlx_lattice.SparseTensor.from_components(c)
    assert x.active_count == 2
    _same(x.batch_counts, [1, 1])


def test_decomposed_coordinates_and_features_of_the_live_rows():
    x = _padded_tensor()
    coords, feats = x.decomposed_coordinates_and_features
    live_c, live_f = np.asarray(x.coords)[:5], np.asarray(x.feats)[:5]
    for b in range(3):  # oracle: the live rows of batch b, in row order
        rows = np.flatnonzero(live_c[:, 0] == b)
        _same(coords[b], live_c[rows, 1:])
        _same(feats[b], live_f[rows])
    assert coords[1].shape == (0, 3) and feats[1].shape == (0, 2)


# ---- the coordinate manager's documented methods ---------------------------------------------------


def _cloud(n: int, seed: int, batches: int = 2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    c = np.concatenate([rng.integers(0, batches, (n, 1)), rng.integers(-5, 5, (n, 3))], axis=1)
    _, first = np.unique(c, axis=0, return_index=True)
    return c[np.sort(first)].astype(np.int32)  # unique rows, in a random order


def _lookup_oracle(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    rows = {tuple(r): i for i, r in enumerate(source.tolist())}
    return np.array([rows.get(tuple(r), -1) for r in target.tolist()], np.int32)


def test_insert_coords_owns_coords_and_active_rows():
    from mlx_lattice.core.coords.manager import CoordinateManager

    m = CoordinateManager()
    c = mx.array(_cloud(30, 1))
    key = m.insert_coords(c)
    assert m.insert_coords(c) == key  # the same object again: the same key
    assert m.insert_coords(c, 2) != key and m.insert_coords(c, 2).stride == (2, 2, 2)
    assert m.insert_coords(mx.array(np.asarray(c))) != key  # another object: another set
    assert m.owns(key) and not CoordinateManager().owns(key) and not m.owns("key")
    _same(m.coords(key), c)
    live = m.active_rows(key)
    assert live.dtype == mx.int32 and live.shape == (1,) and live.tolist() == [c.shape[0]]
    part = m.insert_coords(c, 1, mx.array([7], mx.int32))
    assert part != key and m.active_rows(part).tolist() == [7]
    _same(m.coords(part), np.asarray(c)[:7])
    assert m.insert_coords(c.astype(mx.int64), 1, 0) is not None
    with pytest.raises(ValueError, match=r"coords must have shape \(N, 4\)\."):
        m.insert_coords(c[:, :3])
    with pytest.raises(ValueError, match=r"active_rows must be in \[0, "):
        m.insert_coords(c, 1, c.shape[0] + 1)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_manager_inverse_map_against_a_lookup_oracle(seed):
    m = lattice.CoordinateManager()
    a, b = _cloud(40, seed), _cloud(25, seed + 10)
    ka, kb = m.insert_coords(mx.array(a)), m.insert_coords(mx.array(b))
    _same(m.inverse_map(ka, kb), _lookup_oracle(a, b))
    _same(m.inverse_map(kb, ka), _lookup_oracle(b, a))
    _same(m.inverse_map(ka, ka), np.arange(len(a)))
    empty = m.insert_coords(mx.zeros((0, 4), mx.int32))
    assert m.inverse_map(ka, empty).shape == (0,)
    _same(m.inverse_map(empty, ka), np.full(len(a), -1))
    with pytest.raises(ValueError, match="does not belong to manager"):
        m.inverse_map(ka, lattice.CoordinateManager().insert_coords(mx.array(a)))


def _relation_facts(r):
    return (r.kind, r.spec, r.in_key, r.out_key, r.n_edges, r.n_out)


def test_manager_relations_are_the_manager_s_cached_relations():
    from lattice.core import KernelRelation as LatticeKernelRelation
    from lattice.core import KernelSpec
    from lattice.core.relation_documented import documented
    from mlx_lattice.core import KernelRelation

    m = lattice.CoordinateManager()
    key = m.insert_coords(mx.array(_cloud(60, 3)))
    coarse = m.downsample(key, 2)
    got = m.kernel_relation(key)  # documented defaults: kernel 3, stride 1
    cached = m.relation("forward", key, KernelSpec(3))
    # the documented form of the manager's cached relation, the same object every time; the
    # cached relation keeps lattice's class for lattice's callers
    assert isinstance(got, KernelRelation) and type(cached) is LatticeKernelRelation
    assert got is documented(cached) and got is m.kernel_relation(key) and got.n_kernels == 27
    assert got.counts.tolist() == [cached.edge_count, cached.out_count]
    assert m.kernel_relation(key, kernel_size=2, stride=2) is documented(
        m.relation("forward", key, KernelSpec(2, 2))
    )
    assert m.submanifold_kernel_relation(key, dilation=2) is documented(
        m.relation("submanifold", key, KernelSpec(3, 1, 0, 2))
    )
    assert m.generative_relation(coarse) is documented(m.relation("generative", coarse, KernelSpec(2, 2)))
    assert m.transposed_kernel_relation(coarse) is documented(
        m.relation("transposed", coarse, KernelSpec(2, 2))
    )
    target = m.target_kernel_relation(key, coarse, kernel_size=2, stride=2)
    assert target is documented(m.relation("target", key, KernelSpec(2, 2), coarse))
    # the same relations lattice's functions build from a tensor on that set
    x = lattice.SparseTensor(m.coords(key), mx.zeros((m.size(key), 1)), coord_key=key, coord_manager=m)
    assert _relation_facts(got) == _relation_facts(lattice.ops.kernel_relation(x, kernel_size=3, stride=1))
    with pytest.raises(
        ValueError, match=r"\[submanifold_kernel_relation\] submanifold kernels need an odd kernel_size"
    ):
        m.submanifold_kernel_relation(key, kernel_size=2)


# ---- quantized weight layouts and kernel_size --------------------------------------------------------


def test_quantized_weight_layout_is_the_documented_literal():
    import typing

    from mlx_lattice.core import QuantizedWeightLayout as from_core
    from mlx_lattice.core.quantized import LATTICE_LAYOUTS, QuantizedWeightLayout

    assert from_core is QuantizedWeightLayout
    assert set(typing.get_args(QuantizedWeightLayout)) == {"linear", "kernel_major", "dense_5d"}
    assert set(LATTICE_LAYOUTS) == set(typing.get_args(QuantizedWeightLayout))
    assert set(LATTICE_LAYOUTS.values()) == set(lattice.core.quantized.LAYOUTS.values())


@pytest.mark.parametrize(
    ("shape", "documented", "kernel_size"),
    [
        ((8, 12), "linear", (1, 1, 1)),
        ((27, 12, 8), "kernel_major", (27, 1, 1)),
        ((1, 12, 8), "kernel_major", (1, 1, 1)),
        ((8, 3, 2, 1, 12), "dense_5d", (3, 2, 1)),
        ((8, 1, 1, 1, 40), "dense_5d", (1, 1, 1)),
    ],
)
def test_quantized_weight_kernel_size_and_layout(shape, documented, kernel_size):
    from mlx_lattice.core.quantized import LATTICE_LAYOUTS

    w = mx.array(np.random.default_rng(9).normal(size=shape).astype(np.float32))
    q = mlx_lattice.quantize_weight(w)
    assert q.layout == LATTICE_LAYOUTS[documented]
    assert q.kernel_size == kernel_size and all(type(k) is int for k in q.kernel_size)
    assert q.is_pointwise is (kernel_size == (1, 1, 1))
    # the documented storage facts: K kernel rows (kernel volume), C_in padded to the group
    assert int(np.prod(q.kernel_size)) == (1 if len(shape) == 2 else q.kernel_volume)
    assert q.storage_in_channels % q.group_size == 0 and q.storage_in_channels >= q.in_channels


# ---- voxelizing with a precomputed quantization ------------------------------------------------------


def _points(kind: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(points (n, 3) float32, batch indices (n,) int32) of one distribution; batch 1 is empty."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        p = rng.uniform(-4, 4, (n, 3))
    elif kind == "clustered":  # many points in few voxels
        p = rng.normal(0, 0.4, (n, 3)) + rng.integers(-2, 2, (n, 1)) * 3
    elif kind == "line":
        p = np.stack([np.linspace(-5, 5, n), np.zeros(n), np.full(n, 0.3)], axis=1)
    else:  # one point, repeated
        p = np.full((n, 3), 0.75)
    return p.astype(np.float32), (rng.integers(0, 2, n) * 2).astype(np.int32)


def _voxelize_oracle(points, batch, feats, voxel_size, live, reduction, counted=None):
    """Voxels of the first ``counted`` points (first-occurrence order), the reduction of the
    first ``live`` of them; a voxel with no live point reads 0; the mean divides by the counts."""
    counted = len(points) if counted is None else counted
    cells = np.floor(points[:counted].astype(np.float64) / voxel_size).astype(np.int64)
    rows: dict[tuple, int] = {}
    inverse = np.array(
        [
            rows.setdefault((int(b), *map(int, c)), len(rows))
            for b, c in zip(batch[:counted], cells, strict=True)
        ],
        int,
    )
    coords = np.array(list(rows), np.int32).reshape(-1, 4)
    counts = np.bincount(inverse, minlength=len(rows))
    out = np.zeros((len(rows), feats.shape[1]), np.float64)
    for v in range(len(rows)):
        members = [i for i in range(min(live, counted)) if inverse[i] == v]
        if not members:
            continue
        f = feats[members].astype(np.float64)
        out[v] = {
            "sum": f.sum(0),
            "mean": f.sum(0) / counts[v],
            "max": f.max(0),
            "first": f[0],
        }[reduction]
    return coords, out


@pytest.mark.parametrize("kind", ["uniform", "clustered", "line", "single"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "max", "first"])
def test_voxelize_with_quantization_against_an_oracle(kind, reduction):
    from mlx_lattice.ops import voxelize_with_quantization

    pts, batch = _points(kind, 80, seed=len(kind))
    feats = np.random.default_rng(1).normal(size=(80, 3)).astype(np.float32)
    q = lattice.sparse_quantize(pts, 0.5, batch_indices=mx.array(batch))
    x = voxelize_with_quantization(q, mx.array(feats), reduction=reduction, stride=2)
    coords, want = _voxelize_oracle(pts, batch, feats, 0.5, 80, reduction)
    assert isinstance(x, lattice.SparseTensor) and x.stride == (2, 2, 2)
    _same(x.coords, coords)
    np.testing.assert_allclose(np.asarray(x.feats), want, rtol=1e-5, atol=1e-5)
    assert 1 not in np.asarray(x.coords)[:, 0]  # the empty batch member has no voxel
    # the same as voxelize in one step
    y = lattice.ops.voxelize(pts, mx.array(feats), 0.5, batch_indices=batch, reduction=reduction, stride=2)
    _same(y.coords, x.coords)
    np.testing.assert_allclose(np.asarray(y.feats), np.asarray(x.feats), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["uniform", "clustered"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "max", "first"])
def test_voxelize_features_active_rows_against_an_oracle(kind, reduction):
    from mlx_lattice.core.coords.quantization import voxelize_features

    pts, batch = _points(kind, 60, seed=3)
    feats = np.random.default_rng(2).normal(size=(60, 2)).astype(np.float32)
    f = mx.array(feats)
    # the quantization of the first 45 points: point rows past it are ignored
    q = lattice.sparse_quantize(pts, 1.0, batch_indices=batch, active_rows=mx.array([45], mx.int32))
    for live in (45, 60, 30, 0):  # past the quantized points, and fewer than them
        got = voxelize_features(f, q, active_rows=mx.array([live], mx.int32), reduction=reduction)
        _, want = _voxelize_oracle(pts, batch, feats, 1.0, live, reduction, counted=45)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5)
    # the documented split form of voxelize(..., active_rows=): one quantization, same count
    x = mlx_lattice.ops.voxelize_with_quantization(
        q, f, active_rows=mx.array([45], mx.int32), reduction=reduction
    )
    y = lattice.ops.voxelize(pts, f, 1.0, batch_indices=batch, active_rows=45, reduction=reduction)
    _same(x.coords, y.coords)
    np.testing.assert_allclose(np.asarray(x.feats), np.asarray(y.feats), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match=r"active_rows must be in \[0, 60\], got 61"):
        voxelize_features(f, q, active_rows=61)


def test_voxelize_with_quantization_of_no_points():
    q = lattice.sparse_quantize(np.zeros((0, 3), np.float32))
    x = mlx_lattice.ops.voxelize_with_quantization(q, mx.zeros((0, 4)))
    assert (x.capacity, x.active_count, x.channels) == (0, 0, 4)
    q = lattice.sparse_quantize(np.ones((5, 3), np.float32), active_rows=0)
    assert mlx_lattice.ops.voxelize_with_quantization(q, mx.ones((5, 2)), active_rows=0).shape == (0, 2)
    with pytest.raises(ValueError, match=r"feats must have shape \(0, C\), got \(5, 2\)"):
        mlx_lattice.ops.voxelize_with_quantization(q, mx.ones((5, 2)))  # lattice: say the live rows


def test_voxelize_with_quantization_onto_a_template():
    from mlx_lattice.ops import voxelize_with_quantization

    pts, batch = _points("uniform", 50, seed=4)
    q = lattice.sparse_quantize(pts, 1.0, batch_indices=batch)
    f = mx.array(np.random.default_rng(5).normal(size=(50, 3)).astype(np.float32))
    x = voxelize_with_quantization(q, f)
    y = voxelize_with_quantization(q, f * 2, reduction="sum", template=x)
    assert y.coord_key == x.coord_key and y.coord_manager is x.coord_manager and y.coords is q.coords
    np.testing.assert_allclose(
        np.asarray(y.feats), np.asarray(lattice.ops.voxelize_features(f * 2, q, "sum")), rtol=1e-6
    )
    other = lattice.SparseTensor(mx.array(np.asarray(q.coords)), x.feats)  # equal rows, another array
    with pytest.raises(ValueError, match="template must use the quantization coordinate array"):
        voxelize_with_quantization(q, f, template=other)
    with pytest.raises(TypeError, match="quantization must be a SparseQuantization"):
        voxelize_with_quantization(x, f)


# ---- point rows past point_active_rows -------------------------------------------------------------


@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
@pytest.mark.parametrize("live", [0, 17, 40])
def test_point_active_rows_of_the_map_and_of_devoxelize(interpolation, live):
    from mlx_lattice.core.coords.quantization import build_point_voxel_map
    from mlx_lattice.ops import devoxelize

    pts, batch = _points("uniform", 40, seed=6)
    voxels = lattice.ops.voxelize(pts, mx.ones((40, 2)), 1.0, batch_indices=batch)
    count = mx.array([live], mx.int32)
    kwargs = {"batch_indices": mx.array(batch), "interpolation": interpolation}
    m = build_point_voxel_map(pts, voxels.coords, None, 1.0, point_active_rows=count, **kwargs)
    ref = build_point_voxel_map(
        pts[:live],
        voxels.coords,
        None,
        1.0,
        batch_indices=mx.array(batch[:live]),
        interpolation=interpolation,
    )
    assert m.point_count == 40 and ref.point_count == live
    _same(m.rows[:live], ref.rows)
    _same(m.weights[:live], ref.weights)
    assert (np.asarray(m.rows[live:]) == -1).all() and (np.asarray(m.weights[live:]) == 0).all()
    got = devoxelize(mx.array(pts), voxels, point_active_rows=count, **kwargs)
    origin = -0.5 if interpolation == "linear" else 0.0  # the documented corner convention
    want = lattice.ops.devoxelize(
        pts[:live], voxels, batch_indices=batch[:live], origin=origin, interpolation=interpolation
    )
    assert got.shape == (40, 2)
    _same(got[:live], want)
    assert (np.asarray(got[live:]) == 0).all()
    # a given map says which points it samples: point_active_rows does not cut it again
    full = lattice.ops.build_point_voxel_map(pts, voxels, batch_indices=batch, interpolation=interpolation)
    _same(
        devoxelize(pts, voxels, point_voxel_map=full, point_active_rows=count),
        lattice.ops.devoxelize(pts, voxels, point_voxel_map=full),
    )


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_target_transposed_view_against_an_oracle(seed):
    """Fine row o, offset k reads the coarse row c with fine = 2 c + offset (else -1)."""
    rng = np.random.default_rng(seed)
    xyz = rng.integers(-6, 6, (80, 3))
    fine = np.unique(np.concatenate([rng.integers(0, 2, (80, 1)), xyz], 1), axis=0).astype(np.int32)
    coarse = np.unique(np.concatenate([fine[:, :1], fine[:, 1:] // 2], 1), axis=0).astype(np.int32)
    m = lattice.CoordinateManager()
    kf, kc = m.insert_coords(mx.array(fine), 1), m.insert_coords(mx.array(coarse), 2)
    view = m.target_transposed_view(kc, kf)
    rows = {tuple(r): i for i, r in enumerate(coarse.tolist())}
    offsets = [(a, b, c) for a in range(2) for b in range(2) for c in range(2)]
    want = np.full((len(fine), 8), -1)
    for o, (b, x, y, z) in enumerate(fine.tolist()):
        for k, (dx, dy, dz) in enumerate(offsets):
            d = (x - dx, y - dy, z - dz)
            if all(v % 2 == 0 for v in d):
                want[o, k] = rows.get((b, d[0] // 2, d[1] // 2, d[2] // 2), -1)
    np.testing.assert_array_equal(np.asarray(view.out_in_map), want)
    assert view is m.target_transposed_view(kc, kf)  # the relation is cached
