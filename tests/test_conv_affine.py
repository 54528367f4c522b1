"""A convolution with the affine map after it (``lattice.ops.conv_affine``): the fused
epilogue (``cpu.fused_epilogue``: the native convolution applies ``act(y * scale + shift +
residual)`` to its output rows itself) against the convolution then ``lattice.ops.affine``
(the same bits, every CPU GEMM, every relation kind, every coordinate distribution with the
empty set and a batch with an empty member) and against a float64 oracle; its gradients and
JVP; its route and the alternatives ``explain`` names; its errors; and the U-Net blocks that
take it in eval mode."""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
from conftest import SMALL_CLOUDS, make_cloud, using_cpu_gemm
from reference import conv as rconv

import lattice
from lattice import _ext
from lattice.core import SparseTensor
from lattice.models import blocks, minkunet
from lattice.ops import conv as C
from lattice.ops import conv_affine
from lattice.routing.explain import plan_of

HAS_CUDA = hasattr(mx, "cuda") and mx.cuda.is_available()
needs_cuda = pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device in this process")
GEMMS = ("blas", "avx2", "avx512", "avx512_bf16", "amx_bf16")
ROUNDING = ("avx512_bf16", "amx_bf16")  # the kernels whose products round to bfloat16
KINDS = {  # op, keyword arguments, the reference's kind
    "subm3": (C.subm_conv3d, {"kernel_size": 3}, "submanifold"),
    "pointwise": (C.subm_conv3d, {"kernel_size": 1}, "submanifold"),
    "strided": (C.conv3d, {"kernel_size": 2, "stride": 2}, "forward"),
    "transposed": (C.generative_conv_transpose3d, {"kernel_size": 2, "stride": 2}, "generative"),
}
FORMS = {  # residual, relu, concat
    "scale_shift": (False, False, False),
    "residual_relu": (True, True, False),
    "relu": (False, True, False),
    "relu_concat": (False, True, True),
    "residual_concat": (True, False, True),
}


@pytest.fixture(params=GEMMS)
def gemm(request, monkeypatch):
    """Every CPU GEMM this machine runs (LATTICE_CPU_GEMM), the rounding bfloat16 kernel too."""
    yield from using_cpu_gemm(request.param, monkeypatch)


def _case(cloud: str, kind: str, c_in: int, c_out: int, seed: int):
    rng = np.random.default_rng(seed)
    coords = make_cloud(cloud)
    feats = mx.array(rng.normal(size=(len(coords), c_in)).astype(np.float32))
    x = SparseTensor(coords, feats, 2 if kind == "transposed" else 1)  # a transposed step from stride 2
    op, kwargs, _ = KINDS[kind]
    k = kwargs["kernel_size"]
    w = mx.array(rng.normal(size=(c_out, k, k, k, c_in)).astype(np.float32))
    scale = mx.array(rng.uniform(0.5, 2.0, size=c_out).astype(np.float32))
    shift = mx.array(rng.normal(size=c_out).astype(np.float32))
    return x, op, kwargs, w, scale, shift


def _residual(plan, c_out: int, seed: int) -> SparseTensor:
    """A tensor of ``c_out`` channels on the plan's output support (a residual, or a tensor to
    concatenate)."""
    rel = plan.relation
    feats = np.random.default_rng(seed).normal(size=(rel.n_out, c_out)).astype(np.float32)
    return plan.output(mx.array(feats))


