"""Every op kind with a packed weight — pointwise, forward, submanifold, target, transposed,
generative, linear — against the op on ``dequantize_weight(q)`` (tight), the NumPy oracle,
and the float weight (loose); see ``quantized_helpers.py`` for the tolerances.
Normalised convolutions and the target transpose reject packed weights.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import cpu_conv_route, make_cloud
from quantized_helpers import as_np, assert_loose, assert_tight, peak, rand_input, rand_weight
from reference import conv as rconv

import lattice
from lattice import ops
from lattice.core import SparseTensor
from lattice.core.quantized import dequantize_mapped, dequantize_weight, quantize_weight
from lattice.routing.conv import CONV
from lattice.routing.linear import DEQUANT_BLAS_GEMM, LINEAR

# ---- every op kind ----------------------------------------------------------------------------

# (op, kind, kwargs, kernel size); target cases get coordinates= below
CASES = {
    "pointwise": (ops.conv3d, "forward", {"kernel_size": 1}, 1),
    "forward": (ops.conv3d, "forward", {"kernel_size": 3, "stride": 2, "padding": 1}, 3),
    "forward_even": (ops.conv3d, "forward", {"kernel_size": 2, "stride": 2}, 2),
    "submanifold": (ops.subm_conv3d, "submanifold", {"kernel_size": 3}, 3),
    "submanifold_dilated": (ops.subm_conv3d, "submanifold", {"kernel_size": 3, "dilation": 2}, 3),
    "target": (ops.conv3d, "forward", {"kernel_size": 3, "stride": 2, "padding": 1}, 3),
    "transposed": (ops.conv_transpose3d, "transposed", {"kernel_size": 2, "stride": 2}, 2),
    "transposed_k3": (ops.conv_transpose3d, "transposed", {"kernel_size": 3, "stride": 2, "padding": 1}, 3),
    "generative": (ops.generative_conv_transpose3d, "generative", {"kernel_size": 2, "stride": 2}, 2),
    "generative_target": (ops.generative_conv_transpose3d, "generative", {"kernel_size": 3, "stride": 2}, 3),
}


def _case_input(case, name, c_in):
    coords = make_cloud(name)
    transposed = CASES[case][1] in ("transposed", "generative")
    x = rand_input(coords, c_in, stride=2 if transposed else 1)
    kwargs = dict(CASES[case][2])
    if case == "target":
        support = rconv.forward_support(coords, 2)
        kwargs["coordinates"] = support[::2] if len(support) > 1 else support
    if case == "generative_target":
        kwargs["coordinates"] = coords  # the input's own rows at the finer level
    return x, kwargs


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("name", ["empty", "single", "plane", "random_sparse", "batched"])
def test_every_kind_matches_dequantized_and_float(case, bits, name):
    op, kind, _, k = CASES[case]
    c_in, c_out = 16, 12
    x, kwargs = _case_input(case, name, c_in)
    layout_mapped = (bits == 8) == (name in ("plane", "batched"))  # a spread of both layouts
    w = (
        rand_weight((k**3, c_in, c_out), fan_in=c_in * k**3)
        if layout_mapped
        else rand_weight((c_out, k, k, k, c_in), fan_in=c_in * k**3)
    )
    b = mx.array(np.random.default_rng(3).standard_normal(c_out).astype(np.float32))
    q = quantize_weight(w, bits=bits)
    route = lattice.explain(op, x, q, b, **kwargs)
    if route.facts["device"] == "gpu" and route.facts.get("tier") == "gpu-cuda":
        expected = "gpu.dequant_pointwise_matmul" if case == "pointwise" else "cuda.dequant_implicit_gemm"
    else:
        expected = "cpu.dequant_pointwise_gemm" if case == "pointwise" else cpu_conv_route(packed=True)
    assert route.name == expected and route.facts["weight_layout"] == "packed"
    y = op(x, q, b, **kwargs)
    yd = op(x, dequantize_weight(q), b, **kwargs)
    np.testing.assert_array_equal(np.asarray(y.coords), np.asarray(yd.coords))
    assert y.feats.dtype == mx.float32 and y.stride == yd.stride
    assert_tight(y.feats, yd.feats)
    # the NumPy oracle on the dequantized weight
    wm = as_np(dequantize_mapped(q))
    ref_kwargs = {key: v for key, v in kwargs.items() if key != "coordinates"}
    out = kwargs.get("coordinates")
    ref_coords, ref = rconv.conv(
        np.asarray(x.coords), as_np(x.feats), wm, as_np(b), kind=kind, out_coords=out, **ref_kwargs
    )
    rows = rconv.align(np.asarray(y.coords), ref_coords)
    np.testing.assert_allclose(as_np(y.feats), ref[rows], rtol=1e-4, atol=1e-4 * max(1.0, peak(ref)))
    if x.active_count >= 50:
        yf = op(x, w, None, **kwargs)
        assert_loose(op(x, q, None, **kwargs).feats, yf.feats, bits)


def test_ops_dispatch_the_packed_route_explain_reports(monkeypatch):
    x = rand_input(make_cloud("random_sparse"), 8)
    for k, kwargs in ((3, {}), (1, {"kernel_size": 1})):
        q = quantize_weight(rand_weight((4, k, k, k, 8)), bits=8)
        route = lattice.explain(ops.conv3d, x, q, **kwargs)
        called = []
        for rid, fn in list(CONV.impls.items()):
            spy = lambda *a, _n=rid.name, _f=fn, _c=called: _c.append(_n) or _f(*a)  # noqa: E731
            monkeypatch.setitem(CONV.impls, rid, spy)
        ops.conv3d(x, q, **kwargs)
        assert called == [route.name]
        monkeypatch.undo()


@pytest.mark.parametrize(
    "op, kwargs",
    [
        (ops.normalized_subm_conv3d, {"kernel_size": 3}),
        (ops.normalized_conv_transpose3d, {"kernel_size": 2, "stride": 2}),
        (ops.normalized_generative_conv_transpose3d, {"kernel_size": 2, "stride": 2}),
    ],
)
def test_normalised_convs_reject_packed_weights(op, kwargs):
    transposed = "transpose" in op.__name__
    x = rand_input(make_cloud("random_sparse"), 8, stride=2 if transposed else 1)
    k = kwargs["kernel_size"]
    q = quantize_weight(rand_weight((4, k, k, k, 8)))
    with pytest.raises(ValueError, match=rf"^\[{op.__name__}\] normalised convolutions do not take packed"):
        op(x, q, **kwargs)
    with pytest.raises(ValueError, match="normalised convolutions do not take packed"):
        lattice.explain(op, x, q, **kwargs)
    op(x, dequantize_weight(q), **kwargs)  # the suggested way out works


def test_target_transpose_rejects_packed_weights():
    coords = make_cloud("batched")
    skip = rand_input(coords, 4)
    coarse = ops.conv3d(skip, rand_weight((8, 2, 2, 2, 4)), kernel_size=2, stride=2)
    q = quantize_weight(rand_weight((5, 2, 2, 2, 8)))
    with pytest.raises(ValueError, match=r"^\[conv_transpose3d\] a transposed convolution onto an explicit"):
        ops.conv_transpose3d(coarse, q, kernel_size=2, stride=2, coordinates=skip)
    # generated support takes it
    assert ops.conv_transpose3d(coarse, q, kernel_size=2, stride=2).active_count > 0


# ---- linear -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("shape", [(40, 24), (7, 64), (3, 130)])
def test_linear_matches_dequantized_and_float(bits, shape):
    c_out, c_in = shape
    w = rand_weight(shape)
    b = mx.array(np.random.default_rng(2).standard_normal(c_out).astype(np.float32))
    q = quantize_weight(w, bits=bits)
    x = rand_input(make_cloud("dense_block"), c_in)
    y = ops.linear(x, q, b)
    assert isinstance(y, SparseTensor) and y.coord_key == x.coord_key
    assert_tight(y.feats, ops.linear(x, dequantize_weight(q), b).feats)
    np.testing.assert_allclose(
        as_np(y.feats), as_np(x.feats) @ as_np(dequantize_weight(q)).T + as_np(b), atol=1e-4
    )
    assert_loose(ops.linear(x, q).feats, ops.linear(x, w).feats, bits)
    # a plain array with leading dimensions, and half-precision features
    a = mx.array(np.random.default_rng(4).standard_normal((2, 5, c_in)).astype(np.float32))
    assert_tight(ops.linear(a, q, b), ops.linear(a, dequantize_weight(q), b))
    y16 = ops.linear(a.astype(mx.float16), q)
    assert y16.dtype == mx.float16 and y16.shape == (2, 5, c_out)
    np.testing.assert_allclose(as_np(y16), as_np(ops.linear(a, dequantize_weight(q))), rtol=5e-3, atol=5e-3)


def test_linear_packed_route_is_reported(monkeypatch):
    q = quantize_weight(rand_weight((8, 16)), bits=8)
    calls = []
    original = LINEAR.impls[DEQUANT_BLAS_GEMM]
    monkeypatch.setitem(LINEAR.impls, DEQUANT_BLAS_GEMM, lambda a, w: calls.append(w) or original(a, w))
    ops.linear(mx.ones((3, 16)), q)
    assert calls == [q]


# ---- gradients, half precision, a real scan ---------------------------------------------------


def test_feature_gradient_through_packed_conv():
    x = rand_input(make_cloud("random_sparse"), 8)
    q = quantize_weight(rand_weight((6, 3, 3, 3, 8)), bits=4)
    wd = dequantize_weight(q)

    def loss(weight):
        return lambda f: mx.sum(mx.square(ops.subm_conv3d(x.replace(feats=f), weight).feats))

    assert_tight(mx.grad(loss(q))(x.feats), mx.grad(loss(wd))(x.feats))


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_half_precision_features(dtype):
    x = rand_input(make_cloud("dense_block"), 16, dtype=dtype)
    q = quantize_weight(rand_weight((8, 3, 3, 3, 16)), bits=8)
    y = ops.subm_conv3d(x, q)
    assert y.feats.dtype == dtype
    np.testing.assert_array_equal(as_np(y.feats), as_np(ops.subm_conv3d(x, dequantize_weight(q)).feats))


def test_real_scan_submanifold():
    from conftest import KITTI_SCAN

    if not KITTI_SCAN.is_file():
        pytest.skip(f"shared data not found: {KITTI_SCAN}")
    pts = np.fromfile(KITTI_SCAN, dtype=np.float32).reshape(-1, 4)[:, :3]
    vox = np.unique(np.floor(pts.astype(np.float64) / 0.5).astype(np.int64), axis=0)
    coords = np.concatenate([np.zeros((len(vox), 1), np.int64), vox], axis=1).astype(np.int32)
    x = rand_input(coords, 32)
    w = rand_weight((32, 3, 3, 3, 32), fan_in=32 * 27)
    for bits in (4, 8):
        q = quantize_weight(w, bits=bits)
        y = ops.subm_conv3d(x, q)
        assert_tight(y.feats, ops.subm_conv3d(x, dequantize_weight(q)).feats)
        assert_loose(y.feats, ops.subm_conv3d(x, w).feats, bits)
