"""Lazily counted sets (``CoordinateManager(lazy_rows=True)``): upper-bound buffers plus a lazy count.

A set a GPU builder made for a ``lazy_rows`` manager holds its live rows first and spare rows
(batch index -1) after them; its tensors carry the buffer and the count as a lazy
``active_rows`` array. The oracle of every test here is the same computation on an
exact tensor (its own manager): on the live rows, every op gives what it gives there.
``lazy_copy`` registers such a set the way the GPU builder does, so the semantics run on
any device: on the CPU the routes read the count and run on the live rows; on a GPU the
kernel routes run over the whole buffer without reading it. The GPU builder itself
(``cuda.downsample(..., lazy=True)``) and a whole U-Net without host reads are tested
where MLX has a CUDA device.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
from mlx.utils import tree_flatten

import lattice
from lattice import nn, ops
from lattice.core.coordinates import CoordinateManager, _Pending
from lattice.core.rows import RowCount, host_reads
from lattice.models import minkunet

HAS_CUDA = hasattr(mx, "cuda") and mx.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device in this process")


def exact_tensor(seed=0, n=600, span=6, c=4, batches=(0, 2), stride=1) -> lattice.SparseTensor:
    rng = np.random.default_rng(seed)
    xyz = np.unique(rng.integers(-span, span, (n, 3)), axis=0)
    rng.shuffle(xyz)
    b = rng.choice(batches, len(xyz))  # batch 1 empty
    coords = np.concatenate([b[:, None], xyz], axis=1).astype(np.int32)
    return lattice.SparseTensor(coords, rng.normal(size=(len(coords), c)).astype(np.float32), stride)


def lazy_copy(x: lattice.SparseTensor, spare: int = 37, seed: int = 9) -> lattice.SparseTensor:
    """``x``'s rows followed by ``spare`` rows of batch index -1 and large junk features, on a
    set registered as a GPU builder registers one under ``lazy_rows`` (its own manager)."""
    n, c = x.active_count, x.channels
    coords = mx.concatenate([x.coords[:n], mx.full((spare, 4), -1, dtype=mx.int32)])
    junk = mx.array(np.random.default_rng(seed).normal(size=(spare, c)).astype(np.float32) * 1e3)
    feats = mx.concatenate([x.feats[:n], junk.astype(x.dtype)])
    manager = CoordinateManager()
    key = manager._register(_Pending(coords, RowCount(mx.array(n, dtype=mx.int32))), x.stride)
    return lattice.SparseTensor(coords, feats, x.stride, coord_key=key, coord_manager=manager)


def live(y: lattice.SparseTensor) -> tuple[np.ndarray, np.ndarray]:
    n = y.active_count
    return np.asarray(y.coords[:n]), np.asarray(y.feats[:n].astype(mx.float32))


def assert_same(y_lazy, y_exact, tol=1e-4):
    if isinstance(y_exact, mx.array):
        np.testing.assert_allclose(np.asarray(y_lazy), np.asarray(y_exact), rtol=tol, atol=tol)
        return
    (cl, fl), (ce, fe) = live(y_lazy), live(y_exact)
    np.testing.assert_array_equal(cl, ce)
    np.testing.assert_allclose(fl, fe, rtol=tol, atol=tol)
    assert y_lazy.stride == y_exact.stride


def _weight(c_in, c_out, k, seed=3):
    return mx.array(np.random.default_rng(seed).normal(size=(c_out, k, k, k, c_in)).astype(np.float32) * 0.3)


W3, W2 = _weight(4, 5, 3), _weight(4, 5, 2)
LIN = mx.array(np.random.default_rng(4).normal(size=(6, 4)).astype(np.float32))

OPS = {
    "relu": lambda x: ops.relu(x),
    "linear": lambda x: ops.linear(x, LIN),
    "layer_norm": lambda x: ops.layer_norm(x),
    "neg_scale": lambda x: -(x * 2.0),
    "subm_conv3d": lambda x: ops.subm_conv3d(x, W3, kernel_size=3),
    "conv3d_k2s2": lambda x: ops.conv3d(x, W2, kernel_size=2, stride=2),
    "conv3d_k3s2": lambda x: ops.conv3d(x, W3, kernel_size=3, stride=2),
    "down_up": lambda x: ops.generative_conv_transpose3d(
        ops.conv3d(x, W2, kernel_size=2, stride=2), _weight(5, 3, 2), kernel_size=2, stride=2, coordinates=x
    ),
    "max_pool": lambda x: ops.max_pool3d(x, kernel_size=2, stride=2),
    "avg_pool_k3": lambda x: ops.avg_pool3d(x, kernel_size=3, stride=2),
    "add_self": lambda x: ops.sparse_add(x, ops.relu(x)),
    "cat_self": lambda x: ops.cat([x, x]),
    "add_other": lambda x: ops.sparse_add(x, exact_tensor(seed=5), join="outer"),
    "mul_other": lambda x: ops.sparse_mul(x, exact_tensor(seed=5)),
    "left_join": lambda x: ops.sparse_add(x, exact_tensor(seed=5), join="left"),
    "global_avg": lambda x: ops.global_avg_pool(x),
    "global_sum": lambda x: ops.global_sum_pool(x, batch_size=3),
}


# ops from a coarse level (stride 2) to generated or finer support
COARSE_OPS = {
    "generated_support": lambda x: ops.generative_conv_transpose3d(
        x, _weight(4, 3, 2), kernel_size=2, stride=2
    ),
    "conv_transpose_k3": lambda x: ops.conv_transpose3d(x, _weight(4, 3, 3), kernel_size=3, stride=2),
    "pool_transpose": lambda x: ops.pool_transpose3d(x, kernel_size=2, stride=2),
    "trilinear": lambda x: ops.trilinear_upsample3d(x, stride=2),
}


@pytest.mark.parametrize("name", sorted(OPS) + sorted(COARSE_OPS))
def test_ops_on_a_lazily_counted_set_match_the_exact_set(name):
    fn, stride = (OPS[name], 1) if name in OPS else (COARSE_OPS[name], 2)
    x = exact_tensor(stride=stride)
    xl = lazy_copy(x)
    assert xl.lazy and xl.capacity == x.active_count + 37 and xl.active_count == x.active_count
    assert_same(fn(xl), fn(x))


def test_feature_ops_and_joins_on_one_set_do_not_read_the_count():
    x = lazy_copy(exact_tensor())
    n = exact_tensor().active_count
    bn, lin = nn.BatchNorm(4), nn.Linear(4, 4)
    reads = host_reads()
    y = ops.cat([nn.ReLU()(bn(x)), lin(x)])
    y = ops.sparse_add(y, y * 0.5)
    mx.eval(y.feats, bn.running_mean)
    assert reads.count == 0 and not x._count.read and y.lazy
    assert y.capacity == x.capacity and y.coord_key == x.coord_key
    assert y.active_count == x.active_count == n  # one read, shared by the set
    assert reads.count == 1 and x._count.read


@pytest.mark.parametrize("track", [True, False])
def test_batch_norm_statistics_cover_only_the_live_rows(track):
    x = exact_tensor(c=3)
    xl = lazy_copy(x)
    mods = [nn.BatchNorm(3, track_running_stats=track) for _ in range(2)]
    mods[1].update(mods[0].parameters())
    out_e, out_l = mods[0](x), mods[1](xl)
    assert_same(out_l, out_e, 1e-4)
    assert np.all(np.asarray(out_l.feats[x.active_count :]) == 0)  # spare rows zeroed
    if track:
        for a in ("running_mean", "running_var"):
            np.testing.assert_allclose(np.asarray(mods[1][a]), np.asarray(mods[0][a]), rtol=1e-5, atol=1e-6)
    for m in mods:
        m.eval()
    assert_same(mods[1](xl), mods[0](x))


def test_batch_norm_op_statistics_cover_only_the_live_rows():
    x = exact_tensor(c=3)
    xl = lazy_copy(x)
    reads = host_reads()
    out_l = ops.batch_norm(xl)  # mean=None, var=None: the statistics of the live rows
    mx.eval(out_l.feats)
    assert reads.count == 0 and out_l.lazy
    assert_same(out_l, ops.batch_norm(x), 1e-4)
    assert np.all(np.asarray(out_l.feats[x.active_count :]) == 0)  # spare rows zeroed


def test_gradients_through_a_lazily_counted_set_match():
    x = exact_tensor()
    xl = lazy_copy(x)
    n = x.active_count

    def loss(w, t):
        y = ops.relu(ops.subm_conv3d(t, w, kernel_size=3))
        z = ops.conv3d(y, _weight(5, 2, 2), kernel_size=2, stride=2)
        return mx.sum(mx.square(z.feats[: z.active_count])) + mx.sum(y.feats[:n] * 0.1)

    ge = mx.grad(loss)(W3, x)
    gl = mx.grad(loss)(W3, xl)
    np.testing.assert_allclose(np.asarray(gl), np.asarray(ge), rtol=1e-4, atol=1e-3)


def test_a_lazily_counted_set_is_checked_and_exported_by_its_live_rows():
    x = exact_tensor()
    xl = lazy_copy(x)
    with pytest.raises(ValueError, match="buffer of"):
        lattice.SparseTensor(
            xl.coords[:10], xl.feats[:10], coord_key=xl.coord_key, coord_manager=xl.coord_manager
        )
    with pytest.raises(ValueError, match="takes its own active_rows"):
        lattice.SparseTensor(
            xl.coords,
            xl.feats,
            coord_key=xl.coord_key,
            coord_manager=xl.coord_manager,
            active_rows=mx.array(3),
        )
    comp = xl.export_components()  # the whole buffer and its count
    assert comp.coords.shape[0] == xl.capacity and comp.active_rows.tolist() == [x.active_count]
    assert lattice.SparseTensor.from_components(comp).same_rows(x)
    np.testing.assert_array_equal(np.asarray(xl.batch_counts), np.asarray(x.batch_counts))
    assert len(xl) == x.active_count and xl.shape == x.shape
    # the CPU table a CPU route asks for holds only the live rows
    assert xl.coord_manager.table(xl.coord_key).size == x.active_count


def test_lazy_rows_is_an_argument_of_the_manager_and_off_by_default():
    assert not CoordinateManager().lazy_rows and not exact_tensor().coord_manager.lazy_rows
    m = CoordinateManager(lazy_rows=True)
    assert m.lazy_rows and "lazy_rows=True" in repr(m)
    assert not hasattr(lattice, "lazy_rows")  # no process-wide mode
    with pytest.raises(TypeError):
        CoordinateManager(True)  # keyword-only


# ---- the GPU builder --------------------------------------------------------------------------


@needs_cuda
@pytest.mark.parametrize("stride", [(2, 2, 2), (3, 1, 2)])
def test_cuda_downsample_lazy_buffer_matches_the_eager_set(stride):
    from lattice.backends.cuda import coords as cuda

    coords = mx.array(np.asarray(exact_tensor(n=900).coords))
    down_e, inv_e, none = cuda.downsample(coords, stride)
    down_l, inv_l, count = cuda.downsample(coords, stride, lazy=True)
    m = int(count.item())
    assert none is None and m == down_e.shape[0] and down_l.shape[0] == coords.shape[0]
    np.testing.assert_array_equal(np.asarray(down_l[:m]), np.asarray(down_e))
    assert np.all(np.asarray(down_l[m:]) == -1)
    np.testing.assert_array_equal(np.asarray(inv_l), np.asarray(inv_e))
    # a lazily counted input: its spare rows take no part, their inverse is -1
    spare = mx.full((50, 4), -1, dtype=mx.int32)
    buf = mx.concatenate([coords, spare])
    down_b, inv_b, count_b = cuda.downsample(
        buf, stride, mx.array(coords.shape[0], dtype=mx.int32), lazy=True
    )
    assert int(count_b.item()) == m
    np.testing.assert_array_equal(np.asarray(down_b[:m]), np.asarray(down_e))
    np.testing.assert_array_equal(np.asarray(inv_b[: coords.shape[0]]), np.asarray(inv_e))
    assert np.all(np.asarray(inv_b[coords.shape[0] :]) == -1)
    # eager with a lazily counted input: exactly the live set
    down_x, _, _ = cuda.downsample(buf, stride, mx.array(coords.shape[0], dtype=mx.int32))
    np.testing.assert_array_equal(np.asarray(down_x), np.asarray(down_e))


def _scene(seed=0, n=4000):
    rng = np.random.default_rng(seed)
    pts = rng.uniform(-2, 2, size=(n, 3)).astype(np.float32)
    feats = np.stack([np.ones(n), pts[:, 2]], axis=1).astype(np.float32)
    b = (np.arange(n) % 2).astype(np.int32)
    return ops.voxelize(pts, feats, 0.2, batch_indices=b)


@needs_cuda
def test_unet_under_lazy_rows_reads_nothing_and_matches_eager():
    mx.random.seed(2)
    model = minkunet(14, 2, 3, width=8)
    labels = None

    def run(lazy: bool):
        x = _scene()
        nonlocal labels
        labels = mx.array(np.arange(x.active_count) % 3)

        def loss(m):
            return mnn.losses.cross_entropy(m(x).feats, labels, reduction="mean")

        x.coord_manager.lazy_rows = lazy  # the mode of this family of tensors
        reads = host_reads()
        value, grads = mnn.value_and_grad(model, loss)(model)
        mx.eval(value, grads)
        return float(value), grads, reads.count

    model.train()
    v_e, g_e, reads_e = run(False)
    v_l, g_l, reads_l = run(True)
    assert reads_l == 0, reads_l
    assert reads_e == 1, reads_e  # eager: the four levels' sizes in one read (queue_levels)
    assert abs(v_l - v_e) <= 1e-3 * abs(v_e)
    flat_e = dict(tree_flatten(g_e))
    for k, g in tree_flatten(g_l):
        np.testing.assert_allclose(np.asarray(g), np.asarray(flat_e[k]), rtol=2e-2, atol=2e-3, err_msg=k)
