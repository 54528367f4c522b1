"""Feature ops (lattice.ops.features) against dense NumPy formulas: values, coordinate
identity, active rows, dtypes, gradients, the linear route, and argument errors."""

from __future__ import annotations

import math

import mlx.core as mx
import numpy as np
import pytest
from conftest import make_cloud

from lattice.backends.cpu import blas
from lattice.core import SparseTensor
from lattice.ops import features as F
from lattice.ops import norms
from lattice.routing import Backend, LinearRequest, Route, RouteId, route_linear
from lattice.routing.linear import MLX_MATMUL

RNG = np.random.default_rng(7)
_erf = np.vectorize(math.erf, otypes=[np.float64])


def _tensor(cloud="random_sparse", c=5, dtype=mx.float32, seed=0) -> SparseTensor:
    coords = make_cloud(cloud)
    feats = np.random.default_rng(seed).normal(size=(len(coords), c)).astype(np.float32) * 2
    return SparseTensor(coords, mx.array(feats).astype(dtype))


def _np(a) -> np.ndarray:
    if isinstance(a, mx.array) and a.size == 0:  # MLX 0.32.4's CUDA astype crashes on empty arrays
        return np.zeros(a.shape, np.float64)
    return np.asarray(a.astype(mx.float32) if isinstance(a, mx.array) else a, dtype=np.float64)


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