@pytest.mark.usefixtures("cpu_device")
@pytest.mark.parametrize("cloud", [*SMALL_CLOUDS, "dense_block"])
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("form", list(FORMS))
def test_fused_epilogue_is_the_two_ops_bit_for_bit_and_the_oracle(gemm, cloud, kind, form):
    with_residual, relu, with_concat = FORMS[form]
    c_in, c_out = 6, 5
    x, op, kwargs, w, scale, shift = _case(cloud, kind, c_in, c_out, seed=len(cloud) + len(kind))
    plan = plan_of(op, x, w, **kwargs)
    residual = _residual(plan, c_out, 3) if with_residual else None
    concat = _residual(plan, 3, 4) if with_concat else None
    activation = "relu" if relu else None
    keywords = {"residual": residual, "activation": activation, "concat": concat}
    route = lattice.explain(conv_affine, plan, scale, shift, **keywords)
    # a float32 1x1x1 convolution is one BLAS GEMM (cpu.pointwise_gemm), outside SparseConv
    fusable = kind != "pointwise" or gemm in ROUNDING
    assert route.name == ("cpu.fused_epilogue" if fusable else "cpu.conv_then_affine"), route.as_dict()
    assert route.facts["conv_route"] == plan.route.name
    assert route.facts["concat"] == (3 if with_concat else 0)
    got = conv_affine(plan, scale, shift, **keywords)
    conv = op(x, w, **kwargs)
    want = lattice.ops.affine(conv, scale, shift, residual=residual, activation=activation)
    if concat is not None:
        want = lattice.ops.cat([want, concat])
        np.testing.assert_array_equal(np.asarray(got.feats[:, c_out:]), np.asarray(concat.feats))
    assert got.coord_key == conv.coord_key and got.feats.dtype == mx.float32
    np.testing.assert_array_equal(np.asarray(got.feats), np.asarray(want.feats))  # the same bits
    # the float64 oracle (operands rounded to bfloat16 where the kernel rounds them)
    _check_oracle(got, x, w, kind, kwargs, scale, shift, residual, relu, concat, gemm in ROUNDING, 1e-5)


def _check_oracle(got, x, w, kind, kwargs, scale, shift, residual, relu, concat, rounds, rtol):
    """``got`` against act(conv * scale + shift + residual) ++ concat in float64 (operands
    rounded to bfloat16 where ``rounds``), within ``rtol`` of the largest value times the
    square root of the rows (sums in another order)."""
    feats = rconv.round_bf16(np.asarray(x.feats)) if rounds else np.asarray(x.feats, np.float64)
    weight = rconv.round_bf16(np.asarray(w)) if rounds else np.asarray(w, np.float64)
    _, y = rconv.conv(
        np.asarray(x.coords), feats, weight, kind=KINDS[kind][2], out_coords=np.asarray(got.coords), **kwargs
    )
    y = y * np.asarray(scale, np.float64) + np.asarray(shift, np.float64)
    if residual is not None:
        y = y + np.asarray(residual.feats, np.float64)
    if relu:
        y = np.maximum(y, 0.0)
    if concat is not None:
        y = np.concatenate([y, np.asarray(concat.feats, np.float64)], axis=1)
    bound = rtol * (1.0 + np.abs(y).max(initial=0.0)) * (1 + len(np.asarray(x.coords)) ** 0.5)
    np.testing.assert_allclose(np.asarray(got.feats, np.float64), y, rtol=rtol, atol=bound)


@pytest.mark.usefixtures("cpu_device")
def test_large_output_runs_in_blocks_and_keeps_the_bits(gemm):
    """An output over 2 MiB whose edges come in row order: the epilogue runs per output-row
    block (conv.cpp), rows past the last block's (the centre only) after them."""
    coords = make_cloud("dense_block")
    reps = [coords]
    for b in range(1, 12):  # more rows: 12 batches of the block
        c = coords.copy()
        c[:, 0] = b
        reps.append(c)
    coords = np.concatenate(reps)
    rng = np.random.default_rng(5)
    x = SparseTensor(coords, mx.array(rng.normal(size=(len(coords), 16)).astype(np.float32)))
    w = mx.array(rng.normal(size=(96, 3, 3, 3, 16)).astype(np.float32))
    scale = mx.array(rng.uniform(0.5, 2.0, size=96).astype(np.float32))
    shift = mx.array(rng.normal(size=96).astype(np.float32))
    plan = plan_of(C.subm_conv3d, x, w)
    assert plan.relation.n_out * 96 * 4 > 2 << 20
    residual, concat = _residual(plan, 96, 6), _residual(plan, 32, 7)
    for cc in (None, concat):
        got = conv_affine(plan, scale, shift, residual=residual, activation="relu", concat=cc)
        want = lattice.ops.affine(C.subm_conv3d(x, w), scale, shift, residual=residual, activation="relu")
        if cc is not None:
            want = lattice.ops.cat([want, cc])
        np.testing.assert_array_equal(np.asarray(got.feats), np.asarray(want.feats))


