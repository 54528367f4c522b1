"""The MLX side of the GPU pooling routes — custom VJPs, per-offset weights, the argmax the
backward reuses, the divisor of global averages — checked everywhere: the kernels are
replaced by NumPy references and MLX's GPU stream by the CPU stream, and every result
and gradient is compared with the CPU route. (The kernels themselves are checked against
the CPU route on a GPU in test_cuda_routes.py; this file runs in CI without one.)
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from test_pool import cloud_coords, features

from lattice import ops
from lattice.backends.cuda import pool as cuda_pool
from lattice.backends.cuda import relations as cuda_relations
from lattice.core import SparseTensor
from lattice.core.kernel import KernelSpec
from lattice.core.relation import RelationKind
from lattice.routing.explain import plan_of


def _ref_pool(feats, nmap, mode, weights=None):
    """kernels/pool.inc's pool_map in NumPy: (pooled, argmax row or -1)."""
    x = np.asarray(feats.astype(mx.float32))
    m = np.asarray(nmap)
    w = np.ones(m.shape[1]) if weights is None else np.asarray(weights)
    y = np.zeros((m.shape[0], x.shape[1]), np.float32)
    arg = np.full(y.shape, -1, np.int32)
    for o, rows in enumerate(m):
        present = rows >= 0
        if not present.any():
            continue
        vals, ws = x[rows[present]], w[present]
        if mode == "max":
            y[o] = vals.max(axis=0)
            arg[o] = [rows[present][vals[:, c] == y[o, c]].min() for c in range(x.shape[1])]
        else:
            y[o] = (ws[:, None] * vals).sum(axis=0) / (ws.sum() if mode == "avg" else 1.0)
    return mx.array(y).astype(feats.dtype), mx.array(arg)


def _ref_invert(nmap, in_count):
    m = np.asarray(nmap)
    inv = np.full((in_count, m.shape[1]), -1, np.int32)
    o, k = np.nonzero(m >= 0)
    inv[m[o, k], k] = o
    return mx.array(inv)


def _ref_global_sum(feats, batch, batch_size):
    acc = np.zeros((batch_size, feats.shape[1]), np.float32)
    np.add.at(acc, np.asarray(batch), np.asarray(feats.astype(mx.float32)))
    return mx.array(acc)


def _ref_global_argmax(feats, batch, batch_size):
    x, b = np.asarray(feats.astype(mx.float32)), np.asarray(batch)
    arg = np.zeros((batch_size, x.shape[1]), np.int32)
    for m in np.unique(b):
        rows = np.flatnonzero(b == m)
        vals = x[rows]
        arg[m] = [rows[vals[:, c] == vals[:, c].max()].min() for c in range(x.shape[1])]
    return mx.array(arg)


@pytest.fixture
def kernels_on_the_cpu(monkeypatch, cpu_device):
    monkeypatch.setattr(mx, "gpu", mx.cpu)
    monkeypatch.setattr(cuda_pool, "pool", _ref_pool)
    monkeypatch.setattr(cuda_relations, "invert_map", _ref_invert)
    monkeypatch.setattr(cuda_pool, "_global_sum", _ref_global_sum)
    monkeypatch.setattr(cuda_pool, "_global_argmax", _ref_global_argmax)


def _tensor(seed=3, channels=5, batched=False, close_gaps=False):
    c = cloud_coords("batched" if batched else "random_sparse")
    if close_gaps:  # renumber the members 0, 1, ... (no empty member)
        c[:, 0] = np.unique(c[:, 0], return_inverse=True)[1]
    f = features(len(c), channels, seed=seed)
    f[::4] = np.round(f[::4])  # ties for max
    return SparseTensor(c, mx.array(f))


def _compare(gpu_fn, cpu_fn, x, tol=1e-5):
    y, ref = gpu_fn(x.feats), cpu_fn(x.feats)
    np.testing.assert_allclose(np.asarray(y), np.asarray(ref), rtol=tol, atol=tol)
    wt = mx.array(np.random.default_rng(7).normal(size=tuple(ref.shape)).astype(np.float32))
    g = mx.grad(lambda v: (gpu_fn(v) * wt).sum())(x.feats)
    r = mx.grad(lambda v: (cpu_fn(v) * wt).sum())(x.feats)
    np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=tol, atol=tol)


@pytest.mark.usefixtures("kernels_on_the_cpu")
@pytest.mark.parametrize("mode", ["sum", "max", "avg"])
def test_map_pool_and_its_vjp(mode):
    x = _tensor()
    spec = KernelSpec(3, 2, 0, op="pool")
    rel = x.coord_manager.relation(RelationKind.FORWARD, x.coord_key, spec, device="cpu")
    op = getattr(ops, f"{mode}_pool3d")
    _compare(
        lambda v: cuda_pool.map_pool(v, rel, mode),
        lambda v: op(x.replace(feats=v), kernel_size=3, stride=2, device="cpu").feats,
        x,
    )


@pytest.mark.usefixtures("kernels_on_the_cpu")
@pytest.mark.parametrize("method", ["transpose", "trilinear"])
def test_weighted_map_pool_of_upsampling_and_its_vjp(method):
    x = _tensor()
    x = SparseTensor(np.asarray(x.coords), x.feats, 2)
    plan = (
        plan_of(ops.trilinear_upsample3d, x, device="cpu")
        if method == "trilinear"
        else plan_of(ops.pool_transpose3d, x, kernel_size=3, stride=2, device="cpu")
    )
    op = ops.trilinear_upsample3d if method == "trilinear" else ops.pool_transpose3d
    kw = {} if method == "trilinear" else {"kernel_size": 3, "stride": 2}
    _compare(
        lambda v: cuda_pool.map_pool(v, plan.edges, "avg", plan.weights),
        lambda v: op(x.replace(feats=v), **kw, device="cpu").feats,
        x,
    )


@pytest.mark.usefixtures("kernels_on_the_cpu")
@pytest.mark.parametrize("mode", ["sum", "max", "avg"])
def test_global_pool_and_its_vjp(mode):
    x = _tensor(batched=True, close_gaps=mode == "max")  # sum / avg: member 1 empty; max needs rows
    size = None if mode == "max" else x.batch_size + 2  # trailing empty members for sum / avg
    _compare(
        lambda v: cuda_pool.global_pool(
            v, x.batch_indices, size or x.batch_size, mode, mx.array(x.batch_counts)
        ),
        lambda v: ops.global_pool(x.replace(feats=v), mode=mode, batch_size=size, device="cpu"),
        x,
    )