REFERENCES = {
    "relu": (F.relu, {}, lambda x: np.maximum(x, 0)),
    "sigmoid": (F.sigmoid, {}, _sigmoid),
    "gelu": (F.gelu, {}, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "gelu_precise": (
        F.gelu,
        {"approximate": "precise"},
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ),
    "gelu_tanh": (
        F.gelu,
        {"approximate": "tanh"},
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ),
    "gelu_fast": (F.gelu, {"approximate": "fast"}, lambda x: x * _sigmoid(1.702 * x)),
    "silu": (F.silu, {}, lambda x: x * _sigmoid(x)),
    "leaky_relu": (F.leaky_relu, {}, lambda x: np.where(x > 0, x, 0.01 * x)),
    "leaky_relu_0.3": (F.leaky_relu, {"negative_slope": 0.3}, lambda x: np.where(x > 0, x, 0.3 * x)),
    "tanh": (F.tanh, {}, np.tanh),
    "softplus": (F.softplus, {}, lambda x: np.log1p(np.exp(x))),
    "layer_norm": (
        norms.layer_norm,
        {},
        lambda x: (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5),
    ),
    "rms_norm": (norms.rms_norm, {}, lambda x: x / np.sqrt((x**2).mean(1, keepdims=True) + 1e-5)),
}


@pytest.mark.parametrize("cloud", ["random_sparse", "batched", "single", "empty"])
@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_elementwise_ops_match_numpy_and_keep_coordinates(name, cloud):
    fn, kwargs, ref = REFERENCES[name]
    x = _tensor(cloud)
    y = fn(x, **kwargs)
    assert isinstance(y, SparseTensor)
    assert y.coord_key == x.coord_key and y.coord_manager is x.coord_manager
    assert np.array_equal(np.asarray(y.coords), np.asarray(x.coords))
    assert y.shape == x.shape and y.dtype == x.dtype
    np.testing.assert_allclose(_np(y.feats), ref(_np(x.feats)), rtol=2e-4, atol=2e-5)
    # A plain array gives a plain array with the same values.
    arr = fn(x.feats, **kwargs)
    assert isinstance(arr, mx.array)
    np.testing.assert_allclose(_np(arr), _np(y.feats), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
@pytest.mark.parametrize(
    "name", ["relu", "sigmoid", "gelu", "silu", "tanh", "softplus", "layer_norm", "rms_norm"]
)
def test_elementwise_ops_low_precision(name, dtype):
    fn, kwargs, ref = REFERENCES[name]
    x = _tensor(dtype=dtype)
    y = fn(x, **kwargs)
    assert y.dtype == dtype
    tol = 2e-2 if dtype == mx.float16 else 8e-2
    np.testing.assert_allclose(_np(y.feats), ref(_np(x.feats)), rtol=tol, atol=tol)


def test_only_active_rows_are_read():
    coords = make_cloud("line")
    feats = RNG.normal(size=(len(coords), 3)).astype(np.float32)
    x = SparseTensor(coords, feats, active_rows=10)
    for fn in (F.relu, norms.layer_norm, lambda t: F.linear(t, mx.ones((2, 3)))):
        y = fn(x)
        assert y.capacity == 10 and y.active_count == 10 and y.coord_key == x.coord_key
        assert np.array_equal(np.asarray(y.coords), coords[:10])
    np.testing.assert_allclose(np.asarray(F.relu(x).feats), np.maximum(feats[:10], 0))


# ---- linear ------------------------------------------------------------------------------


@pytest.mark.parametrize("cloud", ["random_sparse", "batched", "single", "empty"])
@pytest.mark.parametrize("bias", [True, False])
def test_linear_matches_numpy(cloud, bias):
    x = _tensor(cloud, c=6)
    w = mx.array(RNG.normal(size=(4, 6)).astype(np.float32))
    b = mx.array(RNG.normal(size=(4,)).astype(np.float32)) if bias else None
    y = F.linear(x, w, b)
    ref = _np(x.feats) @ _np(w).T + (_np(b) if bias else 0)
    assert y.coord_key == x.coord_key and y.shape == (x.active_count, 4)
    np.testing.assert_allclose(_np(y.feats), ref, rtol=1e-5, atol=1e-5)


def test_linear_plain_array_with_leading_dims():
    a = mx.array(RNG.normal(size=(2, 3, 5)).astype(np.float32))
    w = mx.array(RNG.normal(size=(7, 5)).astype(np.float32))
    y = F.linear(a, w, mx.ones(7))
    assert isinstance(y, mx.array) and y.shape == (2, 3, 7)
    np.testing.assert_allclose(np.asarray(y), np.asarray(a) @ np.asarray(w).T + 1, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_linear_low_precision(dtype):
    x = _tensor(c=8, dtype=dtype)
    w = mx.array(RNG.normal(size=(3, 8)).astype(np.float32)).astype(dtype)
    y = F.linear(x, w, mx.zeros(3, dtype=dtype))
    assert y.dtype == dtype
    ref = _np(x.feats) @ _np(w).T
    np.testing.assert_allclose(_np(y.feats), ref, rtol=5e-2, atol=0.15)
    # Mixed dtypes promote like mlx.nn.Linear: float16 features with float32 weights give float32.
    assert F.linear(x, w.astype(mx.float32)).dtype == mx.float32


def test_linear_gradients_are_analytic():
    x = _tensor(c=5)
    w = mx.array(RNG.normal(size=(3, 5)).astype(np.float32))
    b = mx.array(RNG.normal(size=(3,)).astype(np.float32))
    g = mx.array(RNG.normal(size=(x.active_count, 3)).astype(np.float32))

    def loss(feats, w, b):
        return mx.sum(F.linear(x.replace(feats=feats), w, b).feats * g)

    dx, dw, db = mx.grad(loss, argnums=(0, 1, 2))(x.feats, w, b)
    gn, xn, wn = np.asarray(g), np.asarray(x.feats), np.asarray(w)
    np.testing.assert_allclose(np.asarray(dx), gn @ wn, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(dw), gn.T @ xn, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(np.asarray(db), gn.sum(0), rtol=1e-4, atol=1e-4)


def test_linear_takes_the_cpu_blas_route(monkeypatch):
    calls = []
    real = blas.blas_gemm

    def spy(a, b, *, trans_b=False):
        calls.append((tuple(a.shape), tuple(b.shape), trans_b))
        return real(a, b, trans_b=trans_b)

    monkeypatch.setattr(blas, "blas_gemm", spy)
    x = _tensor(c=4)
    F.linear(x, mx.ones((2, 4)), device="cpu")
    assert calls == [((x.active_count, 4), (2, 4), True)]
    route = route_linear(LinearRequest("linear", "float32", x.active_count, 4, 2, device="cpu"))
    assert route.name == "cpu.blas_gemm"
    assert any(r.algorithm == "mlx_matmul" and r.backend == "cpu" for r in route.rejected)


def test_linear_dispatches_on_the_route_value(monkeypatch):
    gpu = Route("linear", MLX_MATMUL, "test")
    monkeypatch.setattr(F, "route_linear", lambda req: gpu)
    monkeypatch.setattr(blas, "blas_gemm", lambda *a, **k: pytest.fail("CPU BLAS used on a GPU route"))
    x = _tensor(c=4)
    w = mx.array(RNG.normal(size=(2, 4)).astype(np.float32))
    np.testing.assert_allclose(
        np.asarray(F.linear(x, w).feats), np.asarray(x.feats) @ np.asarray(w).T, rtol=1e-5, atol=1e-5
    )
    monkeypatch.setattr(F, "route_linear", lambda req: Route("linear", RouteId(Backend.CPU, "magic"), "test"))
    with pytest.raises(RuntimeError, match=r"^\[linear\] route cpu.magic has no implementation"):
        F.linear(x, w)


@pytest.mark.parametrize(
    "weight,bias,exc,message",
    [
        (mx.ones((4, 5)), None, ValueError, r"^\[linear\] weight must have shape \(out, 3\), got \(4, 5\)"),
        (mx.ones((3,)), None, ValueError, r"^\[linear\] weight must have shape \(out, 3\), got \(3,\)"),
        (np.ones((2, 3)), None, TypeError, r"^\[linear\] weight must be an mx.array, got ndarray"),
        (mx.ones((2, 3)), mx.ones(3), ValueError, r"^\[linear\] bias must have shape \(2,\), got \(3,\)"),
        (
            mx.ones((2, 3), dtype=mx.int32),
            None,
            TypeError,
            r"^\[linear\] features and weight must promote to one of",
        ),
    ],
)
def test_linear_rejects_bad_arguments(weight, bias, exc, message):
    x = _tensor("line", c=3)
    if weight.dtype == mx.int32:
        x = x.astype(mx.int32)
    with pytest.raises(exc, match=message):
        F.linear(x, weight, bias)


# ---- dropout -----------------------------------------------------------------------------


def test_dropout_identity_when_not_training_or_p_zero():
    x = _tensor()
    for kwargs in ({"training": False}, {"p": 0.0}):
        y = F.dropout(x, **kwargs)
        assert y.coord_key == x.coord_key
        assert np.array_equal(np.asarray(y.feats), np.asarray(x.feats))


def test_dropout_zeroes_and_rescales():
    x = SparseTensor(make_cloud("dense_block"), mx.ones((1728, 4)))
    y = F.dropout(x, p=0.25, key=mx.random.key(3))
    vals = np.asarray(y.feats)
    assert set(np.unique(vals).tolist()) <= {0.0, float(np.float32(1 / 0.75))}
    assert 0.2 < (vals == 0).mean() < 0.3
    again = F.dropout(x, p=0.25, key=mx.random.key(3))
    assert np.array_equal(np.asarray(again.feats), vals)  # same key, same mask
    assert F.dropout(x.astype(mx.float16), p=0.5).dtype == mx.float16


@pytest.mark.parametrize("p", [1.0, -0.1, 1.5, True])
def test_dropout_rejects_bad_p(p):
    with pytest.raises(ValueError, match=r"^\[dropout\] p must be in \[0, 1\)"):
        F.dropout(_tensor(), p=p)


# ---- normalisation -------------------------------------------------------------------------


def test_batch_norm_matches_numpy():
    x = _tensor(c=4)
    w, b, m, v = (mx.array(RNG.normal(size=4).astype(np.float32)) for _ in range(4))
    v = mx.abs(v) + 0.5
    y = norms.batch_norm(x, weight=w, bias=b, mean=m, var=v, eps=1e-3)
    ref = (_np(x.feats) - _np(m)) / np.sqrt(_np(v) + 1e-3) * _np(w) + _np(b)
    assert y.coord_key == x.coord_key
    np.testing.assert_allclose(_np(y.feats), ref, rtol=1e-5, atol=1e-5)
    plain = norms.batch_norm(x.feats, weight=None, bias=None, mean=m, var=v)
    np.testing.assert_allclose(
        _np(plain), (_np(x.feats) - _np(m)) / np.sqrt(_np(v) + 1e-5), rtol=1e-5, atol=1e-5
    )


def _batch_norm_oracle(f, mean=None, var=None, eps=1e-5):
    """Statistics of the rows given (each alone: the mean, the biased variance about that mean)."""
    m = f.mean(0) if mean is None else mean
    v = f.var(0) if var is None else var
    return (f - m) / np.sqrt(v + eps)


@pytest.mark.parametrize("cloud", ["random_sparse", "batched", "single", "dense_block"])
def test_batch_norm_with_statistics_of_the_active_rows(cloud):
    x = _tensor(cloud, c=3, seed=3)
    f = _np(x.feats)
    y = norms.batch_norm(x)  # mean=None, var=None: the statistics of the active rows
    assert y.coord_key == x.coord_key
    np.testing.assert_allclose(_np(y.feats), _batch_norm_oracle(f), rtol=1e-4, atol=1e-4)
    m, v = mx.array([0.5, -1.0, 2.0]), mx.array([2.0, 0.5, 1.0])
    np.testing.assert_allclose(
        _np(norms.batch_norm(x, mean=m).feats), _batch_norm_oracle(f, mean=_np(m)), rtol=1e-4, atol=1e-4
    )
    np.testing.assert_allclose(
        _np(norms.batch_norm(x.feats, var=v, eps=1e-3)),
        _batch_norm_oracle(f, var=_np(v), eps=1e-3),
        rtol=1e-4,
        atol=1e-4,
    )


def test_batch_norm_statistics_ignore_rows_past_active_rows():
    coords = make_cloud("line")
    feats = RNG.normal(size=(len(coords), 2)).astype(np.float32)
    feats[10:] = 1e6  # rows past the count must not enter the statistics
    x = SparseTensor(coords, feats, active_rows=10)
    y = norms.batch_norm(x)
    assert y.active_count == 10
    np.testing.assert_allclose(np.asarray(y.feats), _batch_norm_oracle(feats[:10]), rtol=1e-4, atol=1e-4)
    e = norms.batch_norm(_tensor("empty", c=2))
    assert e.shape == (0, 2)


@pytest.mark.parametrize(("beta", "threshold"), [(1.0, 20.0), (2.0, 20.0), (0.5, 1.0), (3.0, -1.0)])
@pytest.mark.parametrize("cloud", ["random_sparse", "batched", "single", "empty"])
def test_softplus_beta_and_threshold_match_numpy(beta, threshold, cloud):
    x = _tensor(cloud, c=4, seed=5)
    f = _np(x.feats) * 4  # values on both sides of the thresholds
    x = x.replace(feats=mx.array(f.astype(np.float32)))
    scaled = f * beta
    ref = np.where(scaled > threshold, f, np.log1p(np.exp(scaled)) / beta)
    y = F.softplus(x, beta=beta, threshold=threshold)
    assert y.coord_key == x.coord_key
    np.testing.assert_allclose(_np(y.feats), ref, rtol=1e-5, atol=1e-6)


def test_layer_and_rms_norm_affine():
    x = _tensor(c=6)
    w = mx.array(RNG.normal(size=6).astype(np.float32))
    b = mx.array(RNG.normal(size=6).astype(np.float32))
    xn = _np(x.feats)
    ln = (xn - xn.mean(1, keepdims=True)) / np.sqrt(xn.var(1, keepdims=True) + 1e-5) * _np(w) + _np(b)
    np.testing.assert_allclose(_np(norms.layer_norm(x, weight=w, bias=b).feats), ln, rtol=1e-4, atol=1e-4)
    rms = xn / np.sqrt((xn**2).mean(1, keepdims=True) + 1e-5) * _np(w)
    np.testing.assert_allclose(_np(norms.rms_norm(x, weight=w).feats), rms, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "fn,kwargs,message",
    [
        (
            norms.batch_norm,
            {"weight": None, "bias": None, "mean": mx.zeros(4), "var": mx.ones(3)},
            r"^\[batch_norm\] mean must have shape \(3,\), got \(4,\)",
        ),
        (
            norms.batch_norm,
            {"weight": mx.ones(2), "bias": None, "mean": mx.zeros(3), "var": mx.ones(3)},
            r"^\[batch_norm\] weight must have shape \(3,\), got \(2,\)",
        ),
        (F.softplus, {"beta": 0.0}, r"^\[softplus\] beta must be a positive number, got 0.0"),
        (
            norms.batch_norm,
            {"weight": None, "bias": None, "mean": mx.zeros(3), "var": mx.ones(3), "eps": 0},
            r"^\[batch_norm\] eps must be a positive number, got 0",
        ),
        (
            norms.layer_norm,
            {"bias": mx.zeros((1, 3))},
            r"^\[layer_norm\] bias must have shape \(3,\), got \(1, 3\)",
        ),
        (norms.rms_norm, {"weight": mx.ones(5)}, r"^\[rms_norm\] weight must have shape \(3,\), got \(5,\)"),
        (norms.rms_norm, {"eps": -1.0}, r"^\[rms_norm\] eps must be a positive number, got -1.0"),
        (
            F.gelu,
            {"approximate": "erf"},
            r"^\[gelu\] approximate must be one of \('none', 'precise', 'tanh', 'fast'\), got 'erf'",
        ),
    ],
)
def test_feature_ops_reject_bad_arguments(fn, kwargs, message):
    with pytest.raises(ValueError, match=message):
        fn(_tensor("line", c=3), **kwargs)


@pytest.mark.parametrize("fn", [F.relu, F.sigmoid, norms.layer_norm, F.softplus])
def test_feature_ops_reject_non_tensors(fn):
    name = "layer_norm" if fn is norms.layer_norm else fn.__name__
    with pytest.raises(TypeError, match=rf"^\[{name}\] x must be a SparseTensor or an mx.array, got list"):
        fn([[1.0, 2.0]])
    with pytest.raises(TypeError, match=r"^\[leaky_relu\] negative_slope must be a number, got 'a'"):
        F.leaky_relu(_tensor(), negative_slope="a")


def test_activation_gradients_flow_to_features():
    x = _tensor(c=3)
    g = mx.array(RNG.normal(size=(x.active_count, 3)).astype(np.float32))

    def loss(f):
        return mx.sum(F.silu(F.relu(x.replace(feats=f))).feats * g)

    dx = np.asarray(mx.grad(loss)(x.feats))
    xn = np.asarray(x.feats, dtype=np.float64)
    s = _sigmoid(np.maximum(xn, 0))
    ref = np.asarray(g) * (s + np.maximum(xn, 0) * s * (1 - s)) * (xn > 0)
    np.testing.assert_allclose(dx, ref, rtol=1e-4, atol=1e-5)