@pytest.mark.usefixtures("cpu_device")
def test_gradients_and_jvp_are_those_of_the_two_ops():
    x, op, kwargs, w, scale, shift = _case("random_sparse", "subm3", 4, 3, seed=2)
    r = mx.array(np.random.default_rng(9).normal(size=(x.feats.shape[0], 3)).astype(np.float32))
    a = mx.array(np.random.default_rng(8).normal(size=(x.feats.shape[0], 2)).astype(np.float32))

    def fused(feats, w, scale, shift, r, a):
        xt = x.replace(feats=feats)
        plan = plan_of(op, xt, w, **kwargs)
        y = conv_affine(plan, scale, shift, residual=plan.output(r), activation="relu", concat=plan.output(a))
        return y.feats

    def separate(feats, w, scale, shift, r, a):
        y = op(x.replace(feats=feats), w, **kwargs)
        y = lattice.ops.affine(y.feats, scale, shift, residual=r, activation="relu")
        return mx.concatenate([y, a], axis=1)

    args = [x.feats, w, scale, shift, r, a]
    assert (
        lattice.explain(conv_affine, plan_of(op, x, w, **kwargs), scale, shift).name == "cpu.fused_epilogue"
    )
    for f in (fused, separate):
        assert f(*args).shape == (x.feats.shape[0], 5)
    loss = [lambda *a, f=f: (f(*a) ** 2).sum() for f in (fused, separate)]
    g_fused = mx.grad(loss[0], argnums=(0, 1, 2, 3, 4, 5))(*args)
    g_sep = mx.grad(loss[1], argnums=(0, 1, 2, 3, 4, 5))(*args)
    for a, b in zip(g_fused, g_sep, strict=True):
        assert float(mx.abs(b).max()) > 0
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    tangents = [
        mx.array(np.random.default_rng(i).normal(size=a.shape).astype(np.float32)) for i, a in enumerate(args)
    ]
    (j_fused,) = mx.jvp(fused, args, tangents)[1]
    (j_sep,) = mx.jvp(separate, args, tangents)[1]
    np.testing.assert_array_equal(np.asarray(j_fused), np.asarray(j_sep))


@pytest.mark.usefixtures("cpu_device")
def test_routes_that_cannot_fuse_run_the_two_ops():
    x, op, kwargs, w, scale, shift = _case("random_sparse", "subm3", 4, 3, seed=4)
    cases = {
        "bias": (plan_of(op, x, w, mx.ones((3,)), **kwargs), "adds a bias"),
        "float16": (plan_of(op, x.replace(feats=x.feats.astype(mx.float16)), w, **kwargs), "float16"),
        "normalised": (plan_of(C.normalized_subm_conv3d, x, w, **kwargs), "normalised"),
    }
    for name, (plan, why) in cases.items():
        route = lattice.explain(conv_affine, plan, scale, shift, activation="relu")
        assert route.name == "cpu.conv_then_affine", name
        assert any(r.name == "cpu.fused_epilogue" and why in r.predicate for r in route.rejected), name
        got = conv_affine(plan, scale, shift, activation="relu")
        want = lattice.ops.affine(plan.run(), scale, shift, activation="relu")
        np.testing.assert_array_equal(np.asarray(got.feats), np.asarray(want.feats))
    fused = lattice.explain(conv_affine, plan_of(op, x, w, **kwargs), scale, shift)
    assert [r.name for r in fused.rejected] == ["cpu.conv_then_affine"]


