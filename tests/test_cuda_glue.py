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
from reference import conv as rconv
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


# ---- convolution: the glue of lattice.backends.cuda.conv ----------------------------------


def _f32(a):
    return np.asarray(a.astype(mx.float32))


def _ref_conv(x, w, nmap, order):
    """kernels/conv.inc's implicit GEMM (``rconv.map_conv``), rows taken in any permutation."""
    assert sorted(np.asarray(order).tolist()) == list(range(nmap.shape[0]))  # a permutation of the rows
    return mx.array(rconv.map_conv(_f32(x), _f32(w), np.asarray(nmap)).astype(np.float32)).astype(x.dtype)


def _ref_weight_grad(x, dy, nmap, order):
    """dW[k] = gather(x, map[:, k])^T @ dy (``rconv.map_weight_grad``), float32."""
    return mx.array(rconv.map_weight_grad(_f32(x), _f32(dy), np.asarray(nmap)).astype(np.float32))


@pytest.fixture
def conv_kernels_on_the_cpu(monkeypatch, cpu_device):
    """The CUDA convolution's kernels as NumPy, and a count of the inverse maps built."""
    from lattice.backends.cuda import conv as cuda_conv

    inverted = []

    def counting_invert(nmap, in_count):
        inverted.append(int(nmap.shape[1]))
        return _ref_invert(nmap, in_count)

    monkeypatch.setattr(mx, "gpu", mx.cpu)
    monkeypatch.setattr(cuda_conv, "_conv_kernel", _ref_conv)
    monkeypatch.setattr(cuda_conv, "_weight_grad", _ref_weight_grad)
    monkeypatch.setattr(cuda_conv, "row_order", lambda m: mx.arange(m.shape[0] - 1, -1, -1).astype(mx.int32))
    monkeypatch.setattr(cuda_relations, "invert_map", counting_invert)
    return inverted


@pytest.mark.parametrize(
    "kernel_size, dilation", [(3, 1), (5, 1), ((3, 1, 5), 1), (3, 2)], ids=["k3", "k5", "k315", "k3d2"]
)
def test_submanifold_inverse_map_is_the_map_with_offsets_reversed(kernel_size, dilation, cpu_device):
    """A centred odd kernel's offsets are symmetric (offset K-1-k is -offset k) and a
    submanifold relation maps a set onto itself, so map[o, k] = i exactly when
    map[i, K-1-k] = o: its inverse map is its own map read with the offsets reversed."""
    x = _tensor(batched=True)
    spec = KernelSpec(kernel_size, 1, 0, dilation)
    rel = x.coord_manager.relation(RelationKind.SUBMANIFOLD, x.coord_key, spec, device="cpu")
    offsets = np.asarray(spec.offsets())
    np.testing.assert_array_equal(offsets[::-1], -offsets)
    m = np.asarray(rel.neighbor_map)
    assert (m >= 0).sum() > m.shape[0]  # rows with neighbours besides themselves
    np.testing.assert_array_equal(np.asarray(_ref_invert(rel.neighbor_map, rel.in_count)), m[:, ::-1])


