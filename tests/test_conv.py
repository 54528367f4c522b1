"""Every convolution kind against the dense NumPy oracle (``tests/reference/conv.py``).

Coverage (a spread, not the full cartesian product, to keep the file under ~20 s):
kernel sizes 1..5 odd and even where legal (submanifold odd only), strides 1..3,
padding 0..2, dilation 1..2 and anisotropic triples, over every distribution of
``conftest.CLOUDS`` (empty, single point, isolated, line, plane, dense block, random
sparse, a batch whose member 1 is empty); channels 1, 3, 16, 33; dense and mapped
weights; with and without bias; float32 / float16 / bfloat16 features; a real
SemanticKITTI scan at 0.5 m; target mode; the pointwise path; the route taken.

Tolerances (max error relative to the largest reference magnitude, and per element):
float32 1e-4; float16 2e-3 (output rounding 2^-11 plus the bias added in float16);
bfloat16 1.6e-2 (2^-8 rounding, same reasoning). Accumulation is float32 in every
case; the oracle sees the already-rounded half-precision features.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import CLOUDS, DATA, FORWARD_GEOMETRIES, make_cloud
from reference import conv as rconv

import lattice
from lattice import ops
from lattice.core import SparseTensor
from lattice.routing import ConvRequest, route_conv
from lattice.routing.conv import CONV

# Every test of this file runs once per CPU GEMM (the BLAS, and each of lattice's kernels the
# CPU runs: conftest.cpu_gemm).
pytestmark = pytest.mark.usefixtures("cpu_gemm")

TOL = {"float32": 1e-4, "float16": 2e-3, "bfloat16": 1.6e-2}
DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}

KIND_OPS = {
    ("forward", False): ops.conv3d,
    ("submanifold", False): ops.subm_conv3d,
    ("transposed", False): ops.conv_transpose3d,
    ("generative", False): ops.generative_conv_transpose3d,
    ("submanifold", True): ops.normalized_subm_conv3d,
    ("transposed", True): ops.normalized_conv_transpose3d,
    ("generative", True): ops.normalized_generative_conv_transpose3d,
}

# (kernel_size, stride, padding, dilation)
TRANSPOSED_GEOMETRIES = [
    (1, 2, 0, 1),
    (2, 2, 0, 1),
    (2, 3, 1, 1),
    (3, 1, 1, 1),
    (3, 2, 1, 1),
    (3, 2, 0, 2),
    (4, 2, 1, 1),
    (4, 3, 2, 2),
    (5, 2, 2, 1),
    ((2, 3, 1), (2, 1, 3), (0, 1, 2), (1, 2, 1)),
]
SUBMANIFOLD_GEOMETRIES = [(1, 1), (3, 1), (3, 2), (5, 1), ((3, 1, 5), (1, 2, 1))]
GENERATIVE_GEOMETRIES = [(1, 1), (2, 2), (2, 3), (3, 2), (4, 2), (5, 3), ((2, 1, 3), (2, 3, 1))]


def _ids(items) -> list[str]:
    return [str(g).replace(" ", "") for g in items]


# ---- helpers -----------------------------------------------------------------------------


def make_input(coords, c_in: int, *, dtype: str = "float32", stride=1, seed: int = 0):
    """A SparseTensor with random features, and those features (as rounded) in float64."""
    rng = np.random.default_rng(seed)
    f = mx.array(rng.standard_normal((len(coords), c_in)).astype(np.float32)).astype(DTYPES[dtype])
    x = SparseTensor(np.asarray(coords, np.int32), f, stride)
    return x, np.asarray(f.astype(mx.float32), dtype=np.float64)


def make_weight(size, c_in: int, c_out: int, *, seed: int = 1):
    """A mapped (K, C_in, C_out) float32 weight and a bias, both as NumPy."""
    rng = np.random.default_rng(seed)
    k = int(np.prod(rconv.triple(size)))
    scale = np.sqrt(1.0 / max(1, c_in * k))
    w = rng.uniform(-scale, scale, (k, c_in, c_out)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    return w, b


def as_layout(w_mapped: np.ndarray, size, layout: str) -> mx.array:
    if layout == "mapped":
        return mx.array(w_mapped)
    return mx.array(rconv.mapped_to_dense(w_mapped, size))


def assert_close(actual, ref: np.ndarray, dtype: str = "float32") -> None:
    a = np.asarray(mx.array(actual).astype(mx.float32), dtype=np.float64)
    assert a.shape == ref.shape, (a.shape, ref.shape)
    tol = TOL[dtype]
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    np.testing.assert_allclose(a, ref, rtol=tol, atol=tol * scale)


def run_case(
    kind: str,
    coords,
    *,
    size,
    stride=1,
    padding=0,
    dilation=1,
    c_in=3,
    c_out=4,
    layout="dense",
    bias=True,
    dtype="float32",
    normalized=False,
    seed=0,
):
    """Runs one op and its oracle on generated support; checks coords, stride and features."""
    transposed = kind in ("transposed", "generative")
    x, f = make_input(coords, c_in, dtype=dtype, stride=stride if transposed else 1, seed=seed)
    w, b = make_weight(size, c_in, c_out, seed=seed + 1)
    kwargs: dict = {"kernel_size": size}
    if kind in ("forward", "transposed"):
        kwargs.update(stride=stride, padding=padding, dilation=dilation)
    elif kind == "submanifold":
        kwargs.update(dilation=dilation)
    else:
        kwargs.update(stride=stride)
    op = KIND_OPS[(kind, normalized)]
    y = op(x, as_layout(w, size, layout), mx.array(b) if bias else None, **kwargs)
    oracle = rconv.normalized_conv if normalized else rconv.conv
    ref_coords, ref = oracle(coords, f, w, b if bias else None, kind=kind, **kwargs)
    yc = np.asarray(y.coords[: y.active_count])
    if kind == "submanifold":
        np.testing.assert_array_equal(yc, np.asarray(coords).reshape(-1, 4))
        assert y.coord_key == x.coord_key
    rows = rconv.align(yc, ref_coords)
    assert y.feats.dtype == x.feats.dtype
    assert_close(y.feats[: y.active_count], ref[rows], dtype)
    s = rconv.triple(stride) if kind != "submanifold" else (1, 1, 1)
    expected_stride = (1, 1, 1) if transposed else s
    assert y.stride == expected_stride
    return y


# ---- the oracle itself ---------------------------------------------------------------------


def test_oracle_hand_computed():
    # Along x: W = 1, 10, 100 at offsets -1, 0, 1; y[o] = x[o-1] + 10 x[o] + 100 x[o+1].
    c = np.array([[0, 0, 0, 0], [0, 1, 0, 0], [0, 3, 0, 0]])
    f = np.array([[1.0], [2.0], [4.0]])
    w = np.zeros((27, 1, 1))
    for k, off in enumerate(rconv.kernel_offsets(3)):
        if off[1] == 0 and off[2] == 0:
            w[k, 0, 0] = {-1: 1.0, 0: 10.0, 1: 100.0}[int(off[0])]
    _, y = rconv.conv(c, f, w, kind="submanifold")
    np.testing.assert_allclose(y[:, 0], [210.0, 21.0, 40.0])
    # k=2 s=2 all-ones: floor(x / 2) sums its two children.
    out, y = rconv.conv(c, f, np.ones((8, 1, 1)), kind="forward", kernel_size=2, stride=2)
    np.testing.assert_array_equal(out[:, 1], [0, 1])
    np.testing.assert_allclose(y[:, 0], [3.0, 4.0])


@pytest.mark.parametrize("kind", ["forward", "transposed"])
def test_oracle_does_not_depend_on_tile(kind):
    coords = make_cloud("batched")
    f = np.random.default_rng(0).standard_normal((len(coords), 2))
    w = np.random.default_rng(1).standard_normal((27, 2, 3))
    kw = {"kind": kind, "kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2}
    c1, y1 = rconv.conv(coords, f, w, tile=3, **kw)
    c2, y2 = rconv.conv(coords, f, w, tile=24, **kw)
    np.testing.assert_array_equal(c1, c2)
    np.testing.assert_allclose(y1, y2, rtol=1e-12, atol=1e-12)


def test_layouts_round_trip():
    w = np.arange(5 * 2 * 3 * 4 * 6, dtype=np.float32).reshape(5, 2, 3, 4, 6)
    np.testing.assert_array_equal(rconv.mapped_to_dense(rconv.dense_to_mapped(w), (2, 3, 4)), w)


# ---- every kind, every distribution, a spread of geometries ---------------------------------


@pytest.mark.parametrize("geom", FORWARD_GEOMETRIES, ids=_ids(FORWARD_GEOMETRIES))
@pytest.mark.parametrize("name", CLOUDS)
def test_forward(name, geom):
    size, stride, padding, dilation = geom
    run_case("forward", make_cloud(name), size=size, stride=stride, padding=padding, dilation=dilation)


@pytest.mark.parametrize("geom", SUBMANIFOLD_GEOMETRIES, ids=_ids(SUBMANIFOLD_GEOMETRIES))
@pytest.mark.parametrize("name", CLOUDS)
def test_submanifold(name, geom):
    size, dilation = geom
    run_case("submanifold", make_cloud(name), size=size, dilation=dilation)


@pytest.mark.parametrize("geom", TRANSPOSED_GEOMETRIES, ids=_ids(TRANSPOSED_GEOMETRIES))
@pytest.mark.parametrize("name", CLOUDS)
def test_transposed(name, geom):
    size, stride, padding, dilation = geom
    run_case("transposed", make_cloud(name), size=size, stride=stride, padding=padding, dilation=dilation)


@pytest.mark.parametrize("geom", GENERATIVE_GEOMETRIES, ids=_ids(GENERATIVE_GEOMETRIES))
@pytest.mark.parametrize("name", CLOUDS)
def test_generative(name, geom):
    size, stride = geom
    run_case("generative", make_cloud(name), size=size, stride=stride)


NORMALIZED_CASES = [
    ("submanifold", 3, 1, 0, 1),
    ("submanifold", 5, 1, 0, 2),
    ("transposed", 2, 2, 0, 1),
    ("transposed", 3, 2, 1, 2),
    ("generative", 2, 2, 0, 1),
    ("generative", 3, 3, 0, 1),
]


@pytest.mark.parametrize("case", NORMALIZED_CASES, ids=_ids(NORMALIZED_CASES))
@pytest.mark.parametrize("name", ["empty", "single", "plane", "random_sparse", "batched"])
def test_normalized(name, case):
    kind, size, stride, padding, dilation = case
    run_case(
        kind, make_cloud(name), size=size, stride=stride, padding=padding, dilation=dilation, normalized=True
    )


# ---- channels, layouts, bias, dtypes --------------------------------------------------------

CHANNEL_CASES = [
    # (kind, size, stride, c_in, c_out, layout, bias)
    ("submanifold", 3, 1, 1, 1, "dense", True),
    ("submanifold", 3, 1, 16, 33, "mapped", False),
    ("submanifold", 3, 1, 33, 16, "dense", False),
    ("forward", 2, 2, 1, 16, "mapped", True),
    ("forward", 3, 2, 33, 3, "dense", True),
    ("forward", 2, 2, 16, 16, "dense", False),
    ("transposed", 2, 2, 3, 33, "dense", True),
    ("transposed", 2, 2, 33, 1, "mapped", False),
    ("generative", 2, 2, 16, 3, "mapped", True),
    ("generative", 3, 2, 1, 33, "dense", False),
]


@pytest.mark.parametrize("case", CHANNEL_CASES, ids=_ids(CHANNEL_CASES))
def test_channels_layouts_bias(case):
    kind, size, stride, c_in, c_out, layout, bias = case
    for name in ("random_sparse", "batched"):
        run_case(
            kind, make_cloud(name), size=size, stride=stride, c_in=c_in, c_out=c_out, layout=layout, bias=bias
        )


def test_layouts_agree():
    x, _ = make_input(make_cloud("random_sparse"), 5)
    w, b = make_weight(3, 5, 7)
    dense = ops.subm_conv3d(x, as_layout(w, 3, "dense"), mx.array(b))
    mapped = ops.subm_conv3d(x, as_layout(w, 3, "mapped"), mx.array(b))
    np.testing.assert_array_equal(np.asarray(dense.feats), np.asarray(mapped.feats))


DTYPE_CASES = [
    ("submanifold", 3, 1, False),
    ("forward", 2, 2, False),
    ("forward", 3, 2, False),
    ("transposed", 2, 2, False),
    ("generative", 2, 2, False),
    ("submanifold", 3, 1, True),
    ("transposed", 2, 2, True),
]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("case", DTYPE_CASES, ids=_ids(DTYPE_CASES))
def test_half_precision(case, dtype):
    kind, size, stride, normalized = case
    for name in ("dense_block", "batched"):
        run_case(
            kind,
            make_cloud(name),
            size=size,
            stride=stride,
            c_in=16,
            c_out=8,
            dtype=dtype,
            normalized=normalized,
        )


def test_half_precision_weight():
    x, f = make_input(make_cloud("random_sparse"), 4)
    w, b = make_weight(3, 4, 6)
    w16 = mx.array(w).astype(mx.float16)
    y = ops.subm_conv3d(x, w16, mx.array(b))
    _, ref = rconv.conv(
        make_cloud("random_sparse"), f, np.asarray(w16.astype(mx.float32)), b, kind="submanifold"
    )
    assert y.feats.dtype == mx.float32
    assert_close(y.feats, ref)


# ---- batches, empty members, empty input ---------------------------------------------------------


def test_batch_with_empty_member_keeps_batches_apart():
    coords = make_cloud("batched")
    y = run_case("forward", coords, size=3, stride=2, padding=1)
    b = np.asarray(y.coords[:, 0])
    assert set(b.tolist()) == {0, 2}
    # each member alone gives the same rows as within the batch
    for member in (0, 2):
        sub = coords[coords[:, 0] == member]
        ys = run_case("forward", sub, size=3, stride=2, padding=1)
        assert ys.active_count == int(np.sum(b == member))


@pytest.mark.parametrize("kind", ["forward", "submanifold", "transposed", "generative"])
def test_empty_input_gives_empty_output(kind):
    size = 3 if kind == "submanifold" else 2
    y = run_case(kind, make_cloud("empty"), size=size, stride=1 if kind == "submanifold" else 2, c_out=5)
    assert y.feats.shape == (0, 5)


def test_single_point_forward_with_padding():
    # one input, k=3 s=2 p=1: one output row, floor(c / 2), reached by a single edge.
    y = run_case("forward", make_cloud("single"), size=3, stride=2, padding=1, bias=False)
    assert y.active_count == 1


# ---- a real scan ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scan_coords() -> np.ndarray:
    path = DATA / "semantickitti" / "seq00_000000.bin"
    if not path.is_file():
        pytest.skip(f"shared data not found: {path}")
    pts = np.fromfile(path, dtype=np.float32).reshape(-1, 4)[:, :3]
    vox = np.unique(np.floor(pts.astype(np.float64) / 0.5).astype(np.int64), axis=0)
    return np.concatenate([np.zeros((len(vox), 1), np.int64), vox], axis=1).astype(np.int32)


SCAN_CASES = [
    ("submanifold", 3, 1, 0, 1, False),
    ("forward", 2, 2, 0, 1, False),
    ("forward", 3, 2, 1, 1, False),
    ("transposed", 2, 2, 0, 1, False),
    ("generative", 3, 2, 0, 1, False),
    ("submanifold", 3, 1, 0, 1, True),
]


@pytest.mark.parametrize("case", SCAN_CASES, ids=_ids(SCAN_CASES))
def test_real_scan(scan_coords, case):
    kind, size, stride, padding, dilation, normalized = case
    run_case(
        kind,
        scan_coords,
        size=size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        c_in=4,
        c_out=5,
        normalized=normalized,
    )


# ---- target mode ------------------------------------------------------------------------------------


def _target(coords: np.ndarray, support: np.ndarray, seed: int) -> np.ndarray:
    """Two thirds of the generated support plus rows nobody reaches, shuffled."""
    rng = np.random.default_rng(seed)
    keep = support[np.arange(len(support)) % 3 != 1]
    extra = np.array([[0, 1000, -1000, 7], [1, 5, 5, 5], [2, -50, 50, 0]], np.int64)
    t = np.concatenate([keep, extra])
    return t[rng.permutation(len(t))].astype(np.int32)


@pytest.mark.parametrize("form", ["tensor", "numpy", "mx"])
@pytest.mark.parametrize("geom", [(2, 2, 0, 1), (3, 2, 1, 1), (3, 1, 1, 2), (4, 3, 2, 1)], ids=_ids)
def test_conv3d_target_mode(form, geom):
    size, stride, padding, dilation = geom
    coords = make_cloud("batched")
    target = _target(coords, rconv.forward_support(coords, stride), seed=size)
    x, f = make_input(coords, 3)
    w, b = make_weight(size, 3, 4)
    level = rconv.triple(stride)
    t = {
        "tensor": SparseTensor(target, mx.zeros((len(target), 1)), level),
        "numpy": target,
        "mx": mx.array(target),
    }[form]
    y = ops.conv3d(
        x,
        mx.array(w),
        mx.array(b),
        kernel_size=size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        coordinates=t,
    )
    np.testing.assert_array_equal(np.asarray(y.coords), target)
    assert y.stride == level
    _, ref = rconv.conv(
        coords,
        f,
        w,
        b,
        kind="forward",
        kernel_size=size,
        stride=stride,
        padding=padding,
        dilation=dilation,
        out_coords=target,
    )
    assert_close(y.feats, ref)
    # the unreachable rows hold exactly the bias
    far = np.abs(target[:, 1:]).max(axis=1) >= 50
    np.testing.assert_array_equal(np.asarray(y.feats)[far], np.broadcast_to(b, (int(far.sum()), 4)))


def test_conv3d_onto_own_support_equals_subm():
    x, _ = make_input(make_cloud("random_sparse"), 3)
    w, b = make_weight(3, 3, 4)
    a = ops.conv3d(x, mx.array(w), mx.array(b), kernel_size=3, padding=0, coordinates=x)
    s = ops.subm_conv3d(x, mx.array(w), mx.array(b), kernel_size=3)
    # target mode walks i = o + k (odd kernel centred): the same sum as the submanifold relation
    assert a.coord_key == x.coord_key
    np.testing.assert_allclose(np.asarray(a.feats), np.asarray(s.feats), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("name", ["random_sparse", "batched", "dense_block", "single"])
def test_conv_transpose_onto_skip_support(name, normalized):
    """U-Net decoder: downsample k=2 s=2, then transpose back onto the skip's rows and order."""
    coords = make_cloud(name)
    skip, _ = make_input(coords, 3)
    wd, _ = make_weight(2, 3, 5, seed=4)
    coarse = ops.conv3d(skip, mx.array(wd), kernel_size=2, stride=2)
    cf = np.asarray(coarse.feats, dtype=np.float64)
    w, b = make_weight(2, 5, 6, seed=5)
    op = ops.normalized_conv_transpose3d if normalized else ops.conv_transpose3d
    y = op(coarse, mx.array(w), mx.array(b), kernel_size=2, stride=2, coordinates=skip)
    assert y.coord_key == skip.coord_key
    np.testing.assert_array_equal(np.asarray(y.coords), coords)
    oracle = rconv.normalized_conv if normalized else rconv.conv
    _, ref = oracle(
        np.asarray(coarse.coords), cf, w, b, kind="transposed", kernel_size=2, stride=2, out_coords=coords
    )
    assert_close(y.feats, ref)