def test_argument_errors():
    x, op, kwargs, w, scale, shift = _case("random_sparse", "subm3", 4, 3, seed=1)
    plan = plan_of(op, x, w, **kwargs)
    with pytest.raises(TypeError, match=r"\[conv_affine\] conv must be a convolution's plan"):
        conv_affine(op(x, w, **kwargs), scale, shift)
    with pytest.raises(ValueError, match=r"\[conv_affine\] scale must have shape \(3,\), got \(4,\)"):
        conv_affine(plan, mx.ones((4,)), shift)
    with pytest.raises(ValueError, match="activation must be one of"):
        conv_affine(plan, scale, shift, activation="gelu")
    strided = C.conv3d(x, mx.ones((3, 2, 2, 2, 4)), kernel_size=2, stride=2)
    with pytest.raises(ValueError, match="residual must lie on the convolution's output support"):
        conv_affine(plan, scale, shift, residual=strided)
    with pytest.raises(TypeError, match="residual must be a SparseTensor"):
        conv_affine(plan, scale, shift, residual=mx.zeros((x.feats.shape[0], 3)))
    with pytest.raises(ValueError, match="concat must lie on the convolution's output support"):
        conv_affine(plan, scale, shift, concat=strided)
    n = x.feats.shape[0]
    with pytest.raises(ValueError, match=rf"residual must have shape \({n}, 3\), got \({n}, 4\)"):
        conv_affine(plan, scale, shift, residual=x)
    edges = mx.array(np.zeros(1, np.int32))
    native = {  # keyword arguments of _ext.sparse_conv_affine -> its error
        "x": (mx.zeros((1, 2), mx.float16), r"features must be float32"),
        "shift": (mx.zeros((2,)), r"shift must be a float vector of 3"),
        "append": (mx.zeros((2, 3)), r"append must be float32 with 1 rows"),
        "residual": (mx.zeros((2, 3)), r"residual must be float32 \(1, 3\)"),
    }
    for name, (value, message) in native.items():
        kwargs = {
            "x": mx.zeros((1, 2)),
            "w": mx.zeros((1, 2, 3)),
            "scale": scale,
            "shift": shift,
            name: value,
        }
        with pytest.raises(ValueError, match=rf"\[sparse_conv_affine\] {message}"):
            _ext.sparse_conv_affine(in_rows=edges, out_rows=edges, bounds=[0, 1], n_out=1, **kwargs)