@pytest.mark.parametrize("kernel_size, dilation", [(3, 1), ((3, 1, 5), 2)], ids=["k3", "k315d2"])
def test_conv_input_gradient_of_a_submanifold_relation_runs_over_its_own_map(
    kernel_size, dilation, conv_kernels_on_the_cpu
):
    """The input gradient of a submanifold convolution is the forward convolution over the
    same map with W's offsets reversed and transposed: no inverse map is built, and the
    gradients (and a second derivative) equal the CPU route's. A strided convolution's
    input gradient still reads its inverse map."""
    from lattice.backends.cuda import conv as cuda_conv
    from lattice.ops.conv import mapped_weight

    x = _tensor(batched=True, channels=4)
    spec = KernelSpec(kernel_size, 1, 0, dilation)
    rng = np.random.default_rng(5)
    w = mx.array(rng.normal(size=(6, *spec.size, 4)).astype(np.float32) * 0.3)
    rel = x.coord_manager.relation(RelationKind.SUBMANIFOLD, x.coord_key, spec, device="cpu")
    cot = mx.array(rng.normal(size=(x.feats.shape[0], 6)).astype(np.float32))

    def glue(f, W):
        return cuda_conv.implicit_gemm(f, mapped_weight(W, spec, "t"), rel)

    def cpu(f, W):
        return ops.subm_conv3d(
            x.replace(feats=f), W, kernel_size=kernel_size, dilation=dilation, device="cpu"
        ).feats

    for fn in (glue, cpu):
        np.testing.assert_allclose(
            np.asarray(fn(x.feats, w)), np.asarray(cpu(x.feats, w)), rtol=1e-5, atol=1e-5
        )
    grads = [
        mx.grad(lambda f, W, fn=fn: (fn(f, W) * cot).sum(), argnums=(0, 1))(x.feats, w) for fn in (glue, cpu)
    ]
    for a, b in zip(*grads, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4)

    def penalty(fn, W):  # d/dW |d loss / d f|^2: the weight gradient's own VJP
        g = mx.grad(lambda f: (fn(f, W) ** 2).sum())(x.feats)
        return (g**2).sum()

    a, b = mx.grad(lambda W: penalty(glue, W))(w), mx.grad(lambda W: penalty(cpu, W))(w)
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-4 * float(np.abs(b).max()))
    assert conv_kernels_on_the_cpu == []  # no inverse map for the submanifold relation

    down = KernelSpec(2, 2, 0, 1)
    strided = x.coord_manager.relation(RelationKind.FORWARD, x.coord_key, down, device="cpu")
    wd = mx.array(rng.normal(size=(8, 4, 6)).astype(np.float32))
    mx.eval(mx.grad(lambda f: cuda_conv.implicit_gemm(f, wd, strided).sum())(x.feats))
    assert conv_kernels_on_the_cpu == [8]  # the strided relation's inverse map, once


def test_only_a_managers_submanifold_relation_counts_as_mirrored(cpu_device):
    """The mirrored input gradient (CUDA and CPU routes) rests on the manager's rule for
    submanifold relations; a forward relation, and a relation of given edges labelled
    "submanifold" (mlx-lattice's constructor: here a one-sided, asymmetric edge list), are not
    taken as mirrored."""
    from mlx_lattice.core import KernelRelation as GivenRelation

    x = _tensor()
    sub = x.coord_manager.relation(RelationKind.SUBMANIFOLD, x.coord_key, KernelSpec(3), device="cpu")
    fwd = x.coord_manager.relation(RelationKind.FORWARD, x.coord_key, KernelSpec(2, 2), device="cpu")
    offsets = tuple(tuple(o) for o in np.asarray(KernelSpec(3).offsets()).tolist())
    given = GivenRelation(
        mx.array([0, 1], dtype=mx.int32),
        mx.array([1, 2], dtype=mx.int32),
        mx.array([0, 0], dtype=mx.int32),
        kernel_offsets=offsets,
        out_coords=mx.zeros((3, 4), dtype=mx.int32),
        n_in_capacity=3,
        kind="submanifold",
    )
    assert given.kind == RelationKind.SUBMANIFOLD
    assert [r.mirrored for r in (sub, fwd, given)] == [True, False, False]


def test_start_queues_outside_transformations_and_is_inert_inside(monkeypatch):
    """``lattice.core.buffers.start`` (the GPU routes queue coarse-level counts and network
    stages with it): values unchanged; inside ``mx.grad`` and ``mx.compile``,
    where MLX refuses ``async_eval``, nothing is raised and the result is the same."""
    from lattice.core.buffers import start

    a = mx.array(np.arange(6, dtype=np.float32)) * 2
    start(a)
    np.testing.assert_array_equal(np.asarray(a), np.arange(6) * 2.0)

    def f(x):
        y = x * x
        start(y)
        return y.sum()

    x = mx.array([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(np.asarray(mx.grad(f)(x)), [2.0, 4.0, 6.0])
    assert float(mx.compile(f)(x)) == 14.0

    # empty arrays are not queued (MLX 0.32.4's CUDA backend mishandles evaluated empty
    # results), the others are
    queued = []
    monkeypatch.setattr(mx, "async_eval", lambda *arrays: queued.append([int(v.size) for v in arrays]))
    empty, full = mx.zeros((0, 4)), mx.ones((3,))
    start(empty)
    start(empty, full)
    assert queued == [[3]]


def test_no_raw_async_eval_in_the_library():
    """One way to queue work early: ``lattice.core.buffers.start``."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    found = [
        f"{p.relative_to(root)}:{i}"
        for pkg in ("lattice", "mlx_lattice")
        for p in sorted((root / pkg).rglob("*.py"))
        if not (p.name == "buffers.py" and p.parent.name == "core")
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "mx.async_eval(" in line and not line.lstrip().startswith(("#", '"', "``"))
    ]
    assert not found, found