@pytest.mark.parametrize("kind", ["transposed", "generative"])
def test_transposed_onto_explicit_target(kind):
    coords = make_cloud("batched")
    size, stride, padding = (3, 2, 1) if kind == "transposed" else (2, 2, 0)
    geom = rconv.Geometry.of(size, stride, padding, 1)
    target = _target(coords, rconv.transposed_support(coords, geom), seed=9)
    x, f = make_input(coords, 3, stride=stride)
    w, b = make_weight(size, 3, 4)
    kw = {"kernel_size": size, "stride": stride}
    if kind == "transposed":
        kw["padding"] = padding
    op = ops.conv_transpose3d if kind == "transposed" else ops.generative_conv_transpose3d
    y = op(x, mx.array(w), mx.array(b), coordinates=target, **kw)
    np.testing.assert_array_equal(np.asarray(y.coords), target)
    _, ref = rconv.conv(coords, f, w, b, kind=kind, out_coords=target, **kw)
    assert_close(y.feats, ref)


def test_target_at_wrong_level_is_an_error():
    x, _ = make_input(make_cloud("random_sparse"), 3)
    w, _ = make_weight(2, 3, 4)
    wrong = SparseTensor(make_cloud("single"), mx.zeros((1, 1)), 1)
    with pytest.raises(ValueError, match="target stride"):
        ops.conv3d(x, mx.array(w), kernel_size=2, stride=2, coordinates=wrong)


