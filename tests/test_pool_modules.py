"""``lattice.nn.pool``: exactly the seed's constructor signatures and defaults, each
module checked against its functional op, forward and backward, and the routes the
ops take."""

from __future__ import annotations

import inspect

import mlx.core as mx
import mlx.nn as nn
import numpy as np
import pytest
from test_pool import cloud_coords, features

from lattice import ops
from lattice.core import SparseTensor
from lattice.nn import pool as P
from lattice.routing import (
    Capability,
    GlobalPoolRequest,
    Tier,
    UpsampleRequest,
    route_global_pool,
    route_pool,
    route_upsample,
)
from lattice.routing.pool import PoolRequest, route_pool_backward, route_upsample_backward

KERNEL = [("kernel_size", 2), ("stride", 2), ("padding", 0), ("dilation", 1)]
SEED_SIGNATURES = {
    "Pool3d": [("mode", "sum"), *KERNEL],
    "SumPool3d": KERNEL,
    "MaxPool3d": KERNEL,
    "AvgPool3d": KERNEL,
    "PoolTranspose3d": KERNEL,
    "TrilinearUpsample3d": [("stride", 2)],
    "GlobalSumPool": [],
    "GlobalAvgPool": [],
    "GlobalMaxPool": [],
}


@pytest.mark.parametrize("name", sorted(SEED_SIGNATURES))
def test_constructor_signatures_match_the_seed(name):
    cls = getattr(P, name)
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    assert [(p.name, p.default) for p in params] == SEED_SIGNATURES[name]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)
    module = cls()
    assert isinstance(module, nn.Module)
    assert module.parameters() == {} and module.trainable_parameters() == {}
    assert cls.__doc__


def test_bases_follow_the_seed():
    for name in ("SumPool3d", "MaxPool3d", "AvgPool3d"):
        assert getattr(P, name).__bases__ == (P.Pool3d,)
    assert P.MaxPool3d().mode is P.PoolMode.MAX and P.Pool3d().mode == "sum"


def test_documented_import_path():
    alias = pytest.importorskip("mlx_lattice.nn.pool")
    for name in ("AvgPool3d", "MaxPool3d", "SumPool3d"):  # a real module re-exporting lattice's classes
        assert getattr(alias, name) is getattr(P, name)


def test_arguments_are_normalised_and_checked():
    m = P.Pool3d(mode="avg", kernel_size=(3, 1, 2), stride=[2, 1, 1], padding=1, dilation=(1, 2, 1))
    assert (m.kernel_size, m.stride, m.padding, m.dilation) == ((3, 1, 2), (2, 1, 1), (1, 1, 1), (1, 2, 1))
    assert "mode=avg" in repr(m) and "kernel_size=(3, 1, 2)" in repr(m)
    assert P.TrilinearUpsample3d(stride=(1, 2, 3)).stride == (1, 2, 3)
    with pytest.raises(ValueError, match=r"^\[MaxPool3d\] kernel_size must be positive, got \(2, 0, 2\)$"):
        P.MaxPool3d(kernel_size=(2, 0, 2))
    with pytest.raises(
        ValueError, match=r"\[Pool3d\] mode must be one of \('sum', 'max', 'avg'\), got 'mean'"
    ):
        P.Pool3d(mode="mean")
    with pytest.raises(ValueError, match=r"\[TrilinearUpsample3d\] stride must be positive, got \(0, 0, 0\)"):
        P.TrilinearUpsample3d(stride=0)
    with pytest.raises(ValueError, match=r"\[PoolTranspose3d\] padding must be >= 0"):
        P.PoolTranspose3d(padding=-1)
    with pytest.raises(TypeError):
        P.AvgPool3d(2)  # keyword-only


def _x(name="batched", c=4, stride=1):
    coords = cloud_coords(name)
    return SparseTensor(coords, mx.array(features(len(coords), c)), stride)


def _same(a, b):
    if isinstance(a, SparseTensor):
        assert a.coord_key == b.coord_key and a.stride == b.stride
        a, b = a.feats, b.feats
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


LOCAL = [
    (P.SumPool3d(), lambda x: ops.sum_pool3d(x)),
    (P.MaxPool3d(kernel_size=3, padding=1), lambda x: ops.max_pool3d(x, kernel_size=3, padding=1)),
    (P.AvgPool3d(stride=(1, 2, 3)), lambda x: ops.avg_pool3d(x, stride=(1, 2, 3))),
    (
        P.Pool3d(mode="max", kernel_size=3, stride=2, padding=1, dilation=2),
        lambda x: ops.pool3d(x, mode="max", kernel_size=3, stride=2, padding=1, dilation=2),
    ),
    (P.Pool3d(), lambda x: ops.pool3d(x)),
]


@pytest.mark.parametrize("case", range(len(LOCAL)))
def test_local_modules_match_functional(case):
    module, fn = LOCAL[case]
    x = _x()
    _same(module(x), fn(x))

    def loss(f, use_module):
        t = x.replace(feats=f)
        return ((module(t) if use_module else fn(t)).feats ** 2).sum()

    _same(mx.grad(loss)(x.feats, True), mx.grad(loss)(x.feats, False))