def _trained(model, seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _, mod in model.named_modules():
        if isinstance(mod, mnn.BatchNorm):
            n = mod.running_mean.shape[0]
            mod.running_mean = mx.array(rng.normal(size=n).astype(np.float32) * 0.2)
            mod.running_var = mx.array(rng.uniform(0.5, 2.0, size=n).astype(np.float32))
            mod.weight = mx.array(rng.uniform(0.5, 1.5, size=n).astype(np.float32))
            mod.bias = mx.array(rng.normal(size=n).astype(np.float32) * 0.2)


def _spy_routes(monkeypatch) -> list[str]:
    """The route of every ``conv_affine`` the model blocks call from now on, in order."""
    routes = []
    real = blocks.conv_affine

    def spy(plan, *args, **kwargs):
        routes.append(lattice.explain(real, plan, *args, **kwargs).name)
        return real(plan, *args, **kwargs)

    monkeypatch.setattr(blocks, "conv_affine", spy)
    return routes


@pytest.mark.usefixtures("cpu_device")
def test_unet_eval_forward_takes_the_fused_epilogue_with_the_same_bits(monkeypatch, kitti_coords, gemm):
    coords = kitti_coords[:6000]
    mx.random.seed(0)
    model = minkunet(14, 4, 5, width=8)
    _trained(model, 1)
    model.eval()
    x = SparseTensor(
        coords, mx.array(np.random.default_rng(0).normal(size=(len(coords), 4)).astype(np.float32))
    )
    routes = _spy_routes(monkeypatch)
    got = model(x).feats
    # every convolution fuses but the float32 1x1x1 projections (one BLAS GEMM each)
    projections = sum(isinstance(m, blocks.BasicBlock) and "proj" in m for _, m in model.named_modules())
    unfused = 0 if gemm in ROUNDING else projections
    assert projections > 0 and routes.count("cpu.conv_then_affine") == unfused
    assert routes.count("cpu.fused_epilogue") == len(routes) - unfused > 20

    monkeypatch.setattr(blocks, "conv_normed", blocks.conv_then_normed)
    want = model(x).feats
    assert float(mx.abs(want).max()) > 0
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# ---- CUDA: the implicit GEMM's epilogue (cuda.fused_epilogue) ----------------------------------


def test_cuda_routes_of_conv_affine():
    """The route decision for a convolution on lattice's CUDA kernels (no GPU needed: the
    request names the convolution's route)."""
    from lattice.routing.conv import ConvAffineRequest, route_conv_affine

    def route(conv_route="cuda.implicit_gemm", dtype="float32", **kw):
        req = ConvAffineRequest(
            "conv_affine",
            conv_route,
            dtype,
            8,
            **{"bias": False, "normalized": False, "residual": True, "activation": "relu", **kw},
        )
        return route_conv_affine(req)

    for conv_route in ("cuda.implicit_gemm", "cuda.dequant_implicit_gemm"):
        r = route(conv_route, concat=4)
        assert r.name == "cuda.fused_epilogue" and "4 concatenated channels" in r.reason
        assert {x.name for x in r.rejected} == {"cpu.fused_epilogue", "gpu.conv_then_affine"}
    for kw, why in (
        ({"conv_route": "gpu.gather_matmul_scatter"}, "not one whose kernel takes the epilogue"),
        ({"conv_route": "metal.implicit_gemm"}, "not one whose kernel takes the epilogue"),
        ({"dtype": "bfloat16"}, "features are bfloat16"),
        ({"bias": True}, "adds a bias"),
        ({"normalized": True}, "normalised"),
    ):
        r = route(**kw)
        assert r.name == "gpu.conv_then_affine", kw
        assert any(x.name == "cuda.fused_epilogue" and why in x.predicate for x in r.rejected), (
            kw,
            r.as_dict(),
        )


@needs_cuda
@pytest.mark.parametrize("tf32", ["1", "0"])  # the tensor-core kernel (TF32) / the float32-FMA kernel
@pytest.mark.parametrize("c_out", [5, 70])  # one column tile / two (FMA) or a 96-wide one (tensor cores)
@pytest.mark.parametrize("cloud", [*SMALL_CLOUDS, "dense_block"])
@pytest.mark.parametrize("kind", ["subm3", "strided", "transposed"])
@pytest.mark.parametrize("form", list(FORMS))
def test_cuda_fused_epilogue_against_the_two_ops_and_the_oracle(tf32, c_out, cloud, kind, form, monkeypatch):
    monkeypatch.setenv("MLX_ENABLE_TF32", tf32)
    with_residual, relu, with_concat = FORMS[form]
    x, op, kwargs, w, scale, shift = _case(cloud, kind, 8, c_out, seed=len(cloud) + len(kind))
    plan = plan_of(op, x, w, device="gpu", **kwargs)
    residual = _residual(plan, c_out, 3) if with_residual else None
    concat = _residual(plan, 3, 4) if with_concat else None
    activation = "relu" if relu else None
    keywords = {"residual": residual, "activation": activation, "concat": concat}
    route = lattice.explain(conv_affine, plan, scale, shift, **keywords)
    assert (plan.route.name, route.name) == ("cuda.implicit_gemm", "cuda.fused_epilogue"), route.as_dict()
    got = conv_affine(plan, scale, shift, **keywords)
    assert got.coord_key == plan.relation.out_key and got.feats.dtype == mx.float32
    assert got.feats.shape == (plan.relation.n_out, c_out + (3 if with_concat else 0))
    want = lattice.ops.affine(
        op(x, w, device="gpu", **kwargs), scale, shift, residual=residual, activation=activation
    )
    if concat is not None:
        np.testing.assert_array_equal(np.asarray(got.feats[:, c_out:]), np.asarray(concat.feats))
        want = lattice.ops.cat([want, concat])
    # the same sums as the plain kernel; the map may round once less (a fused multiply-add)
    b = np.asarray(want.feats)
    np.testing.assert_allclose(
        np.asarray(got.feats), b, rtol=1e-6, atol=1e-6 * (1.0 + np.abs(b).max(initial=0.0))
    )
    _check_oracle(
        got, x, w, kind, kwargs, scale, shift, residual, relu, concat, False, 2e-3 if tf32 == "1" else 1e-5
    )


@needs_cuda
@pytest.mark.parametrize("tf32", ["1", "0"])
def test_cuda_fused_epilogue_gradients_are_those_of_the_two_ops(tf32, monkeypatch):
    monkeypatch.setenv("MLX_ENABLE_TF32", tf32)
    x, op, kwargs, w, scale, shift = _case("random_sparse", "subm3", 8, 12, seed=2)
    n = x.feats.shape[0]
    r = mx.array(np.random.default_rng(9).normal(size=(n, 12)).astype(np.float32))
    a = mx.array(np.random.default_rng(8).normal(size=(n, 4)).astype(np.float32))

    def fused(feats, w, scale, shift, r, a):
        plan = plan_of(op, x.replace(feats=feats), w, device="gpu", **kwargs)
        return conv_affine(
            plan, scale, shift, residual=plan.output(r), activation="relu", concat=plan.output(a)
        ).feats

    def separate(feats, w, scale, shift, r, a):
        y = op(x.replace(feats=feats), w, device="gpu", **kwargs)
        y = lattice.ops.affine(y.feats, scale, shift, residual=r, activation="relu")
        return mx.concatenate([y, a], axis=1)

    args = [x.feats, w, scale, shift, r, a]
    plan = plan_of(op, x, w, device="gpu", **kwargs)
    assert lattice.explain(conv_affine, plan, scale, shift).name == "cuda.fused_epilogue"
    loss = [lambda *a, f=f: (f(*a) ** 2).sum() for f in (fused, separate)]
    g_fused = mx.grad(loss[0], argnums=(0, 1, 2, 3, 4, 5))(*args)
    g_sep = mx.grad(loss[1], argnums=(0, 1, 2, 3, 4, 5))(*args)
    for got, want in zip(g_fused, g_sep, strict=True):  # the weight gradient's atomics round run to run
        want = np.asarray(want)
        assert np.abs(want).max() > 0
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    # no JVP on CUDA either way: MLX's custom kernels have none (the plain convolution's too)
    tangents = [mx.zeros_like(t) for t in args]
    for f in (fused, separate):
        with pytest.raises(ValueError, match="jvp"):
            mx.jvp(f, args, tangents)


@needs_cuda
def test_cuda_conv_affine_that_cannot_fuse_runs_the_two_ops():
    x, op, kwargs, w, scale, shift = _case("random_sparse", "subm3", 8, 6, seed=4)
    for name, plan in {
        "bfloat16": plan_of(op, x.replace(feats=x.feats.astype(mx.bfloat16)), w, device="gpu", **kwargs),
        "bias": plan_of(op, x, w, mx.ones((6,)), device="gpu", **kwargs),
    }.items():
        route = lattice.explain(conv_affine, plan, scale, shift, activation="relu")
        assert route.name == "gpu.conv_then_affine", name
        got = conv_affine(plan, scale, shift, activation="relu")
        want = lattice.ops.affine(plan.run(), scale, shift, activation="relu")
        np.testing.assert_array_equal(np.asarray(got.feats), np.asarray(want.feats))


@needs_cuda
def test_cuda_unet_eval_forward_takes_the_fused_epilogue(monkeypatch, kitti_coords):
    monkeypatch.setenv("MLX_ENABLE_TF32", "1")
    coords = kitti_coords[:6000]
    mx.random.seed(0)
    model = minkunet(14, 4, 5, width=8)
    _trained(model, 1)
    model.eval()
    feats = np.random.default_rng(0).normal(size=(len(coords), 4)).astype(np.float32)
    with mx.stream(mx.gpu):
        routes = _spy_routes(monkeypatch)
        got = np.asarray(model(SparseTensor(coords, mx.array(feats))).feats)
        monkeypatch.setattr(blocks, "conv_normed", blocks.conv_then_normed)  # conv_affine no longer called
        want = np.asarray(model(SparseTensor(coords, mx.array(feats))).feats)
    # every convolution but the 1x1x1 projections (one MLX matmul each) fuses
    assert routes.count("cuda.fused_epilogue") > 20
    assert set(routes) <= {"cuda.fused_epilogue", "gpu.conv_then_affine"}
    assert np.abs(want).max() > 0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


@pytest.mark.usefixtures("cpu_device")
def test_subm_on_rows_in_any_order_takes_blocks_both_ways(gemm, kitti_coords):
    """The KITTI voxels in random row order (batch 1 empty), an output over 2 MiB: every offset
    of the submanifold relation comes by output row (mirrored offsets too), so the forward with
    its epilogue and the mirrored input gradient run in output-row blocks; forward, dX and dW
    against the float64 map oracle (operands rounded to bfloat16 where the kernel rounds)."""
    rng = np.random.default_rng(11)
    n = len(kitti_coords)
    x = SparseTensor(kitti_coords, mx.array(rng.normal(size=(n, 16)).astype(np.float32)))
    w = mx.array((rng.normal(size=(96, 3, 3, 3, 16)) * 0.2).astype(np.float32))
    dy = mx.array(rng.normal(size=(n, 96)).astype(np.float32))
    scale = mx.array(rng.uniform(0.5, 2.0, size=96).astype(np.float32))
    shift = mx.array(rng.normal(size=96).astype(np.float32))
    plan = plan_of(C.subm_conv3d, x, w)
    rel = plan.relation
    assert rel.mirrored and rel.n_out * 96 * 4 > 2 << 20
    outs, b = np.asarray(rel.grouped_edges.out_rows), rel.edge_offsets_host
    assert all((np.diff(outs[b[k] : b[k + 1]]) > 0).all() for k in range(27))

    rounds = gemm in ROUNDING
    r = rconv.round_bf16 if rounds else (lambda a: np.asarray(a, np.float64))
    nmap = np.asarray(rel.neighbor_map)
    wm = rconv.dense_to_mapped(np.asarray(w))  # (K, C_in, C_out)
    bound = lambda y: 2e-5 * (1 + np.abs(y).max()) * (1 + n**0.5)  # noqa: E731

    y = rconv.map_conv(r(x.feats), r(wm), nmap)
    got = conv_affine(plan, scale, shift, activation="relu")
    want = np.maximum(y * np.asarray(scale, np.float64) + np.asarray(shift, np.float64), 0.0)
    np.testing.assert_allclose(np.asarray(got.feats), want, rtol=2e-5, atol=bound(want))

    def loss(f, wt):
        return (C.subm_conv3d(x.replace(feats=f), wt).feats * dy).sum()

    gx, gw = mx.grad(loss, argnums=(0, 1))(x.feats, w)
    want_dx = np.zeros((n, 16))
    dyr, wr = r(dy), r(wm)
    for k in range(27):
        hit = nmap[:, k] >= 0
        np.add.at(want_dx, nmap[hit, k], dyr[hit] @ wr[k].T)
    np.testing.assert_allclose(np.asarray(gx), want_dx, rtol=2e-5, atol=bound(want_dx))
    want_dw = rconv.mapped_to_dense(rconv.map_weight_grad(r(x.feats), dyr, nmap), 3)
    np.testing.assert_allclose(np.asarray(gw), want_dw, rtol=2e-5, atol=bound(want_dw))
