"""Forward-mode derivatives (``mx.jvp``) through lattice's primitives: convolutions (the
features and the weight), their weight gradient, the BLAS GEMM, local and global pooling
(sum, avg, max) and their gradients. Oracles: the adjoint identity <J t, c> = <t, J^T c>
against the VJPs (tested against references elsewhere), and central differences in float64
arithmetic of the float32 op. Tensors include a batch with an empty member."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import lattice
from lattice import ops


def _tensor(c: int = 4, seed: int = 0, empty_member: bool = False) -> lattice.SparseTensor:
    rng = np.random.default_rng(seed)
    xyz = np.unique(rng.integers(-5, 5, size=(60, 3)), axis=0)
    batch = (np.arange(len(xyz)) % 2) * (2 if empty_member else 1)  # batch 1 empty when asked
    coords = np.unique(np.concatenate([batch[:, None], xyz], axis=1), axis=0).astype(np.int32)
    feats = rng.normal(size=(len(coords), c)).astype(np.float32)
    return lattice.SparseTensor(coords, feats)  # batches 0 and 2: member 1 empty


def _check(f, primals, seed=1, fd=True, atol=2e-4):
    """mx.jvp of f at primals along random tangents against the adjoint identity and,
    with ``fd``, central differences."""
    rng = np.random.default_rng(seed)
    tangents = [mx.array(rng.normal(size=p.shape).astype(np.float32)) for p in primals]
    (out,), (jt,) = mx.jvp(lambda *a: f(*a), primals, tangents)
    np.testing.assert_allclose(np.asarray(out), np.asarray(f(*primals)), rtol=1e-6, atol=1e-6)
    c = mx.array(rng.normal(size=out.shape).astype(np.float32))
    _, grads = mx.vjp(lambda *a: f(*a), primals, [c])
    lhs = float(np.sum(np.asarray(jt, np.float64) * np.asarray(c, np.float64)))
    rhs = sum(
        float(np.sum(np.asarray(g, np.float64) * np.asarray(t, np.float64)))
        for g, t in zip(grads, tangents, strict=True)
    )
    assert abs(lhs - rhs) <= 1e-4 * max(1.0, abs(lhs)), (lhs, rhs)
    if fd:
        eps = 1e-3
        plus = f(*[p + eps * t for p, t in zip(primals, tangents, strict=True)])
        minus = f(*[p - eps * t for p, t in zip(primals, tangents, strict=True)])
        want = (np.asarray(plus, np.float64) - np.asarray(minus, np.float64)) / (2 * eps)
        np.testing.assert_allclose(np.asarray(jt), want, rtol=2e-2, atol=atol / eps)
    return jt


@pytest.mark.parametrize("empty_member", [False, True])
@pytest.mark.parametrize(
    "op, wshape, kwargs",
    [
        ("subm_conv3d", (27, 4, 3), {}),
        ("conv3d", (8, 4, 3), {"kernel_size": 2, "stride": 2}),
        ("conv3d", (27, 4, 3), {"kernel_size": 3, "stride": 2}),
        ("conv_transpose3d", (8, 4, 3), {"kernel_size": 2, "stride": 2}),
    ],
)
def test_jvp_through_convolutions_in_features_and_weight(op, wshape, kwargs, empty_member):
    x = _tensor(empty_member=empty_member)
    w = mx.array(np.random.default_rng(3).normal(size=wshape).astype(np.float32))
    fn = getattr(ops, op)
    if op == "conv_transpose3d":
        x = ops.conv3d(x, mx.ones((8, 4, 4)), kernel_size=2, stride=2)  # a coarse level to go up from

    def f(feats, weight):
        return fn(x.replace(feats=feats), weight, **kwargs).feats

    _check(f, [x.feats, w])
    # linear in each argument alone
    (_, (jx,)) = mx.jvp(lambda v: f(v, w), [x.feats], [mx.ones_like(x.feats)])
    np.testing.assert_allclose(np.asarray(jx), np.asarray(f(mx.ones_like(x.feats), w)), rtol=1e-5, atol=1e-5)


def test_jvp_through_the_weight_gradient_and_second_order():
    """Forward-over-reverse: the JVP of a gradient (a Hessian-vector product) goes through
    SparseConvWeightGrad and the transposed convolution."""
    x = _tensor()
    w = mx.array(np.random.default_rng(4).normal(size=(27, 4, 3)).astype(np.float32))

    def grad_w(feats, weight):
        def loss(v):
            return mx.sum(mx.square(ops.subm_conv3d(x.replace(feats=feats), v).feats))

        return mx.grad(loss)(weight)

    _check(grad_w, [x.feats, w], fd=True, atol=5e-3)


def test_jvp_through_the_blas_gemm():
    x = _tensor(c=5)
    w = mx.array(np.random.default_rng(5).normal(size=(7, 5)).astype(np.float32))
    _check(lambda feats, weight: ops.linear(x.replace(feats=feats), weight).feats, [x.feats, w])


@pytest.mark.parametrize("empty_member", [False, True])
@pytest.mark.parametrize("mode", ["sum", "avg", "max"])
def test_jvp_through_local_and_global_pooling(mode, empty_member):
    x = _tensor(empty_member=empty_member)
    local = getattr(ops, f"{mode}_pool3d")

    def f(feats):
        return local(x.replace(feats=feats), kernel_size=2, stride=2).feats

    _check(f, [x.feats], fd=mode != "max")  # max: piecewise linear, differences may cross a tie

    def g(feats):
        return ops.global_pool(x.replace(feats=feats), mode=mode)

    if mode == "max" and empty_member:  # undefined there: an error, not a derivative
        with pytest.raises(ValueError, match="empty batch member"):
            mx.jvp(g, [x.feats], [x.feats])
        return
    _check(g, [x.feats], fd=mode != "max")


@pytest.mark.parametrize("mode", ["sum", "avg", "max"])
def test_jvp_through_pooling_gradients(mode):
    x = _tensor()
    local = getattr(ops, f"{mode}_pool3d")

    def grad(feats):
        return mx.grad(lambda v: mx.sum(mx.square(local(x.replace(feats=v), kernel_size=2, stride=2).feats)))(
            feats
        )

    _check(grad, [x.feats], fd=mode != "max")

    def grad_global(feats):
        return mx.grad(lambda v: mx.sum(mx.square(ops.global_pool(x.replace(feats=v), mode=mode))))(feats)

    _check(grad_global, [x.feats], fd=mode != "max")