def test_upsampling_modules_match_functional():
    x = _x("dense_block", stride=2)
    coarse = P.AvgPool3d()(x)
    for module, fn in (
        (P.PoolTranspose3d(), ops.pool_transpose3d),
        (P.TrilinearUpsample3d(), ops.trilinear_upsample3d),
    ):
        _same(module(coarse), fn(coarse))
        _same(module(coarse, x), fn(coarse, x))
        _same(
            mx.grad(lambda f, m=module: m(coarse.replace(feats=f), x).feats.sum())(coarse.feats),
            mx.grad(lambda f, g=fn: g(coarse.replace(feats=f), x).feats.sum())(coarse.feats),
        )
    up = P.TrilinearUpsample3d(stride=(2, 1, 2))(coarse, target=None)
    assert up.stride == (2, 4, 2)


def test_global_modules_match_functional():
    x = _x("grid")
    for module, mode in ((P.GlobalSumPool(), "sum"), (P.GlobalAvgPool(), "avg"), (P.GlobalMaxPool(), "max")):
        _same(module(x), ops.global_pool(x, mode=mode))
        _same(
            mx.grad(lambda f, m=module: m(x.replace(feats=f)).sum())(x.feats),
            mx.grad(lambda f, md=mode: ops.global_pool(x.replace(feats=f), mode=md).sum())(x.feats),
        )
    assert P.GlobalAvgPool()(x, batch_size=4).shape == (4, 4)


def test_a_small_network_trains_through_every_module():
    x = _x("dense_block", c=3)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(3, 3)
            self.down = P.MaxPool3d()
            self.avg = P.AvgPool3d(kernel_size=3, stride=1, padding=1)
            self.up = P.TrilinearUpsample3d()
            self.unpool = P.PoolTranspose3d()
            self.head = P.GlobalAvgPool()

        def __call__(self, t):
            h = t.replace(feats=self.proj(t.feats))
            c = self.avg(self.down(h))
            return self.head(self.up(c, t)).sum() + self.head(self.unpool(c, t)).sum()

    net = Net()
    loss, grads = nn.value_and_grad(net, lambda t: net(t))(x)
    assert np.isfinite(loss.item())
    assert all(grads[k] == {} for k in ("down", "avg", "up", "unpool", "head"))
    assert np.abs(np.asarray(grads["proj"]["weight"])).sum() > 0


# ---- routes ------------------------------------------------------------------------------


def test_routes_are_pure_values():
    req = PoolRequest(
        op="max_pool3d",
        mode="max",
        dtype="float32",
        channels=32,
        kernel_size=(2, 2, 2),
        stride=(2, 2, 2),
        dilation=(1, 1, 1),
        n_in=100,
        device="gpu",
    )
    cpu_only = Capability((Tier.CPU,), ("cpu",))
    route = route_pool(req, cpu_only)
    assert route == route_pool(req, cpu_only) and route.name == "cpu.segment_reduce"
    assert route.rejected and route.rejected[0].backend.startswith("gpu")
    cuda = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
    assert route_pool(req, cuda).name == "cuda.map_pool"
    assert route_pool_backward(req, cuda).name == "cuda.map_pool_grad"
    up = UpsampleRequest(
        op="trilinear_upsample3d",
        method="trilinear",
        dtype="float16",
        channels=8,
        kernel_volume=27,
        n_in=10,
        n_out=100,
        edges=270,
        explicit_target=True,
    )
    assert route_upsample(up).name == "cpu.segment_reduce"
    assert route_upsample_backward(up).name == "cpu.scatter_general"
    g = GlobalPoolRequest(op="global_pool", mode="avg", dtype="bfloat16", channels=8, n_in=10, batch_size=2)
    assert route_global_pool(g).name == "cpu.batch_segment_reduce"
    with pytest.raises(ValueError, match=r"\[max_pool3d\] features must be one of"):
        route_pool(PoolRequest(**{**req.__dict__, "dtype": "int32"}))


POOL_OPS = (
    "pool3d",
    "sum_pool3d",
    "max_pool3d",
    "avg_pool3d",
    "pool_transpose3d",
    "trilinear_upsample3d",
    "global_pool",
    "global_sum_pool",
    "global_avg_pool",
    "global_max_pool",
)


@pytest.mark.usefixtures("cpu_device")  # the CPU routes' choices
def test_explain_runs_the_ops_plans():
    from lattice.routing.explain import explain, explainable_ops

    assert set(POOL_OPS) <= set(explainable_ops())
    x = _x("dense_block")
    fine = _x("dense_block", stride=2)
    assert explain(ops.max_pool3d, x).facts["backward"] == "cpu.input_exclusive_gather"
    assert explain("max_pool3d", x, kernel_size=3).facts["backward"] == "cpu.scatter_general"
    assert explain("pool3d", x, mode="avg").facts["mode"] == "avg"
    up = explain(ops.trilinear_upsample3d, fine, x)
    assert up.name == "cpu.segment_reduce" and up.facts["support"] == "explicit target"
    assert explain("pool_transpose3d", fine).facts["backward"] == "cpu.scatter_general"
    assert explain("global_max_pool", _x("grid")).name == "cpu.batch_segment_reduce"
    with pytest.raises(ValueError, match=r"\[global_pool\] max over an empty batch member"):
        explain("global_pool", _x("batched"), mode="max")  # the plan checks what the op checks
