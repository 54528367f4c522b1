"""Gradients of every convolution kind (features, weight, bias) against finite differences.

The reference gradient is a central difference of the float64 NumPy oracle
(``tests/reference/conv.py``) of the loss ``L = sum(Y * G)`` for a fixed random
cotangent ``G``; the library's gradient comes from ``mx.grad`` in float32 and goes
through the native VJPs (dX: the same relation walked backwards; dW: per offset
``X[in]^T dY[out]``; the bias: a column sum). ``mx.compile`` of the loss and of its
gradient must give the same numbers as the uncompiled functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np
import pytest
from reference import conv as rconv

from lattice import ops
from lattice.core import SparseTensor

# Every test of this file runs once per CPU GEMM (conftest.cpu_gemm).
pytestmark = pytest.mark.usefixtures("cpu_gemm")

C_IN, C_OUT = 2, 2
TOL = 1e-4


def small_cloud(seed: int = 0, n: int = 12) -> np.ndarray:
    """About ``n`` unique points in a small box, batch members 0 and 2 (member 1 empty)."""
    rng = np.random.default_rng(seed)
    pts = np.unique(rng.integers(-3, 4, size=(4 * n, 3)), axis=0)[:n]
    pts = pts[rng.permutation(len(pts))]
    b = np.where(np.arange(len(pts)) % 3 == 0, 2, 0)
    return np.concatenate([b[:, None], pts], axis=1).astype(np.int32)


@dataclass(frozen=True)
class Case:
    """One op with its oracle arguments."""

    name: str
    op: object
    kind: str
    kwargs: dict = field(default_factory=dict)
    normalized: bool = False
    target: bool = False  # an explicit output support (target mode)
    layout: str = "dense"


CASES = [
    Case("forward_k2s2", ops.conv3d, "forward", {"kernel_size": 2, "stride": 2}),
    Case(
        "forward_k3s2p1d2",
        ops.conv3d,
        "forward",
        {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2},
        layout="mapped",
    ),
    Case("target_k3s1p1", ops.conv3d, "forward", {"kernel_size": 3, "stride": 1, "padding": 1}, target=True),
    Case("submanifold_k3", ops.subm_conv3d, "submanifold", {"kernel_size": 3}),
    Case("submanifold_k1_pointwise", ops.subm_conv3d, "submanifold", {"kernel_size": 1}, layout="mapped"),
    Case("transposed_k2s2", ops.conv_transpose3d, "transposed", {"kernel_size": 2, "stride": 2}),
    Case(
        "transposed_k3s2p1_target",
        ops.conv_transpose3d,
        "transposed",
        {"kernel_size": 3, "stride": 2, "padding": 1},
        target=True,
    ),
    Case("generative_k2s2", ops.generative_conv_transpose3d, "generative", {"kernel_size": 2, "stride": 2}),
    Case(
        "generative_k3s2_target",
        ops.generative_conv_transpose3d,
        "generative",
        {"kernel_size": 3, "stride": 2},
        target=True,
        layout="mapped",
    ),
    Case(
        "normalized_submanifold_k3",
        ops.normalized_subm_conv3d,
        "submanifold",
        {"kernel_size": 3},
        normalized=True,
    ),
    Case(
        "normalized_transposed_k2s2",
        ops.normalized_conv_transpose3d,
        "transposed",
        {"kernel_size": 2, "stride": 2},
        normalized=True,
    ),
    Case(
        "normalized_transposed_k3s2p1_target",
        ops.normalized_conv_transpose3d,
        "transposed",
        {"kernel_size": 3, "stride": 2, "padding": 1},
        normalized=True,
        target=True,
    ),
    Case(
        "normalized_generative_k2s2",
        ops.normalized_generative_conv_transpose3d,
        "generative",
        {"kernel_size": 2, "stride": 2},
        normalized=True,
    ),
]


class Problem:
    """Inputs, oracle loss and library loss of one case."""

    def __init__(self, case: Case, seed: int = 0) -> None:
        self.case = case
        rng = np.random.default_rng(seed + 100)
        self.coords = small_cloud(seed)
        transposed = case.kind in ("transposed", "generative")
        stride = rconv.triple(case.kwargs.get("stride", 1))
        size = case.kwargs["kernel_size"]
        k = int(np.prod(rconv.triple(size)))
        self.f = rng.standard_normal((len(self.coords), C_IN)).astype(np.float32)
        self.w = rng.uniform(-0.5, 0.5, (k, C_IN, C_OUT)).astype(np.float32)
        self.b = rng.standard_normal(C_OUT).astype(np.float32)
        self.x = SparseTensor(self.coords, mx.array(self.f), stride if transposed else 1)
        self.out_coords = None
        if case.target:
            if transposed:
                geom = rconv.Geometry.of(size, stride, case.kwargs.get("padding", 0), 1)
                support = rconv.transposed_support(self.coords, geom)
            else:
                support = rconv.forward_support(self.coords, stride)
            t = np.concatenate([support[::2], [[0, 40, 40, 40]]])  # part of the support + one far row
            self.out_coords = t[rng.permutation(len(t))].astype(np.int32)
        ref_coords, _ = self.oracle(self.f, self.w, self.b)
        self.g = rng.standard_normal((len(ref_coords), C_OUT))
        self.ref_coords = ref_coords
        y = self.forward(mx.array(self.f), self.weight(self.w), mx.array(self.b))
        # align the cotangent with the library's output rows
        self.rows = rconv.align(np.asarray(y.coords), ref_coords)
        self.g_lib = mx.array(self.g[self.rows].astype(np.float32))

    # -- oracle (float64)
    def oracle(self, f, w, b):
        fn = rconv.normalized_conv if self.case.normalized else rconv.conv
        return fn(
            self.coords, f, w, b, kind=self.case.kind, out_coords=self.out_coords, tile=4, **self.case.kwargs
        )

    def oracle_loss(self, f, w, b) -> float:
        return float(np.sum(self.oracle(f, w, b)[1] * self.g))

    def fd_grads(self, h: float = 1e-5) -> list[np.ndarray]:
        args = [self.f.astype(np.float64), self.w.astype(np.float64), self.b.astype(np.float64)]
        grads = []
        for i, a in enumerate(args):
            g = np.zeros_like(a)
            for j in np.ndindex(a.shape):
                plus = [t.copy() for t in args]
                minus = [t.copy() for t in args]
                plus[i][j] += h
                minus[i][j] -= h
                g[j] = (self.oracle_loss(*plus) - self.oracle_loss(*minus)) / (2 * h)
            grads.append(g)
        return grads

    # -- library (float32)
    def weight(self, w: np.ndarray) -> mx.array:
        size = self.case.kwargs["kernel_size"]
        return mx.array(w) if self.case.layout == "mapped" else mx.array(rconv.mapped_to_dense(w, size))

    def forward(self, f: mx.array, w: mx.array, b: mx.array) -> SparseTensor:
        kw = dict(self.case.kwargs)
        if self.out_coords is not None:
            kw["coordinates"] = self.out_coords
        return self.case.op(self.x.replace(feats=f), w, b, **kw)

    def loss(self, f: mx.array, w: mx.array, b: mx.array) -> mx.array:
        return mx.sum(self.forward(f, w, b).feats * self.g_lib)

    def args(self) -> tuple[mx.array, mx.array, mx.array]:
        return mx.array(self.f), self.weight(self.w), mx.array(self.b)

    def lib_grads(self, fn=None) -> list[np.ndarray]:
        fn = fn or mx.grad(self.loss, argnums=(0, 1, 2))
        df, dw, db = fn(*self.args())
        dw = np.asarray(dw)
        if self.case.layout == "dense":
            dw = rconv.dense_to_mapped(dw)
        return [np.asarray(df), dw, np.asarray(db)]


def _assert_grad_close(actual: np.ndarray, ref: np.ndarray, name: str) -> None:
    scale = max(1.0, float(np.abs(ref).max())) if ref.size else 1.0
    np.testing.assert_allclose(actual, ref, rtol=TOL, atol=TOL * scale, err_msg=name)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_grad_matches_finite_differences(case):
    p = Problem(case)
    ref = p.fd_grads()
    got = p.lib_grads()
    for name, a, r in zip(("features", "weight", "bias"), got, ref, strict=True):
        assert a.shape == r.shape, (name, a.shape, r.shape)
        _assert_grad_close(a, r, name)
    # the weight gradient has the weight's layout and dtype
    df, dw, db = mx.grad(p.loss, argnums=(0, 1, 2))(*p.args())
    assert dw.shape == p.weight(p.w).shape and dw.dtype == mx.float32
    assert df.shape == (len(p.coords), C_IN) and db.shape == (C_OUT,)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_compile_matches_uncompiled(case):
    p = Problem(case, seed=1)
    args = p.args()
    plain = p.loss(*args)
    compiled = mx.compile(p.loss)(*args)
    np.testing.assert_allclose(np.asarray(compiled), np.asarray(plain), rtol=1e-6, atol=1e-6)
    grad = mx.grad(p.loss, argnums=(0, 1, 2))
    for a, b in zip(p.lib_grads(mx.compile(grad)), p.lib_grads(grad), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
    # value_and_grad, compiled, agrees as well
    v, gs = mx.compile(mx.value_and_grad(p.loss, argnums=(0, 1, 2)))(*args)
    np.testing.assert_allclose(float(v), float(plain), rtol=1e-6, atol=1e-6)
    assert len(gs) == 3


def test_grad_through_a_down_up_chain():
    """conv3d k=2 s=2 then conv_transpose3d onto the skip support: d(loss)/d(features)."""
    coords = small_cloud(2, n=20)
    rng = np.random.default_rng(5)
    f = rng.standard_normal((len(coords), C_IN)).astype(np.float32)
    w1 = rng.uniform(-0.5, 0.5, (8, C_IN, 4)).astype(np.float32)
    w2 = rng.uniform(-0.5, 0.5, (8, 4, C_OUT)).astype(np.float32)
    g = rng.standard_normal((len(coords), C_OUT))
    x = SparseTensor(coords, mx.array(f))

    def loss(feats, a, b):
        skip = x.replace(feats=feats)
        down = ops.conv3d(skip, a, kernel_size=2, stride=2)
        up = ops.conv_transpose3d(down, b, kernel_size=2, stride=2, coordinates=skip)
        return mx.sum(up.feats * mx.array(g.astype(np.float32)))

    def ref_loss(feats, a, b):
        mid_c, mid = rconv.conv(coords, feats, a, kind="forward", kernel_size=2, stride=2)
        _, out = rconv.conv(mid_c, mid, b, kind="transposed", kernel_size=2, stride=2, out_coords=coords)
        return float(np.sum(out * g))

    got = mx.grad(loss, argnums=(0, 1, 2))(mx.array(f), mx.array(w1), mx.array(w2))
    args = [f.astype(np.float64), w1.astype(np.float64), w2.astype(np.float64)]
    for i, a in enumerate(args):
        ref = np.zeros_like(a)
        for j in np.ndindex(a.shape):
            plus = [t.copy() for t in args]
            minus = [t.copy() for t in args]
            plus[i][j] += 1e-5
            minus[i][j] -= 1e-5
            ref[j] = (ref_loss(*plus) - ref_loss(*minus)) / 2e-5
        _assert_grad_close(np.asarray(got[i]), ref, f"argument {i}")


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_half_precision_gradients(dtype):
    p = Problem(CASES[3])  # submanifold k=3
    f16 = mx.array(p.f).astype(dtype)
    df, dw = mx.grad(p.loss, argnums=(0, 1))(f16, p.weight(p.w), mx.array(p.b))
    assert df.dtype == dtype and dw.dtype == mx.float32
    df32, dw32 = mx.grad(p.loss, argnums=(0, 1))(f16.astype(mx.float32), p.weight(p.w), mx.array(p.b))
    tol = 2e-3 if dtype == mx.float16 else 1.6e-2
    scale = float(np.abs(np.asarray(df32)).max())
    np.testing.assert_allclose(
        np.asarray(df.astype(mx.float32)), np.asarray(df32), rtol=tol, atol=tol * scale
    )
    np.testing.assert_allclose(
        np.asarray(dw), np.asarray(dw32), rtol=tol, atol=tol * float(np.abs(dw32).max())
    )


def test_empty_input_gradients_are_empty():
    x = SparseTensor(np.zeros((0, 4), np.int32), mx.zeros((0, C_IN)))
    w = mx.ones((C_OUT, 3, 3, 3, C_IN))

    def loss(f, w):
        return mx.sum(ops.subm_conv3d(x.replace(feats=f), w).feats)

    df, dw = mx.grad(loss, argnums=(0, 1))(x.feats, w)
    assert df.shape == (0, C_IN)
    np.testing.assert_array_equal(np.asarray(dw), 0)


def test_relations_built_inside_compile():
    """A compiled U-Net step whose relations are first built while tracing."""
    coords = small_cloud(3, n=20)
    x = SparseTensor(
        coords, mx.array(np.random.default_rng(0).standard_normal((len(coords), C_IN)), mx.float32)
    )

    def step(f, w1, w2):
        skip = x.replace(feats=f)
        down = ops.conv3d(skip, w1, kernel_size=2, stride=2)
        return mx.sum(ops.conv_transpose3d(down, w2, kernel_size=2, stride=2, coordinates=skip).feats)

    w1, w2 = mx.full((4, 2, 2, 2, C_IN), 0.1), mx.full((C_OUT, 2, 2, 2, 4), 0.2)
    compiled = mx.compile(mx.value_and_grad(step, argnums=(0, 1, 2)))
    assert x.coord_manager.relation_count == 0
    v1, g1 = compiled(x.feats, w1, w2)
    assert x.coord_manager.relation_count == 2
    v2, g2 = compiled(2 * x.feats, w1, w2)  # cached relations, retraced or not
    assert x.coord_manager.relation_count == 2
    np.testing.assert_allclose(float(v2), 2 * float(v1), rtol=1e-5)
    v0, g0 = mx.value_and_grad(step, argnums=(0, 1, 2))(x.feats, w1, w2)
    np.testing.assert_allclose(float(v1), float(v0), rtol=1e-6)
    for a, b in zip(g1, g0, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_second_derivatives():
    """grad of a function of the weight gradient: needs the VJP of SparseConvWeightGrad."""
    p = Problem(CASES[3], seed=4)  # submanifold k=3
    w = p.weight(p.w)

    def loss(f, w):
        return mx.sum(p.forward(f, w, mx.array(p.b)).feats ** 2)

    def g(f, w):
        return mx.sum(mx.grad(loss, argnums=1)(f, w) ** 2)

    df = np.asarray(mx.grad(g)(mx.array(p.f), w))
    f0 = p.f.astype(np.float64)
    for j in [(0, 0), (3, 1), (len(f0) - 1, 0)]:
        e = np.zeros_like(f0)
        e[j] = 1e-2
        num = (float(g(mx.array(f0 + e, mx.float32), w)) - float(g(mx.array(f0 - e, mx.float32), w))) / 2e-2
        np.testing.assert_allclose(df[j], num, rtol=1e-2, atol=1e-2 * max(1.0, abs(num)))
