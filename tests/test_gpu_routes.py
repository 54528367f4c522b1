"""GPU conv routes (MLX kernels): the same code checked on the CPU stream everywhere, and
against the CPU routes on a real GPU where one exists (skipped otherwise).

Tolerances on a GPU: float32 matmuls use TF32 on NVIDIA (relative error ~3e-4), so
float32 compares at rtol 2e-3; float16/bfloat16 at 3e-2 (half-precision products).
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import lattice
from lattice.backends.cpu import conv as cpu
from lattice.backends.gpu import conv as gpu
from lattice.core.quantized import quantize_weight
from lattice.ops import conv3d, conv_transpose3d, generative_conv_transpose3d, subm_conv3d

HAS_GPU = (hasattr(mx, "cuda") and mx.cuda.is_available()) or mx.metal.is_available()


def _tensor(seed=0, c=6, n=300, batched=True):
    rng = np.random.default_rng(seed)
    xyz = np.unique(rng.integers(-6, 6, (n, 3)), axis=0)
    b = rng.integers(0, 3, len(xyz)) * 2 if batched else np.zeros(len(xyz), int)  # batch 1 empty
    coords = np.concatenate([b[:, None], xyz], axis=1)
    return lattice.SparseTensor(coords, mx.array(rng.normal(size=(len(xyz), c)).astype(np.float32)))


CASES = [
    ("subm k3", lambda x: lattice.ops.submanifold_kernel_relation(x)),
    ("forward k2 s2", lambda x: lattice.ops.kernel_relation(x, kernel_size=2, stride=2)),
    ("forward k3 s2 p1", lambda x: lattice.ops.kernel_relation(x, kernel_size=3, stride=2, padding=1)),
    ("pointwise", lambda x: lattice.ops.kernel_relation(x, kernel_size=1, stride=1)),
]


@pytest.mark.parametrize("name, relation", CASES)
def test_gpu_route_code_equals_cpu_route_on_the_cpu_stream(name, relation):
    x = _tensor()
    rel = relation(x)
    wm = mx.array(np.random.default_rng(1).normal(size=(rel.n_kernels, x.channels, 5)).astype(np.float32))
    got = gpu.gather_matmul_scatter(x.feats, wm, rel, device=mx.cpu)
    ref = cpu.gather_gemm_scatter(x.feats, wm, rel)
    np.testing.assert_allclose(np.array(got), np.array(ref), rtol=1e-5, atol=1e-5)
    if name == "pointwise":
        pw = gpu.pointwise_matmul(x.feats, wm, rel, device=mx.cpu)
        np.testing.assert_allclose(np.array(pw), np.array(ref), rtol=1e-5, atol=1e-5)


def test_gpu_route_code_handles_empty_relations_and_gradients_on_the_cpu_stream():
    x = _tensor()
    w = mx.array(np.random.default_rng(2).normal(size=(27, x.channels, 4)).astype(np.float32))
    rel = lattice.ops.submanifold_kernel_relation(x)

    def loss(route, f, wm):
        kw = {"device": mx.cpu} if route is gpu.gather_matmul_scatter else {}
        return (route(f, wm, rel, **kw) ** 2).sum()

    g_gpu = mx.grad(lambda f, wm: loss(gpu.gather_matmul_scatter, f, wm), argnums=(0, 1))(x.feats, w)
    g_cpu = mx.grad(lambda f, wm: loss(cpu.gather_gemm_scatter, f, wm), argnums=(0, 1))(x.feats, w)
    for a, b in zip(g_gpu, g_cpu, strict=True):
        np.testing.assert_allclose(np.array(a), np.array(b), rtol=1e-4, atol=1e-3)
    empty = lattice.SparseTensor(np.zeros((0, 4), np.int32), mx.zeros((0, x.channels)))
    erel = lattice.ops.submanifold_kernel_relation(empty)
    assert gpu.gather_matmul_scatter(empty.feats, w, erel, device=mx.cpu).shape == (0, 4)


@pytest.mark.skipif(not HAS_GPU, reason="no GPU in this process")
@pytest.mark.parametrize("dtype, rtol", [(mx.float32, 2e-3), (mx.float16, 3e-2), (mx.bfloat16, 6e-2)])
@pytest.mark.parametrize(
    "name", ["subm", "forward", "transposed onto skip", "generative", "pointwise", "packed"]
)
def test_every_conv_kind_on_the_gpu_matches_the_cpu(name, dtype, rtol):
    x = _tensor(c=8).astype(dtype)
    rng = np.random.default_rng(3)

    def w(k, cin=8, cout=6):
        return mx.array(rng.normal(size=(cout, k, k, k, cin)).astype(np.float32) * 0.3)

    down = conv3d(x, w(2), kernel_size=2, stride=2, device="cpu")
    w3, w3b, w2t, w2g, w1 = w(3), w(3), w(2, 6, 8), w(2, 6, 8), w(1)
    packed = quantize_weight(w(3), bits=8)
    runs = {
        "subm": lambda d: subm_conv3d(x, w3, device=d),
        "forward": lambda d: conv3d(x, w3b, kernel_size=3, stride=2, device=d),
        "transposed onto skip": lambda d: conv_transpose3d(down, w2t, coordinates=x, device=d),
        "generative": lambda d: generative_conv_transpose3d(down, w2g, device=d),
        "pointwise": lambda d: conv3d(x, w1, kernel_size=1, device=d),
        "packed": lambda d: subm_conv3d(x, packed, device=d),
    }
    route = lattice.explain(subm_conv3d, x, w(3), device="gpu")
    assert route.backend in ("gpu", "cuda")  # cuda: lattice's kernels; gpu: MLX kernels (Metal)
    got = runs[name]("gpu")
    ref = runs[name]("cpu")
    assert got.same_rows(ref)
    a = np.array(got.feats.astype(mx.float32))
    b = np.array(ref.feats.astype(mx.float32))
    np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * max(1.0, np.abs(b).max()))


@pytest.mark.skipif(not HAS_GPU, reason="no GPU in this process")
def test_gradients_on_the_gpu_match_the_cpu():
    x = _tensor(c=8)
    w = mx.array(np.random.default_rng(4).normal(size=(6, 3, 3, 3, 8)).astype(np.float32) * 0.3)

    def loss(f, W, d):
        return (subm_conv3d(x.replace(feats=f), W, device=d).feats ** 2).sum()

    g_gpu = mx.grad(lambda f, W: loss(f, W, "gpu"), argnums=(0, 1))(x.feats, w)
    g_cpu = mx.grad(lambda f, W: loss(f, W, "cpu"), argnums=(0, 1))(x.feats, w)
    for a, b in zip(g_gpu, g_cpu, strict=True):
        np.testing.assert_allclose(
            np.array(a), np.array(b), rtol=5e-3, atol=5e-3 * float(np.abs(np.array(b)).max())
        )
