"""The one-pass affine map (``lattice.ops.affine``: ``act(x * scale + shift + residual)``)
against a float64 NumPy formula on every coordinate distribution (the empty set and a batch
with an empty member among them), in every float dtype, with and without each operand;
its gradients and JVP against the same expression in MLX ops; its route; and the modules
that use it (eval-mode ``BatchNorm``, the blocks of the U-Nets) against the separate
passes they replace."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
from conftest import CLOUDS, make_cloud
from mlx.utils import tree_flatten

import lattice
from lattice.core import SparseTensor
from lattice.models import blocks, minkunet
from lattice.nn import BatchNorm
from lattice.ops import norms as F
from lattice.ops import relu, sparse_add

DTYPES = {"float32": (mx.float32, 1e-6), "float16": (mx.float16, 2e-3), "bfloat16": (mx.bfloat16, 1.6e-2)}


def _np(a: mx.array) -> np.ndarray:
    if a.size == 0:  # MLX 0.32.4's CUDA astype crashes on empty arrays
        return np.zeros(a.shape, np.float64)
    return np.asarray(a.astype(mx.float32), dtype=np.float64)


def _features(n: int, c: int, seed: int, kind: str = "normal") -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return rng.normal(size=(n, c)).astype(np.float32) * 3
    if kind == "wide":  # magnitudes over many decades, both signs, exact zeros
        f = rng.normal(size=(n, c)) * 10.0 ** rng.integers(-4, 4, size=(n, c))  # within float16
        f[rng.random((n, c)) < 0.1] = 0.0
        return f.astype(np.float32)
    raise KeyError(kind)


def _reference(x, scale, shift, residual, relu_on: bool) -> np.ndarray:
    y = x.astype(np.float64) * scale + shift
    if residual is not None:
        y = y + residual
    return np.maximum(y, 0.0) if relu_on else y


@pytest.mark.parametrize("cloud", CLOUDS)
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("form", ["scale_shift", "residual_relu", "relu_only", "residual_only", "identity"])
def test_affine_matches_the_formula(cloud, dtype, form):
    coords = make_cloud(cloud)
    n, c = len(coords), 7
    mdt, tol = DTYPES[dtype]
    x = SparseTensor(
        coords, mx.array(_features(n, c, 1, "wide" if cloud == "dense_block" else "normal")).astype(mdt)
    )
    rng = np.random.default_rng(2)
    scale = rng.normal(size=c).astype(np.float32)
    shift = rng.normal(size=c).astype(np.float32)
    res = x.replace(feats=mx.array(_features(n, c, 3)).astype(mdt))
    with_scale = form in ("scale_shift", "residual_relu")
    with_res = form in ("residual_relu", "residual_only")
    with_relu = form in ("residual_relu", "relu_only")
    y = F.affine(
        x,
        mx.array(scale) if with_scale else None,
        mx.array(shift) if with_scale else None,
        residual=res if with_res else None,
        activation="relu" if with_relu else None,
    )
    assert isinstance(y, SparseTensor) and y.coord_key == x.coord_key and y.coord_manager is x.coord_manager
    assert y.feats.shape == (n, c)
    # float32 scale / shift promote a 16-bit input to float32, as MLX's arithmetic does
    assert y.feats.dtype == (mx.float32 if with_scale else mdt)
    want = _reference(
        _np(x.feats),
        scale if with_scale else 1.0,
        shift if with_scale else 0.0,
        _np(res.feats) if with_res else None,
        with_relu,
    )
    got = _np(y.feats)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * (1 + np.abs(want).max(initial=0)))
    if with_relu:
        assert (got >= 0).all()


def test_batched_cloud_with_an_empty_member_keeps_every_row_and_batch():
    coords = make_cloud("batched")  # members 0 and 2; member 1 empty
    x = SparseTensor(coords, mx.array(_features(len(coords), 4, 5)))
    y = F.affine(x, mx.array([1.0, -2.0, 0.5, 0.0]), mx.array([0.0, 1.0, -1.0, 2.0]), activation="relu")
    np.testing.assert_array_equal(np.asarray(y.coords), np.asarray(x.coords))
    want = np.maximum(_np(x.feats) * [1.0, -2.0, 0.5, 0.0] + [0.0, 1.0, -1.0, 2.0], 0)
    np.testing.assert_allclose(_np(y.feats), want, rtol=1e-6, atol=1e-6)


def test_nan_and_infinity_pass_through_as_in_mlx():
    x = mx.array([[np.nan, np.inf, -np.inf, -1.0, 0.0, 2.0]], dtype=mx.float32)
    ones, zeros = mx.ones((6,)), mx.zeros((6,))
    got = np.asarray(F.affine(x, ones, zeros, activation="relu"))
    want = np.asarray(mnn.relu(x))
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(got[~np.isnan(got)], want[~np.isnan(want)])


def test_plain_arrays_and_empty_inputs():
    x = mx.array(_features(50, 3, 4))
    r = mx.array(_features(50, 3, 6))
    s, t = mx.array([2.0, -1.0, 0.5]), mx.array([0.1, 0.2, -0.3])
    got = F.affine(x, s, t, residual=r, activation="relu")
    assert isinstance(got, mx.array)
    np.testing.assert_allclose(
        np.asarray(got), np.asarray(mx.maximum(x * s + t + r, 0)), rtol=1e-6, atol=1e-6
    )
    for shape in ((0, 3), (0, 0), (4, 0)):
        e = F.affine(mx.zeros(shape), mx.ones((shape[1],)), mx.zeros((shape[1],)), activation="relu")
        mx.eval(e)
        assert e.shape == shape


def _expression(x, s, t, r):
    return mx.maximum(x * s + t + r, 0.0)


def test_gradients_match_mlx_ops_and_second_derivatives_follow():
    rng = np.random.default_rng(8)
    x, r = (mx.array(rng.normal(size=(300, 6)).astype(np.float32)) for _ in range(2))
    s, t = (mx.array(rng.normal(size=6).astype(np.float32)) for _ in range(2))
    w = mx.array(rng.normal(size=(300, 6)).astype(np.float32))

    def loss(fn):
        return lambda x, s, t, r: (fn(x, s, t, r) * w).sum() + (fn(x, s, t, r) ** 2).sum()

    def ours(x, s, t, r):
        return F.affine(x, s, t, residual=r, activation="relu")

    got = mx.grad(loss(ours), argnums=(0, 1, 2, 3))(x, s, t, r)
    want = mx.grad(loss(_expression), argnums=(0, 1, 2, 3))(x, s, t, r)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-4)
    # the gradient of the gradient (the VJP is built from MLX ops)
    gg = mx.grad(lambda s: mx.grad(loss(ours), argnums=0)(x, s, t, r).sum())(s)
    gw = mx.grad(lambda s: mx.grad(loss(_expression), argnums=0)(x, s, t, r).sum())(s)
    np.testing.assert_allclose(np.asarray(gg), np.asarray(gw), rtol=1e-4, atol=1e-3)


def test_jvp_matches_mlx_ops():
    rng = np.random.default_rng(9)
    prim = [mx.array(rng.normal(size=shape).astype(np.float32)) for shape in ((40, 5), (5,), (5,), (40, 5))]
    tans = [mx.array(rng.normal(size=p.shape).astype(np.float32)) for p in prim]
    _, got = mx.jvp(lambda *a: F.affine(a[0], a[1], a[2], residual=a[3], activation="relu"), prim, tans)
    _, want = mx.jvp(_expression, prim, tans)
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=1e-5, atol=1e-5)


def test_route_is_the_native_pass_on_the_cpu(cpu_device):
    x = SparseTensor(make_cloud("line"), mx.ones((25, 4)))
    route = lattice.explain("affine", x, mx.ones((4,)), mx.zeros((4,)), residual=x, activation="relu")
    assert route.name == "cpu.native_pass"
    assert route.facts["residual"] is True and route.facts["activation"] == "relu"
    assert "cpu.mlx_ops" in [r.name for r in route.rejected]


@pytest.mark.usefixtures("cpu_device")  # float64 exists on the CPU only
def test_argument_errors():
    x = SparseTensor(make_cloud("line"), mx.ones((25, 4)))
    other = SparseTensor(make_cloud("line"), mx.ones((25, 4)))  # equal rows, another manager
    with pytest.raises(ValueError, match="residual must be on x's support"):
        F.affine(x, residual=other)
    with pytest.raises(ValueError, match=r"scale must have shape \(4,\)"):
        F.affine(x, mx.ones((3,)))
    with pytest.raises(ValueError, match="activation must be one of"):
        F.affine(x, activation="gelu")
    with pytest.raises(lattice.errors.DTypeError, match="must be one of"):
        F.affine(mx.ones((3, 4), dtype=mx.int32))
    with pytest.raises(lattice.errors.DTypeError, match="must be one of"):
        F.affine(mx.ones((3, 4), dtype=mx.float64))
    with pytest.raises(ValueError, match=r"residual must have shape \(3, 4\)"):
        F.affine(mx.ones((3, 4)), residual=mx.ones((3, 5)))
    with pytest.raises(TypeError, match="residual must be a SparseTensor"):
        F.affine(x, residual=mx.ones((25, 4)))


# ---- the modules that take the one-pass route --------------------------------------------------


def _trained_norm(c: int, seed: int) -> BatchNorm:
    rng = np.random.default_rng(seed)
    norm = BatchNorm(c)
    norm.weight = mx.array(rng.normal(size=c).astype(np.float32))
    norm.bias = mx.array(rng.normal(size=c).astype(np.float32))
    norm.running_mean = mx.array(rng.normal(size=c).astype(np.float32))
    norm.running_var = mx.array(rng.uniform(0.2, 3.0, size=c).astype(np.float32))
    return norm


@pytest.mark.parametrize("cloud", ["empty", "batched", "dense_block"])
def test_eval_batchnorm_is_mlx_batchnorm_up_to_rounding(cloud):
    coords = make_cloud(cloud)
    norm = _trained_norm(6, 3)
    norm.eval()
    x = SparseTensor(coords, mx.array(_features(len(coords), 6, 4)))
    got = norm(x)
    want = mnn.BatchNorm.__call__(norm, x.feats)
    assert got.coord_key == x.coord_key
    np.testing.assert_allclose(_np(got.feats), _np(want), rtol=1e-5, atol=1e-5)
    arr = norm(x.feats)  # a plain array takes the same pass
    np.testing.assert_allclose(_np(arr), _np(want), rtol=1e-5, atol=1e-5)


@pytest.mark.usefixtures("cpu_device")  # float64 exists on the CPU only
def test_eval_batchnorm_of_float64_keeps_mlx_arithmetic():
    norm = _trained_norm(3, 2)
    norm.eval()
    x = mx.array(_features(10, 3, 1)).astype(mx.float64)
    with mx.stream(mx.cpu):  # float64: MLX's CPU only
        got, want = norm(x), mnn.BatchNorm.__call__(norm, x)
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_training_batchnorm_is_mlx_batchnorm_up_to_rounding():
    """In training the module's one pass takes the batch statistics: output, running
    statistics and input gradient as mlx.nn.BatchNorm computes them."""
    x = mx.array(_features(200, 5, 3))
    ours, ref = _trained_norm(5, 4), _trained_norm(5, 4)
    got, want = ours(x), mnn.BatchNorm.__call__(ref, x)
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
    for a, b in ((ours.running_mean, ref.running_mean), (ours.running_var, ref.running_var)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    w = mx.array(_features(200, 5, 5))
    g = mx.grad(lambda x: (_trained_norm(5, 4)(x) * w).sum())(x)
    gw = mx.grad(lambda x: (mnn.BatchNorm.__call__(_trained_norm(5, 4), x) * w).sum())(x)
    np.testing.assert_allclose(np.asarray(g), np.asarray(gw), rtol=1e-4, atol=1e-4)


@pytest.mark.usefixtures("cpu_device")  # float64 exists on the CPU only
def test_scale_shift_is_none_where_the_module_is_not_one_affine_map():
    norm = _trained_norm(3, 6)
    assert norm.scale_shift(mx.ones((1, 3))) is None  # one row: no batch variance
    assert norm.scale_shift(mx.ones((4, 2, 3))) is None  # not (N, C)
    assert norm.scale_shift(mx.ones((4, 3), dtype=mx.float64)) is None
    assert norm.scale_shift(mx.ones((4, 4))) is None  # another width: the parent's error
    assert norm.scale_shift(mx.ones((4, 3))) is not None
    norm.eval()
    assert norm.scale_shift(mx.ones((1, 3))) is not None  # running statistics: any rows


def test_batchnorm_affine_is_eval_only():
    norm = _trained_norm(3, 1)
    with pytest.raises(ValueError, match="eval-mode map"):
        norm.affine()
    norm.eval()
    scale, shift = norm.affine()
    x = mx.array(_features(20, 3, 2))
    np.testing.assert_allclose(
        np.asarray(x * scale + shift), np.asarray(mnn.BatchNorm.__call__(norm, x)), atol=1e-5
    )


def _separate(norm, y, act, residual=None):
    """The separate passes the one-pass route replaces: mlx.nn.BatchNorm's own arithmetic,
    the outer-join add, the ReLU op."""
    out = y.replace(feats=mnn.BatchNorm.__call__(norm, y.feats))
    if residual is not None:
        out = sparse_add(out, residual)
    return out if act is None else relu(out)


def test_unet_eval_forward_matches_the_separate_passes(monkeypatch, kitti_coords):
    coords = kitti_coords[:6000]
    mx.random.seed(0)
    model = minkunet(14, 4, 5, width=8)
    for i, (_, mod) in enumerate(model.named_modules()):
        if isinstance(mod, mnn.BatchNorm):
            trained = _trained_norm(mod.running_mean.shape[0], i)
            mod.update(trained.parameters())
            mod.running_mean, mod.running_var = trained.running_mean, trained.running_var
    model.eval()
    x = SparseTensor(coords, mx.array(_features(len(coords), 4, 0)))
    got = model(x).feats

    def separate(conv, x, norm, act, residual=None, concat=None, **support):
        y = _separate(norm, conv(x, **support), act, residual)
        return y if concat is None else lattice.ops.cat([y, concat])

    monkeypatch.setattr(blocks, "conv_normed", separate)
    want = model(x).feats
    scale = float(mx.abs(want).max())
    assert scale > 0
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5 * scale)


def _separate_train(norm, y, act, residual=None):
    """The separate passes in training: mlx.nn.BatchNorm's own arithmetic (its batch
    statistics and running-statistics update), the outer-join add, the ReLU op."""
    out = y.replace(feats=mnn.BatchNorm.__call__(norm, y.feats))
    if residual is not None:
        out = sparse_add(out, residual)
    return out if act is None else relu(out)


def test_unet_training_step_matches_the_separate_passes(monkeypatch, kitti_coords):
    """In training the one pass takes the batch statistics: the loss, every parameter's
    gradient and the running statistics after the step agree with the separate passes."""
    coords = kitti_coords[:5000]
    x = SparseTensor(coords, mx.array(_features(len(coords), 4, 1)))
    labels = mx.array(np.arange(len(coords)) % 5)

    def step(normed):
        mx.random.seed(0)
        model = minkunet(14, 4, 5, width=8)
        model.train()
        monkeypatch.setattr(blocks, "normed", normed)

        def loss(m):
            return mnn.losses.cross_entropy(m(x).feats, labels, reduction="mean")

        value, grads = mnn.value_and_grad(model, loss)(model)
        stats = [
            (m.running_mean, m.running_var) for _, m in model.named_modules() if isinstance(m, BatchNorm)
        ]
        mx.eval(value, grads, stats)
        return value, grads, stats

    fused_value, fused_grads, fused_stats = step(blocks.normed)
    value, grads, stats = step(_separate_train)
    np.testing.assert_allclose(float(fused_value), float(value), rtol=1e-5)
    flat_f, flat = dict(tree_flatten(fused_grads)), dict(tree_flatten(grads))
    assert flat_f.keys() == flat.keys() and len(flat) > 50
    for name, g in flat.items():
        scale = float(mx.abs(g).max()) + 1e-6
        np.testing.assert_allclose(
            np.asarray(flat_f[name]), np.asarray(g), rtol=1e-3, atol=2e-3 * scale, err_msg=name
        )
    for (mf, vf), (m, v) in zip(fused_stats, stats, strict=True):
        np.testing.assert_allclose(np.asarray(mf), np.asarray(m), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(np.asarray(vf), np.asarray(v), rtol=1e-5, atol=1e-6)
