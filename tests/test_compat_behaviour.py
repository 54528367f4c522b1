"""What mlx_lattice's adapters do, and the documented behaviour lattice does not have yet.

Each adapter is held to the lattice function it maps to (the same result), to the
documented defaults and argument names, and to its clear errors for the argument values
lattice does not serve yet (``mlx_lattice._missing.LIMITED``). The gaps in
``mlx_lattice._missing.BEHAVIOUR`` are strict xfails: once lattice has the behaviour the
test fails, and the entry is to be dropped.
"""

from __future__ import annotations

import json

import mlx.core as mx
import mlx.nn
import numpy as np
import pytest

import lattice
import lattice.core
import lattice.nn
import lattice.ops
import mlx_lattice
from mlx_lattice import _missing
from mlx_lattice._missing import NotProvidedError


def _coords(n: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    xyz = np.unique(rng.integers(-6, 6, size=(n, 3)), axis=0)
    batch = (np.arange(len(xyz)) % 2)[:, None]
    return np.unique(np.concatenate([batch, xyz], axis=1), axis=0).astype(np.int32)


def _tensor(channels: int = 4, seed: int = 0) -> lattice.SparseTensor:
    c = _coords(seed=seed)
    f = np.random.default_rng(seed + 1).normal(size=(len(c), channels)).astype(np.float32)
    return lattice.SparseTensor(c, f)


def _same(a, b) -> None:
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---- backend_info -------------------------------------------------------------------------------


def test_backend_info_is_the_documented_dict():
    info = mlx_lattice.backend_info()
    assert isinstance(info, dict)
    assert info["version"] == lattice.__version__ and isinstance(info["version"], str)
    caps = info["capabilities"]
    assert {"cpu", "metal", "mlir", "cuda"} <= set(caps)
    assert all(isinstance(v, bool) for v in caps.values())
    assert caps["cpu"] is True and caps["mlir"] is False
    native = lattice.backend_info()
    assert caps["cuda"] is (native.gpu_kernels == "cuda")
    assert caps["metal"] is (native.gpu_kernels == "metal")
    # lattice's richer record follows as extra keys; the whole dict is plain data
    assert info["compiled_backends"] == native.compiled_backends and info["blas"] == native.blas
    json.dumps(info)


# ---- core.types ---------------------------------------------------------------------------------


def test_triple():
    from mlx_lattice.core.types import Triple, triple

    assert Triple == tuple[int, int, int]
    assert triple(3, name="k") == (3, 3, 3)
    assert triple((1, 2, 3), name="k") == (1, 2, 3)
    assert triple([np.int64(2), 1, 1], name="k") == (2, 1, 1)
    assert triple(np.int32(4), name="k") == (4, 4, 4)
    for bad in ((1, 2), (1, 2, 3, 4), "abc", 2.5, (1.5, 2, 3), None):
        with pytest.raises(ValueError, match=r"\[triple\] stride must be"):
            triple(bad, name="stride")


# ---- core.coords ----------------------------------------------------------------------------------


def _first_seen_oracle(rows) -> list[tuple[int, ...]]:
    out, seen = [], set()
    for r in map(tuple, np.asarray(rows).tolist()):
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def _live(s) -> list[tuple[int, ...]]:
    assert s.active_count is s.active_rows and s.active_rows.dtype == mx.int32
    return [tuple(r) for r in np.asarray(s.coords)[: int(s.active_rows.item())].tolist()]


_SET_INPUTS = [
    lambda r: r.integers(0, 3, (40, 4)),  # many repeats
    lambda r: np.concatenate([r.integers(0, 2, (60, 1)), r.integers(-50, 50, (60, 3))], 1),  # few
    lambda r: np.repeat(r.integers(-4, 4, (5, 4)) * [0, 1, 1, 1], 3, axis=0)[
        r.permutation(15)
    ],  # each row thrice
    lambda r: np.zeros((0, 4), np.int64),
]


@pytest.mark.parametrize("dtype", [mx.int32, mx.int64])
@pytest.mark.parametrize("make_lhs", _SET_INPUTS)
@pytest.mark.parametrize("make_rhs", _SET_INPUTS[:2] + _SET_INPUTS[3:])
def test_set_ops_keep_first_occurrences(make_lhs, make_rhs, dtype):
    from mlx_lattice.core.coords import set_ops

    rng = np.random.default_rng(11)
    a, b = np.asarray(make_lhs(rng)), np.asarray(make_rhs(rng))
    lhs, rhs = mx.array(a).astype(dtype), mx.array(b).astype(dtype)
    ua, ub = _first_seen_oracle(a), _first_seen_oracle(b)

    union = set_ops.union_coords(lhs, rhs)
    assert isinstance(union, set_ops.CoordinateSet)
    assert _live(union) == ua + [r for r in ub if r not in set(ua)]
    assert _live(set_ops.intersection_coords(lhs, rhs)) == [r for r in ua if r in set(ub)]
    cells = [(r[0], *(v // 2 for v in r[1:])) for r in a.tolist()]
    assert _live(set_ops.downsample_coords(lhs, 2)) == _first_seen_oracle(np.array(cells).reshape(-1, 4))

    first = {}
    for i, r in enumerate(map(tuple, a.tolist())):
        first.setdefault(r, i)
    expected = [first.get(r, -1) for r in map(tuple, b.tolist())]
    got = set_ops.lookup_coords(lhs, rhs)
    assert got.dtype == mx.int32 and got.tolist() == expected
    assert set_ops.inverse_map(lhs, rhs).tolist() == expected
    assert set_ops.contains_coords(lhs, rhs).tolist() == [e >= 0 for e in expected]


def test_documented_coordinate_sets_feed_lattice():
    from mlx_lattice.core.coords import set_ops

    s = set_ops.union_coords(mx.array(_coords(seed=1)), mx.array(_coords(seed=2)))
    assert isinstance(s, lattice.core.CoordinateSet) and len(s) == int(s.active_rows.item())
    again = lattice.core.union_coords(s, s)
    assert len(again) == len(s)
    _same(set_ops.lookup_coords(s, s.coords), mx.arange(len(s)))


def _morton_oracle(rows: np.ndarray) -> list[int]:
    """The documented code, bit by bit: bit 3i + a of the code is bit i of axis a (x, y, z:
    a = 0, 1, 2) for i < 21 (two's complement), plus the batch index times 2^60."""
    codes = []
    for b, *xyz in rows.tolist():
        code = 0
        for a, v in enumerate(xyz):
            for i in range(21):
                code |= ((v >> i) & 1) << (3 * i + a)
        codes.append((code | (b << 60)) & (2**64 - 1))
    return codes


@pytest.mark.parametrize("dtype", [mx.int32, mx.int64])
@pytest.mark.parametrize(
    "make",
    [
        lambda r: _coords(seed=3),
        lambda r: np.concatenate([r.integers(0, 3, (50, 1)), r.integers(-(2**20), 2**20, (50, 3))], 1),
        lambda r: np.concatenate([r.integers(0, 15, (30, 1)), r.integers(0, 4, (30, 3))], 1),
        lambda r: np.zeros((0, 4), np.int64),
    ],
)
def test_morton_codes_follow_the_documented_layout(make, dtype):
    from mlx_lattice.core.coords.ordering import morton_codes, morton_order

    rows = np.asarray(make(np.random.default_rng(5)))
    c = mx.array(rows).astype(dtype)
    codes = morton_codes(c)
    assert codes.dtype == mx.uint64 and codes.shape == (len(rows),)
    expected = _morton_oracle(rows)
    assert codes.tolist() == expected
    order = morton_order(c)
    assert order.dtype == mx.int32
    assert [expected[i] for i in order.tolist()] == sorted(expected)


def test_morton_sort_coords_gives_a_coordinate_ordering():
    from mlx_lattice.core.coords.ordering import CoordinateOrdering, morton_order, morton_sort_coords

    c = mx.array(_coords())
    o = morton_sort_coords(c)
    assert isinstance(o, CoordinateOrdering)
    _same(o.order, morton_order(c))
    _same(c[o.order], o.coords)
    _same(o.coords[o.inverse_rows], c)
    assert o.inverse_rows.dtype == mx.int32


@pytest.mark.parametrize("size, dilation", [(3, 1), ((3, 1, 1), 1), (2, 1), ((2, 3, 1), (1, 2, 3)), (1, 1)])
def test_kernel_offsets_are_int_triples(size, dilation):
    import mlx_lattice.core.coords
    import mlx_lattice.ops

    got = mlx_lattice.core.coords.kernel_offsets(size, dilation)
    assert mlx_lattice.ops.kernel_offsets is mlx_lattice.core.coords.kernel_offsets
    sizes = (size,) * 3 if isinstance(size, int) else size
    rates = (dilation,) * 3 if isinstance(dilation, int) else dilation
    axes = [[(i - (s // 2 if s % 2 else 0)) * r for i in range(s)] for s, r in zip(sizes, rates, strict=True)]
    assert got == tuple((x, y, z) for x in axes[0] for y in axes[1] for z in axes[2])
    assert all(type(v) is int for row in got for v in row)


@pytest.mark.parametrize("interpolation", ["linear", "nearest"])
def test_build_point_voxel_map_from_raw_coords(interpolation):
    from mlx_lattice.core.coords.quantization import build_point_voxel_map

    c = _coords()
    pts = mx.array(np.random.default_rng(3).uniform(-6, 6, size=(50, 3)).astype(np.float32))
    batch = mx.array((np.arange(50) % 2).astype(np.int32))
    got = build_point_voxel_map(
        pts, c, None, 0.5, batch_indices=batch, origin=0.25, interpolation=interpolation
    )
    voxels = lattice.SparseTensor(c, np.zeros((len(c), 1), np.float32))
    # documented linear sampling is corner based: lattice's centre based one half a voxel over
    origin = 0.25 - 0.25 if interpolation == "linear" else 0.25
    want = lattice.ops.build_point_voxel_map(
        pts, voxels, 0.5, batch_indices=batch, origin=origin, interpolation=interpolation
    )
    _same(got.rows, want.rows)
    np.testing.assert_allclose(np.asarray(got.weights), np.asarray(want.weights))


def test_build_point_voxel_map_reads_only_the_live_voxel_rows():
    from mlx_lattice.core.coords.quantization import build_point_voxel_map

    c = _coords()
    live = len(c) // 2
    pts = mx.array(c[:, 1:].astype(np.float32) + 0.5)  # one point at every voxel centre
    m = build_point_voxel_map(
        pts, c, mx.array([live], mx.int32), batch_indices=mx.array(c[:, 0]), interpolation="nearest"
    )
    rows = np.asarray(m.rows)[:, 0]
    np.testing.assert_array_equal(rows[:live], np.arange(live))
    assert (rows[live:] == -1).all()


def test_voxelize_features_maps_to_lattice():
    from mlx_lattice.core.coords.quantization import voxelize_features

    pts = np.random.default_rng(4).uniform(-3, 3, size=(200, 3)).astype(np.float32)
    q = lattice.sparse_quantize(pts, 0.5)
    f = mx.array(np.random.default_rng(5).normal(size=(200, 3)).astype(np.float32))
    for reduction in ("sum", "mean"):  # float sums: GPU atomics add in any order
        a, b = voxelize_features(f, q, reduction=reduction), lattice.ops.voxelize_features(f, q, reduction)
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    live = voxelize_features(f, q, active_rows=mx.array([100], mx.int32))
    _same(live, lattice.ops.voxelize_features(f, q, "mean", active_rows=100))


# ---- ops ------------------------------------------------------------------------------------------


def test_kernel_relation_has_the_documented_defaults():
    from mlx_lattice.ops import kernel_relation

    x = _tensor()
    got = kernel_relation(x)
    want = lattice.ops.kernel_relation(x, kernel_size=3, stride=1)
    assert got.n_kernels == 27 == want.n_kernels
    assert got.edge_count == want.edge_count and got.out_count == want.out_count
    assert lattice.ops.kernel_relation(x).n_kernels == 8  # lattice's own defaults: 2, stride 2


def test_sparse_collate_takes_the_documented_argument_names():
    from mlx_lattice.ops import sparse_collate

    coords = [np.array([[0, 0, 0], [1, 2, 3]], np.int32), np.array([[5, 5, 5]], np.int32)]
    feats = [np.ones((2, 2), np.float32), np.full((1, 2), 2.0, np.float32)]
    got = sparse_collate(coords=coords, feats=feats, stride=2)
    want = lattice.ops.sparse_collate(coords, feats, stride=2)
    _same(got.coords, want.coords)
    _same(got.feats, want.feats)
    _same(got.batch_counts, [2, 1])
    assert got.stride == (2, 2, 2)


def test_sparse_binary_op_is_sparse_binary():
    from mlx_lattice.ops.tensor import sparse_binary_op

    assert sparse_binary_op is lattice.ops.sparse_binary


@pytest.mark.parametrize(
    ("kind", "extra", "reference"),
    [
        ("relu", {}, lambda x: lattice.ops.relu(x)),
        ("sigmoid", {}, lambda x: lattice.ops.sigmoid(x)),
        ("gelu", {"approximate": "tanh"}, lambda x: lattice.ops.gelu(x, approximate="tanh")),
        ("silu", {}, lambda x: lattice.ops.silu(x)),
        ("leaky_relu", {"alpha": 0.2}, lambda x: lattice.ops.leaky_relu(x, negative_slope=0.2)),
        ("tanh", {}, lambda x: lattice.ops.tanh(x)),
        ("softplus", {}, lambda x: lattice.ops.softplus(x)),
    ],
)
def test_activation_maps_to_lattice(kind, extra, reference):
    from mlx_lattice.ops import activation

    x = _tensor()
    got = activation(x, kind=kind, **extra)
    assert got.coord_key == x.coord_key
    _same(got.feats, reference(x).feats)
    _same(activation(x.feats, kind=kind, **extra), reference(x.feats))  # the dense form


def test_activation_unknown_kind():
    from mlx_lattice.ops import activation

    with pytest.raises(ValueError, match=r"\[activation\] kind must be one of"):
        activation(mx.zeros((2, 2)), kind="swish")


def test_softplus_and_batch_norm_are_lattice_s():
    from mlx_lattice.ops import activation, batch_norm, softplus

    assert softplus is lattice.ops.softplus and batch_norm is lattice.ops.batch_norm
    x = _tensor()
    for kwargs in ({}, {"beta": 2.0}, {"threshold": 0.5}):
        _same(activation(x, kind="softplus", **kwargs).feats, softplus(x, **kwargs).feats)


def test_dense_feature_forms():
    from mlx_lattice.ops import batch_norm_features, layer_norm_features, linear_features, rms_norm_features

    f = mx.array(np.random.default_rng(6).normal(size=(9, 4)).astype(np.float32))
    w, b = mx.ones((3, 4)), mx.array([1.0, 2.0, 3.0])
    s, t = mx.array([1.0, 2.0, 0.5, 1.0]), mx.array([0.0, 1.0, 0.0, -1.0])
    _same(linear_features(f, w, b), lattice.ops.linear(f, w, b))
    _same(batch_norm_features(f, s, t, t, s), lattice.ops.batch_norm(f, weight=s, bias=t, mean=t, var=s))
    _same(layer_norm_features(f, s, t, eps=1e-3), lattice.ops.layer_norm(f, weight=s, bias=t, eps=1e-3))
    _same(rms_norm_features(f, s), lattice.ops.rms_norm(f, weight=s))


def test_devoxelize_maps_to_lattice_s():
    from mlx_lattice.ops import devoxelize

    c = _coords()
    voxels = lattice.SparseTensor(c, np.random.default_rng(4).normal(size=(len(c), 3)).astype(np.float32))
    pts = mx.array(np.random.default_rng(5).uniform(-6, 6, size=(40, 3)).astype(np.float32))
    batch = mx.array((np.arange(40) % 2).astype(np.int32))
    for interpolation, origin in (("linear", (-0.5, -0.5, -0.5)), ("nearest", 0.0)):
        got = devoxelize(pts, voxels, batch_indices=batch, interpolation=interpolation)
        want = lattice.ops.devoxelize(
            pts, voxels, batch_indices=batch, origin=origin, interpolation=interpolation
        )
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-6, atol=1e-6)


def test_devoxelize_linear_mixes_the_corners_of_the_cell():
    from mlx_lattice.core.coords.quantization import build_point_voxel_map
    from mlx_lattice.ops import devoxelize

    # voxel v sits at the grid point v: the cell centre mixes its 8 corners equally
    corners = np.array([(0, x, y, z) for z in (0, 1) for y in (0, 1) for x in (0, 1)], np.int32)
    voxels = lattice.SparseTensor(corners, np.arange(8, dtype=np.float32)[:, None])
    np.testing.assert_allclose(np.asarray(devoxelize(mx.array([[0.5, 0.5, 0.5]]), voxels)), [[3.5]])
    m = build_point_voxel_map(mx.array([[0.25, 0.0, 0.0]]), corners[:2], None)
    np.testing.assert_allclose(
        np.asarray(mlx_lattice.ops.interpolate_point_features(mx.array([[2.0], [6.0]]), m)), [[3.0]]
    )


def test_dequantize_weight_takes_weight_by_name():
    w = mx.array(np.random.default_rng(7).normal(size=(8, 64)).astype(np.float32))
    q = mlx_lattice.quantize_weight(w, group_size=32)
    _same(mlx_lattice.dequantize_weight(weight=q), lattice.core.dequantize_weight(q))


def test_quantize_weight_accepts_any_c_in():
    # documented: C_in is zero-padded in storage to the group (12 channels, group 32)
    w = mx.array(np.random.default_rng(8).normal(size=(8, 12)).astype(np.float32))
    q = mlx_lattice.quantize_weight(w, group_size=32)
    back = mlx_lattice.dequantize_weight(q)
    assert back.shape == (8, 12)
    np.testing.assert_allclose(np.asarray(back), np.asarray(w), atol=0.5)


# ---- the documented imports of issue 17 ---------------------------------------------------------


def test_the_issue_imports_resolve():
    """The imports issue 17 reports failing, as a new user writes them, all resolve."""
    ns: dict = {}
    exec(
        "from mlx_lattice.ops import contains_coords, lookup_coords, topk_rows, sparse_cat_aligned, "
        "sparse_quantize, voxelize_with_quantization\n"
        "from mlx_lattice.core.coords.builders import build_kernel_relation\n"
        "from mlx_lattice.core.relations import SparseRelationContract, RelationCSRView, NeighborEdges\n"
        "from mlx_lattice import nn\n",
        ns,
    )
    assert ns["topk_rows"] is lattice.ops.topk_rows
    assert ns["nn"].SubmConv3d is lattice.nn.SubmConv3d
    rel = ns["build_kernel_relation"](mx.array(_coords()))
    assert isinstance(rel.contract, ns["SparseRelationContract"])
    assert isinstance(rel.output_csr, ns["RelationCSRView"])


def test_not_provided_is_an_import_error():
    assert issubclass(NotProvidedError, ImportError)
    with pytest.raises(ImportError, match="out of scope"):
        exec("from mlx_lattice import artifact", {})
    with pytest.raises(ImportError, match="out of scope"):
        exec("import mlx_lattice.artifact", {})


# ---- documented behaviour (once gaps: BEHAVIOUR lists what is still missing) -------------------


@pytest.mark.parametrize("active", [None, 7, mx.array([7], dtype=mx.int32), mx.array(7)])
def test_active_rows_is_always_an_int32_count_array(active):
    c = _coords()
    f = np.random.default_rng(3).normal(size=(len(c), 2)).astype(np.float32)
    x = lattice.SparseTensor(c, f, active_rows=active)
    live = len(c) if active is None else 7
    a = x.active_rows
    assert isinstance(a, mx.array) and a.dtype == mx.int32 and a.shape == (1,)
    assert a.tolist() == [live] and x.active_count == live and x.capacity == len(c)
    assert x.active_rows is a  # made once
    y = lattice.ops.relu(x)  # an op keeps the count
    assert y.active_rows.tolist() == [live] and y.active_count == live
    q = lattice.sparse_quantize(mx.array(c[:, 1:].astype(np.float32)), 2.0)
    s = lattice.core.downsample_coords(c, 2)
    for record in (q, s):
        assert record.active_rows.dtype == mx.int32 and record.active_rows.shape == (1,)
        assert record.active_rows.tolist() == [record.active_count] == [len(record)]
        assert record.capacity == record.coords.shape[0] == record.active_count


def test_empty_tensor_active_rows():
    x = lattice.SparseTensor(np.zeros((0, 4), np.int32), np.zeros((0, 3), np.float32))
    assert x.active_rows.tolist() == [0] and x.active_count == 0


def _jvp_conv():
    x = _tensor()
    w = mx.array(np.random.default_rng(9).normal(size=(27, 4, 2)).astype(np.float32))

    def f(feats):
        return lattice.ops.subm_conv3d(x.replace(feats=feats), w).feats

    (out,), (tangent,) = mx.jvp(f, [x.feats], [mx.ones_like(x.feats)])
    _same(tangent, f(mx.ones_like(x.feats)))  # linear in the features


def _jvp_pool():
    x = _tensor()

    def f(feats):
        return lattice.ops.avg_pool3d(x.replace(feats=feats)).feats

    _, (tangent,) = mx.jvp(f, [x.feats], [mx.ones_like(x.feats)])
    np.testing.assert_allclose(np.asarray(tangent), np.asarray(f(mx.ones_like(x.feats))), rtol=1e-6)


def test_documented_jvp_through_conv_and_pool():
    """The pages' forward-mode behaviour, once a gap (tests/test_jvp.py has the oracles)."""
    _jvp_conv()
    _jvp_pool()


def _quantizable():
    class Model(mlx.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = lattice.nn.SubmConv3d(12, 16, kernel_size=3)
            self.down = lattice.nn.Conv3d(16, 16, kernel_size=2, stride=2)
            self.up = lattice.nn.ConvTranspose3d(16, 8, kernel_size=2, stride=2)
            self.norm = lattice.nn.NormalizedSubmConv3d(8, 8)
            self.fc = lattice.nn.Linear(8, 5)

        def __call__(self, x):
            y = self.down(self.conv(x))
            return self.fc(self.norm(self.up(y)))

    return Model()


def test_mlx_nn_quantize_converts_lattice_modules():
    model = _quantizable()
    x = _tensor(channels=12)
    mx.eval(model.parameters())
    reference = _quantizable()
    reference.update(model.parameters())
    lattice.nn.quantize(reference)  # lattice's own conversion: the same modules and weights
    mlx.nn.quantize(model)
    assert isinstance(model.conv, lattice.nn.QuantizedSubmConv3d)
    assert isinstance(model.down, lattice.nn.QuantizedConv3d)
    assert isinstance(model.up, lattice.nn.QuantizedConvTranspose3d)
    assert isinstance(model.norm, lattice.nn.NormalizedSubmConv3d)  # needs the float weight
    assert isinstance(model.fc, lattice.nn.QuantizedLinear)
    _same(model(x).feats, reference(x).feats)


def test_to_quantized_arguments():
    fc = lattice.nn.Linear(64, 32)
    q = fc.to_quantized(group_size=32, bits=8)
    assert isinstance(q, lattice.nn.QuantizedLinear) and q.bits == 8 and q.group_size == 32
    with pytest.raises(ValueError, match="mode='affine'"):
        fc.to_quantized(mode="mxfp4")
    with pytest.raises(ValueError, match="quantize_input"):
        lattice.nn.SubmConv3d(4, 4).to_quantized(quantize_input=True)


def test_unsupported_dtypes_are_type_and_value_errors():
    x = lattice.SparseTensor(_coords(), np.ones((len(_coords()), 2), np.int32))
    for op in (lattice.ops.max_pool3d, lattice.ops.avg_pool3d):
        with pytest.raises(ValueError, match=r"\[(max|avg)_pool3d\] features must be float32") as info:
            op(x)
        assert isinstance(info.value, TypeError) and isinstance(info.value, lattice.DTypeError)
    with pytest.raises(TypeError):
        lattice.SparseTensor(_coords().astype(np.float32), np.ones((len(_coords()), 2), np.float32))
    with pytest.raises(ValueError):
        lattice.SparseTensor(_coords().astype(np.float32), np.ones((len(_coords()), 2), np.float32))


def test_normalized_pointwise_is_the_projection():
    """Documented: a 1x1x1 kernel of the normalised convolutions is the plain projection."""
    rng = np.random.default_rng(0)
    x = lattice.SparseTensor(
        np.array([[0, 0, 0, 0], [0, 1, 0, 0], [2, 1, 0, 0]], np.int32), rng.normal(size=(3, 2))
    )
    w = mx.array(rng.normal(size=(3, 1, 1, 1, 2)).astype(np.float32))
    b = mx.array(rng.normal(size=(3,)).astype(np.float32))
    want = np.asarray(x.feats) @ np.asarray(w).reshape(3, 2).T + np.asarray(b)
    for out in (
        mlx_lattice.ops.normalized_subm_conv3d(x, w, b, kernel_size=1),
        mlx_lattice.ops.normalized_conv_transpose3d(x, w, b, kernel_size=1, stride=1),
        mlx_lattice.ops.normalized_generative_conv_transpose3d(x, w, b, kernel_size=1, stride=1),
    ):
        np.testing.assert_allclose(np.asarray(out.feats), want, rtol=1e-5, atol=1e-5)
    module = mlx_lattice.nn.NormalizedSubmConv3d(2, 3, kernel_size=1)
    ref = mlx_lattice.ops.subm_conv3d(x, module.weight, module.bias, kernel_size=1)
    np.testing.assert_allclose(np.asarray(module(x).feats), np.asarray(ref.feats), rtol=1e-6)
    normalised = lattice.ops.normalized_subm_conv3d(x, w, b, kernel_size=1)  # lattice's own: normalised
    assert not np.allclose(np.asarray(normalised.feats), want)
    x = lattice.SparseTensor(
        mx.array([[0, 0, 0, 0], [0, 1, 0, 0]], mx.int32), mx.array([[2.0, 3.0], [1.0, 0.0]])
    )
    w = mx.array([[[4.0], [5.0]]])  # mapped (1, C_in, C_out)
    got = mlx_lattice.ops.normalized_subm_conv3d(x, w, kernel_size=1)
    np.testing.assert_allclose(np.asarray(got.feats), [[23.0], [4.0]], rtol=1e-6)


BEHAVIOUR_CHECKS: dict = {}


def test_behaviour_list_and_checks_agree():
    assert set(BEHAVIOUR_CHECKS) == set(_missing.BEHAVIOUR)


@pytest.mark.parametrize("key", sorted(_missing.BEHAVIOUR))
@pytest.mark.xfail(strict=True, reason="documented behaviour lattice lacks (mlx_lattice._missing.BEHAVIOUR)")
def test_documented_behaviour_lattice_lacks(key):
    BEHAVIOUR_CHECKS[key]()


def test_vmap_over_a_lattice_primitive_is_a_clear_error():
    """docs/compat.md: no vmap rule on lattice's primitives; MLX's error names the primitive
    (lattice's ``SparseConv`` on the CPU, MLX's ``CustomKernel`` of the CUDA route)."""
    x = _tensor()
    w = mx.ones((27, 4, 3))
    with pytest.raises(
        ValueError, match=r"\[Primitive::vmap\] Not implemented for (SparseConv|CustomKernel)"
    ):
        mx.vmap(lambda ws: lattice.ops.subm_conv3d(x, ws).feats)(mx.stack([w, 2 * w]))


def test_point_inputs_follow_the_documented_contract():
    from mlx_lattice.ops import sparse_quantize, voxelize

    pts, f = mx.ones((2, 3)), mx.ones((2, 1))
    with pytest.raises(ValueError, match="points must be float32"):
        sparse_quantize(mx.ones((2, 3), dtype=mx.int32))
    with pytest.raises(ValueError, match="batch_indices must have shape"):
        sparse_quantize(pts, batch_indices=mx.ones((2,), dtype=mx.int64))
    with pytest.raises(ValueError, match="reduction must be 'sum' or 'mean'"):
        voxelize(pts, f, reduction="max")
    with pytest.raises(ValueError, match="matching rows"):
        voxelize(pts, mx.ones((3, 1)))
    _same(voxelize(pts, f, reduction="sum").feats, lattice.ops.voxelize(pts, f, reduction="sum").feats)
