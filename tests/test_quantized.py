"""Packed int4 / int8 weights: the layout (against ``mx.quantize`` / ``mx.dequantize``),
round-trip error, memory, bad parameters with their messages, and the packed routes.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import make_cloud
from quantized_helpers import as_np, rand_input, rand_weight

from lattice import ops
from lattice.core.quantized import QuantizedWeight, dequantize_mapped, dequantize_weight, quantize_weight
from lattice.routing import Capability, ConvRequest, LinearRequest, Tier, route_conv, route_linear

# ---- layout -----------------------------------------------------------------------------------


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("group_size", [32, 64, 128])
def test_linear_layout_is_mlx_quantize(bits, group_size):
    w = rand_weight((24, 256))
    for scale_dtype in (mx.float16, mx.float32):
        q = quantize_weight(w, group_size=group_size, bits=bits, scale_dtype=scale_dtype)
        data, scales, biases = mx.quantize(w, group_size, bits, mode="affine")
        assert q.layout == "linear" and q.shape == (24, 256) and q.data.dtype == mx.uint32
        np.testing.assert_array_equal(np.asarray(q.data), np.asarray(data))
        np.testing.assert_array_equal(as_np(q.scales), as_np(scales.astype(scale_dtype)))
        np.testing.assert_array_equal(as_np(q.biases), as_np(biases.astype(scale_dtype)))
        # dequantize_weight runs on the CPU stream on every device (float32 arithmetic)
        ref = mx.dequantize(q.data, q.scales, q.biases, group_size, bits, dtype=mx.float32, stream=mx.cpu)
        np.testing.assert_array_equal(np.asarray(dequantize_weight(q)), np.asarray(ref))


def test_conv_layouts_pack_along_c_in():
    w = rand_weight((5, 3, 3, 3, 40))  # C_in 40 -> group 32, padded to 64
    q = quantize_weight(w, bits=8)
    assert (q.group_size, q.padded_in_channels) == (32, 64)
    assert q.data.shape == (5, 3, 3, 3, 16) and q.scales.shape == (5, 3, 3, 3, 2)
    padded = mx.pad(w, [(0, 0)] * 4 + [(0, 24)])
    data, scales, _ = mx.quantize(padded, 32, 8)
    np.testing.assert_array_equal(np.asarray(q.data), np.asarray(data))
    np.testing.assert_array_equal(as_np(q.scales), as_np(scales.astype(mx.float16)))
    assert dequantize_weight(q).shape == w.shape
    # the mapped layout stores (K, C_out, packed C_in) and reads back as (K, C_in, C_out)
    wm = w.reshape(5, 27, 40).transpose(1, 2, 0)
    qm = quantize_weight(wm, bits=8)
    assert qm.layout == "mapped" and qm.data.shape == (27, 5, 16)
    assert dequantize_weight(qm).shape == (27, 40, 5)
    np.testing.assert_array_equal(np.asarray(dequantize_mapped(qm)), np.asarray(dequantize_mapped(q)))
    np.testing.assert_array_equal(
        np.asarray(dequantize_mapped(q)),
        np.asarray(dequantize_weight(q).reshape(5, 27, 40).transpose(1, 2, 0)),
    )


@pytest.mark.parametrize(
    "shape", [(7, 3), (16, 64), (9, 100), (4, 2, 2, 2, 33), (8, 1, 1, 1, 130), (27, 5, 6)]
)
@pytest.mark.parametrize("bits", [4, 8])
def test_round_trip_error_within_one_step(shape, bits):
    w = rand_weight(shape, seed=len(shape) + bits)
    q = quantize_weight(w, bits=bits, scale_dtype=mx.float32)
    d = dequantize_weight(q)
    assert d.shape == w.shape and d.dtype == mx.float32
    rows = np.asarray(w.transpose(0, 2, 1) if len(shape) == 3 else w)
    c_in = rows.shape[-1]
    rows = np.concatenate([rows, np.zeros((*rows.shape[:-1], -c_in % q.group_size))], axis=-1)
    groups = rows.reshape(*rows.shape[:-1], -1, q.group_size)
    step = (groups.max(-1) - groups.min(-1)) / (2**bits - 1)
    err = np.abs(as_np(dequantize_weight(q)) - as_np(w))
    err = err.transpose(0, 2, 1) if len(shape) == 3 else err
    err = np.concatenate([err, np.zeros((*err.shape[:-1], -c_in % q.group_size))], axis=-1)
    assert np.all(err.reshape(groups.shape).max(-1) <= step * 1.01 + 1e-7)


def test_default_group_size_and_weight_dtypes():
    assert quantize_weight(rand_weight((4, 63))).group_size == 32
    assert quantize_weight(rand_weight((4, 64))).group_size == 64
    assert quantize_weight(rand_weight((4, 500))).group_size == 64
    for dtype in (mx.float16, mx.bfloat16):
        q = quantize_weight(rand_weight((4, 2, 2, 2, 8)).astype(dtype), bits=8)
        assert q.dtype == mx.float16 and dequantize_weight(q, dtype=dtype).dtype == dtype


def test_memory_int8_is_about_4x_smaller():
    w = rand_weight((64, 3, 3, 3, 64))
    q8, q4 = quantize_weight(w, bits=8), quantize_weight(w, bits=4)
    assert q8.nbytes == 27 * 64 * 64 + 2 * 27 * 64 * 2  # data + float16 scales and biases
    assert w.nbytes / q8.nbytes > 3.7 and w.nbytes / q4.nbytes > 7.0


# ---- bad parameters ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "weight, kwargs, exc, message",
    [
        (rand_weight((4, 64)), {"bits": 3}, ValueError, r"^\[quantize_weight\] bits must be 4 or 8, got 3"),
        (rand_weight((4, 64)), {"bits": 16}, ValueError, r"bits must be 4 or 8, got 16"),
        (rand_weight((4, 64)), {"bits": True}, ValueError, r"bits must be 4 or 8, got True"),
        (rand_weight((4, 64)), {"bits": 8.0}, ValueError, r"bits must be 4 or 8, got 8.0"),
        (rand_weight((4, 64)), {"group_size": 16}, ValueError, r"group_size must be 32, 64 or 128, got 16"),
        (rand_weight((4, 64)), {"group_size": 256}, ValueError, r"group_size must be 32, 64 or 128, got 256"),
        (
            rand_weight((4, 64)),
            {"scale_dtype": mx.bfloat16},
            ValueError,
            r"scale_dtype must be float16 or float32",
        ),
        (
            rand_weight((64,)),
            {},
            ValueError,
            r"weight must be linear \(out, in\), dense .* got shape \(64,\)",
        ),
        (rand_weight((2, 3, 3, 64)), {}, ValueError, r"got shape \(2, 3, 3, 64\)"),
        (mx.zeros((0, 64)), {}, ValueError, r"every dimension of the weight must be positive"),
        (mx.zeros((4, 64), dtype=mx.int32), {}, TypeError, r"weight must be one of .* got int32"),
        (np.zeros((4, 64), np.float32), {}, TypeError, r"weight must be an mx.array, got ndarray"),
        (mx.array([[1.0, float("nan")]]), {}, ValueError, r"non-finite values"),
        (
            mx.full((2, 64), 1e6) * mx.arange(64),
            {},
            ValueError,
            r"overflow float16; use scale_dtype=mx.float32",
        ),
    ],
)
def test_quantize_weight_rejects_bad_arguments(weight, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        quantize_weight(weight, **kwargs)


def test_quantized_weight_checks_its_arrays():
    q = quantize_weight(rand_weight((8, 64)), bits=4)
    with pytest.raises(TypeError, match="already a QuantizedWeight"):
        quantize_weight(q)
    with pytest.raises(ValueError, match=r"data must be uint32 of shape \(8, 8\)"):
        QuantizedWeight(q.data[:, :4], q.scales, q.biases, 4, 64, (8, 64), "linear")
    with pytest.raises(ValueError, match=r"data must be uint32 .* for linear \(8, 64\), 8 bits"):
        QuantizedWeight(q.data, q.scales, q.biases, 8, 64, (8, 64), "linear")
    with pytest.raises(ValueError, match=r"scales must be float16 or float32 of shape \(8, 1\)"):
        QuantizedWeight(q.data, q.scales.astype(mx.bfloat16), q.biases, 4, 64, (8, 64), "linear")
    with pytest.raises(ValueError, match="scales and biases must share a dtype"):
        QuantizedWeight(q.data, q.scales, q.biases.astype(mx.float32), 4, 64, (8, 64), "linear")
    with pytest.raises(ValueError, match=r"layout 'dense' does not fit logical shape \(8, 64\)"):
        QuantizedWeight(q.data, q.scales, q.biases, 4, 64, (8, 64), "dense")
    with pytest.raises(ValueError, match="group_size must be 32, 64 or 128, got 48"):
        QuantizedWeight(q.data, q.scales, q.biases, 4, 48, (8, 64), "linear")
    with pytest.raises(TypeError, match="expected a QuantizedWeight"):
        dequantize_weight(rand_weight((8, 64)))
    assert "bits=4" in repr(q) and q.nbytes == q.data.nbytes + 2 * q.scales.nbytes


def test_ops_reject_mismatched_packed_weights():
    x = rand_input(make_cloud("random_sparse"), 8)
    q_conv = quantize_weight(rand_weight((4, 3, 3, 3, 8)))
    with pytest.raises(
        ValueError, match=r"\[conv3d\] packed weight kernel \(3, 3, 3\) does not match kernel_size"
    ):
        ops.conv3d(x, q_conv, kernel_size=2, stride=2)
    with pytest.raises(
        ValueError, match=r"packed mapped weight has 27 offsets, kernel_size \(1, 1, 1\) has 1"
    ):
        ops.conv3d(x, quantize_weight(rand_weight((27, 8, 4))), kernel_size=1)
    with pytest.raises(ValueError, match=r"\[subm_conv3d\] weight expects 16 input channels, x has 8"):
        ops.subm_conv3d(x, quantize_weight(rand_weight((4, 3, 3, 3, 16))))
    with pytest.raises(ValueError, match=r"bias must have shape \(4,\)"):
        ops.subm_conv3d(x, q_conv, mx.zeros(5))
    with pytest.raises(ValueError, match=r"\[subm_conv3d\] a linear-layout QuantizedWeight"):
        ops.subm_conv3d(x, quantize_weight(rand_weight((4, 8))), kernel_size=1)
    with pytest.raises(ValueError, match=r"\[linear\] packed weight must be a linear \(out, 8\) weight"):
        ops.linear(x, q_conv)
    with pytest.raises(ValueError, match=r"\[linear\] packed weight must be a linear \(out, 8\) weight"):
        ops.linear(x, quantize_weight(rand_weight((4, 16))))


# ---- routes -----------------------------------------------------------------------------------


def _req(**kw):
    base = dict(op="conv3d", kind="forward", dtype="float32", c_in=8, c_out=8, kernel_volume=27,
                identity_relation=False, n_in=10, n_out=10, edges=30, weight_layout="packed",
                packing="int8, group 32, float16 scales")  # fmt: skip
    return ConvRequest(**(base | kw))


BLAS_CPU = Capability((Tier.CPU,), ("cpu",))  # no lattice GEMM kernel: the BLAS routes


def test_packed_conv_routes():
    route = route_conv(_req(), BLAS_CPU)
    assert route.name == "cpu.dequant_gather_gemm_scatter" and route == route_conv(_req(), BLAS_CPU)
    assert [r.algorithm for r in route.rejected] == [
        "gather_gemm_scatter",
        "dequant_pointwise_gemm",
        "dequant_tiled_gemm",
    ]
    assert route.facts["weight_layout"] == "packed" and route.facts["packing"].startswith("int8")
    point = route_conv(_req(kernel_volume=1, identity_relation=True))
    assert point.name == "cpu.dequant_pointwise_gemm"
    assert [r.algorithm for r in point.rejected] == ["gather_gemm_scatter", "pointwise_gemm"]
    cuda = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
    gpu = route_conv(_req(device="gpu"), cuda)
    assert gpu.name == "cuda.dequant_implicit_gemm"  # lattice's CUDA kernel, packed form
    metal = route_conv(_req(device="gpu"), Capability((Tier.CPU, Tier.GPU_METAL), ("cpu",), "metal"))
    assert metal.name == "gpu.dequant_gather_matmul_scatter"  # the MLX-kernel GPU route, packed form
    cpu_only = Capability((Tier.CPU,), ("cpu",))
    fallback = route_conv(_req(device="gpu"), cpu_only)
    assert fallback.backend == "cpu" and fallback.rejected[0].backend == "gpu"
    for kind in ("target", "generative"):
        assert (
            route_conv(_req(kind=kind, explicit_target=True), BLAS_CPU).name
            == "cpu.dequant_gather_gemm_scatter"
        )


def test_packed_conv_route_rejections():
    with pytest.raises(ValueError, match=r"\[op\] normalised convolutions do not take packed"):
        route_conv(_req(op="op", normalized=True))
    with pytest.raises(ValueError, match=r"transposed convolution onto an explicit target .* packed"):
        route_conv(_req(kind="transposed", explicit_target=True))
    with pytest.raises(ValueError, match=r"weight_layout must be 'dense' or 'packed', got 'int4'"):
        route_conv(_req(weight_layout="int4"))
    # dense routes are unchanged
    assert (
        route_conv(_req(weight_layout="dense", normalized=True), BLAS_CPU).name == "cpu.gather_gemm_scatter"
    )


def test_packed_linear_route():
    req = LinearRequest("linear", "float32", 100, 8, 8, weight_layout="packed", packing="int4")
    route = route_linear(req)
    assert route.name == "cpu.dequant_blas_gemm" and route.facts["packing"] == "int4"
    assert [f"{r.backend}.{r.algorithm}" for r in route.rejected] == [
        "cpu.blas_gemm",
        "cpu.mlx_quantized_matmul",
    ]
    gpu = Capability((Tier.CPU, Tier.GPU_CUDA), ("cpu",), "cuda")
    route = route_linear(LinearRequest("linear", "float32", 9, 8, 8, "packed", "gpu", "int4"), gpu)
    assert route.name == "cpu.dequant_blas_gemm" and "no packed GPU route" in route.rejected[0].predicate
    with pytest.raises(ValueError, match="weight_layout must be"):
        route_linear(LinearRequest("linear", "float32", 9, 8, 8, weight_layout="int8"))


@pytest.mark.parametrize(
    "shape, pointwise",
    [
        ((8, 12), True),
        ((27, 12, 8), False),
        ((1, 12, 8), True),
        ((8, 3, 3, 3, 12), False),
        ((8, 1, 1, 1, 12), True),
    ],
)
def test_documented_member_names_read_the_same_facts(shape, pointwise):
    """mlx-lattice 0.6.3's names for QuantizedWeight members (issue 17's drop-in)."""
    q = quantize_weight(mx.ones(shape), group_size=32, bits=4)
    assert q.weight is q.data and q.weight.dtype == mx.uint32
    assert q.storage_in_channels == q.padded_in_channels == 32  # 12 channels padded to the group
    assert q.is_pointwise is pointwise
    np.testing.assert_allclose(np.asarray(dequantize_weight(q)), np.ones(shape), atol=1e-3)