# ---- pointwise path and routes ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("op_name", ["conv3d", "subm_conv3d"])
def test_pointwise_is_a_matmul_keeping_coordinates(op_name, dtype):
    coords = make_cloud("random_sparse")
    x, f = make_input(coords, 33, dtype=dtype)
    w, b = make_weight(1, 33, 16)
    y = getattr(ops, op_name)(x, as_layout(w, 1, "dense"), mx.array(b), kernel_size=1)
    assert y.coord_key == x.coord_key
    assert y.coords is x.coords or np.array_equal(np.asarray(y.coords), coords)
    assert_close(y.feats, f @ w[0].astype(np.float64) + b, dtype)


@pytest.mark.parametrize("rounder", ["avx512_bf16", "amx_bf16"])
def test_pointwise_on_the_rounding_kernel_is_the_sum_of_rounded_products(monkeypatch, rounder):
    """``LATTICE_CPU_GEMM=avx512_bf16`` (or ``amx_bf16``): the 1x1x1 convolution takes ``cpu.pointwise_tiled``
    (lattice's kernel, every row its own edge), forward and both gradients of
    bfloat16-rounded operands, against a float64 oracle of the rounded values."""
    from lattice import _ext
    from lattice.routing.device import capability

    if rounder not in _ext.conv_kernels():
        pytest.skip(f"this CPU runs no {rounder} kernel")
    monkeypatch.setenv("LATTICE_CPU_GEMM", rounder)
    capability.cache_clear()
    try:
        coords = make_cloud("random_sparse")
        x, f = make_input(coords, 33)
        w, _ = make_weight(1, 33, 16)
        route = lattice.explain(ops.subm_conv3d, x, as_layout(w, 1, "dense"), kernel_size=1)
        assert route.name == "cpu.pointwise_tiled" and route.facts["cpu_gemm"] == rounder
        y = ops.subm_conv3d(x, as_layout(w, 1, "dense"), kernel_size=1)
        dy = np.random.default_rng(2).normal(size=(len(f), 16)).astype(np.float32)

        def loss(feats, weight):
            return (ops.subm_conv3d(x.replace(feats=feats), weight, kernel_size=1).feats * mx.array(dy)).sum()

        gf, gw = mx.grad(loss, argnums=(0, 1))(x.feats, as_layout(w, 1, "dense"))
        empty, _ = make_input(np.zeros((0, 4), np.int32), 33)
        assert (
            lattice.explain(ops.subm_conv3d, empty, as_layout(w, 1, "dense"), kernel_size=1).name
            == route.name
        )
        y0 = ops.subm_conv3d(empty, as_layout(w, 1, "dense"), kernel_size=1)
        g0 = mx.grad(lambda wt: ops.subm_conv3d(empty, wt, kernel_size=1).feats.sum())(
            as_layout(w, 1, "dense")
        )
        assert y0.feats.shape == (0, 16) and not np.asarray(g0).any()
    finally:
        capability.cache_clear()

    bf16 = rconv.round_bf16
    assert y.coord_key == x.coord_key
    np.testing.assert_allclose(np.asarray(y.feats), bf16(f) @ bf16(w[0]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(gf)[: len(f)], bf16(dy) @ bf16(w[0]).T, rtol=1e-5, atol=1e-5)
    gw = np.asarray(gw).reshape(16, 33).T  # the dense layer weight (C_out, 1, 1, 1, C_in)
    np.testing.assert_allclose(gw, bf16(f).T @ bf16(dy), rtol=1e-5, atol=1e-4)


def _expected_route(
    op: str, kind: str, x: SparseTensor, y: SparseTensor, c_in, c_out, size, stride, edges, normalized=False
):
    k = int(np.prod(rconv.triple(size)))
    identity = (
        k == 1
        and rconv.triple(stride) == (1, 1, 1)
        and y.coord_key == x.coord_key
        and kind in ("forward", "submanifold", "target")
    )
    req = ConvRequest(
        op=op,
        kind=kind,
        dtype=str(x.dtype).removeprefix("mlx.core."),
        c_in=c_in,
        c_out=c_out,
        kernel_volume=k,
        identity_relation=identity,
        n_in=x.active_count,
        n_out=y.active_count,
        edges=edges,
        normalized=normalized,
        device="cpu",
    )
    return route_conv(req)


ROUTE_CASES = [
    ("conv3d", "forward", 1, 1),
    ("conv3d", "forward", 2, 2),
    ("conv3d", "forward", 1, 2),
    ("subm_conv3d", "submanifold", 1, 1),
    ("subm_conv3d", "submanifold", 3, 1),
    ("conv_transpose3d", "transposed", 2, 2),
    ("conv_transpose3d", "transposed", 1, 1),
    ("generative_conv_transpose3d", "generative", 2, 2),
    ("normalized_subm_conv3d", "submanifold", 1, 1),
    ("normalized_subm_conv3d", "submanifold", 3, 1),
]


@pytest.mark.usefixtures("cpu_device")  # the CPU routes' choices; GPU ones: test_cuda_routes.py
@pytest.mark.parametrize("case", ROUTE_CASES, ids=_ids(ROUTE_CASES))
def test_route_taken_is_the_predicted_one(monkeypatch, case, cpu_gemm):
    op_name, kind, size, stride = case
    calls: list[str] = []
    for rid, fn in list(CONV.impls.items()):
        if rid.backend != "cpu":
            continue

        def spy(*args, _name=rid.algorithm, _fn=fn):
            calls.append(_name)
            return _fn(*args)

        monkeypatch.setitem(CONV.impls, rid, spy)
    coords = make_cloud("random_sparse")
    x, _ = make_input(coords, 3, stride=stride if kind in ("transposed", "generative") else 1)
    w, _ = make_weight(size, 3, 4)
    kw = {"kernel_size": size} if kind == "submanifold" else {"kernel_size": size, "stride": stride}
    y = getattr(ops, op_name)(x, mx.array(w), **kw)
    rel = {
        "forward": lambda: ops.kernel_relation(x, kernel_size=size, stride=stride),
        "submanifold": lambda: ops.submanifold_kernel_relation(x, kernel_size=size),
        "transposed": lambda: ops.transposed_kernel_relation(x, kernel_size=size, stride=stride),
        "generative": lambda: ops.generative_kernel_relation(x, kernel_size=size, stride=stride),
    }[kind]()
    route = _expected_route(
        op_name, kind, x, y, 3, 4, size, stride, rel.edge_count, normalized=op_name.startswith("normalized")
    )
    assert calls and set(calls) == {route.algorithm}
    assert route.backend == "cpu"
    if hasattr(lattice, "explain"):  # the diagnostic calls the same route function
        assert lattice.explain(getattr(ops, op_name), x, mx.array(w), **kw).name == route.name
    if size == 1 and stride == 1 and kind != "transposed":
        assert route.algorithm == "pointwise_gemm"
    else:
        assert route.algorithm == ("gather_gemm_scatter" if cpu_gemm == "blas" else "tiled_gemm")
        assert route.facts.get("cpu_gemm", "blas") == cpu_gemm


# ---- argument errors -------------------------------------------------------------------------------------


def test_argument_errors():
    x, _ = make_input(make_cloud("random_sparse"), 3)
    with pytest.raises(ValueError, match="kernel"):
        ops.subm_conv3d(x, mx.zeros((4, 2, 2, 2, 3)), kernel_size=2)
    with pytest.raises(ValueError, match="input channels"):
        ops.subm_conv3d(x, mx.zeros((4, 3, 3, 3, 5)))
    with pytest.raises(ValueError, match="does not match kernel_size"):
        ops.conv3d(x, mx.zeros((4, 3, 3, 3, 3)), kernel_size=2, stride=2)
    with pytest.raises(ValueError, match="offsets"):
        ops.conv3d(x, mx.zeros((27, 3, 4)), kernel_size=2, stride=2)
    with pytest.raises(ValueError, match="bias"):
        ops.subm_conv3d(x, mx.zeros((4, 3, 3, 3, 3)), mx.zeros((5,)))
    with pytest.raises(TypeError, match="SparseTensor"):
        ops.conv3d(np.zeros((3, 4)), mx.zeros((4, 3, 3, 3, 3)))


def test_pointwise_kernel_takes_a_plain_matrix():
    """A 1x1x1 kernel takes a (C_out, C_in) weight: x.feats @ w.T + b on x's coordinates."""
    rng = np.random.default_rng(7)
    coords = np.unique(rng.integers(-4, 4, size=(40, 4)), axis=0).astype(np.int32)
    coords[:, 0] = np.abs(coords[:, 0]) % 3 * (coords[:, 0] % 2 == 0) * 2  # batches 0 and 2 (1 empty)
    coords = np.unique(coords, axis=0)
    feats = rng.normal(size=(len(coords), 3)).astype(np.float32)
    x = lattice.SparseTensor(coords, feats)
    w = rng.normal(size=(5, 3)).astype(np.float32)
    b = rng.normal(size=(5,)).astype(np.float32)
    for op in (lattice.ops.conv3d, lattice.ops.subm_conv3d):
        out = op(x, mx.array(w), mx.array(b), kernel_size=1)
        np.testing.assert_array_equal(np.asarray(out.coords), coords)
        np.testing.assert_allclose(np.asarray(out.feats), feats @ w.T + b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="weight must be dense"):
        lattice.ops.conv3d(x, mx.array(w), kernel_size=3)
    with pytest.raises(ValueError, match="odd kernel_size"):
        lattice.ops.subm_conv3d(x, mx.ones((2, 3, 5)), kernel_size=2)  # the geometry is checked first
