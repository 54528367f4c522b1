"""Quantized modules (``from_conv`` / ``from_linear``, constructors, frozen packed parameters,
weights save/load) and ``lattice.nn.quantized.quantize`` on a small model.
"""

from __future__ import annotations

import mlx.core as mx
import mlx.nn as mnn
import numpy as np
import pytest
from conftest import make_cloud
from mlx.utils import tree_flatten
from quantized_helpers import as_np, assert_loose, assert_tight, rand_input

import lattice.nn as lnn
from lattice import ops
from lattice.core.quantized import dequantize_weight
from lattice.nn.quantized import (
    QuantizedConv3d,
    QuantizedConvTranspose3d,
    QuantizedGenerativeConvTranspose3d,
    QuantizedLinear,
    QuantizedSubmConv3d,
    quantize,
)

# float module factory, quantized class, the op, its geometry keywords, input stride
MODULES = {
    "conv": (
        lambda: lnn.Conv3d(16, 8, kernel_size=3, stride=2, padding=1),
        QuantizedConv3d,
        ops.conv3d,
        {"kernel_size": 3, "stride": 2, "padding": 1},
        1,
    ),
    "subm": (lambda: lnn.SubmConv3d(16, 8), QuantizedSubmConv3d, ops.subm_conv3d, {"kernel_size": 3}, 1),
    "transpose": (
        lambda: lnn.ConvTranspose3d(16, 8),
        QuantizedConvTranspose3d,
        ops.conv_transpose3d,
        {"kernel_size": 2, "stride": 2},
        2,
    ),
    "generative": (
        lambda: lnn.GenerativeConvTranspose3d(16, 8, kernel_size=3),
        QuantizedGenerativeConvTranspose3d,
        ops.generative_conv_transpose3d,
        {"kernel_size": 3, "stride": 2},
        2,
    ),
}


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("kind", list(MODULES))
def test_from_conv_matches_dequantized_op_and_float_module(kind, bits):
    make, qcls, op, geometry, stride = MODULES[kind]
    f = make()
    f.bias = mx.array(np.random.default_rng(0).standard_normal(8).astype(np.float32))
    q = qcls.from_conv(f, bits=bits)
    x = rand_input(make_cloud("random_sparse"), 16, stride=stride)
    y = q(x)
    assert q.spec == f.spec and (q.in_channels, q.out_channels, q.bits, q.group_size) == (16, 8, bits, 32)
    qw = q.qweight()
    assert qw.layout == "dense" and qw.shape == f.weight.shape
    assert_tight(y.feats, op(x, dequantize_weight(qw), q.bias, **geometry).feats)
    np.testing.assert_array_equal(np.asarray(q.bias), np.asarray(f.bias))  # bias stays float
    f.bias = mx.zeros(8)
    q0 = qcls.from_conv(f, bits=bits)
    assert_loose(q0(x).feats, f(x).feats, bits)


def test_constructors_quantize_a_fresh_weight_and_check_arguments():
    m = QuantizedSubmConv3d(8, 64, kernel_size=3, bias=False, bits=8)
    assert "bias" not in m and m.weight.dtype == mx.uint32 and m.weight.shape == (64, 3, 3, 3, 8)
    assert m.scales.shape == (64, 3, 3, 3, 1) and m.group_size == 32
    c = QuantizedConv3d(64, 4, kernel_size=2, stride=2, group_size=64)
    assert c.weight.shape == (4, 2, 2, 2, 8) and c.bias.shape == (4,)
    assert "kernel_size=(2, 2, 2)" in repr(c) and "bits=4" in repr(c)
    x = rand_input(make_cloud("batched"), 64)
    assert c(x).feats.shape[1] == 4
    with pytest.raises(ValueError, match=r"\[QuantizedSubmConv3d\] kernel_size must be odd"):
        QuantizedSubmConv3d(8, 8, kernel_size=2)
    with pytest.raises(ValueError, match=r"\[QuantizedConv3d\] in_channels must be a positive int, got 0"):
        QuantizedConv3d(0, 8)
    with pytest.raises(ValueError, match=r"\[QuantizedLinear\] bias must be True or False"):
        QuantizedLinear(8, 8, bias=1)
    with pytest.raises(ValueError, match=r"\[quantize_weight\] bits must be 4 or 8, got 2"):
        QuantizedGenerativeConvTranspose3d(8, 8, bits=2)
    with pytest.raises(ValueError, match=r"\[quantize_weight\] group_size must be 32, 64 or 128, got 100"):
        QuantizedLinear(8, 8, group_size=100)


def test_from_conv_rejects_other_modules():
    with pytest.raises(
        TypeError, match=r"\[QuantizedSubmConv3d.from_conv\] expected a SubmConv3d, got Conv3d"
    ):
        QuantizedSubmConv3d.from_conv(lnn.Conv3d(4, 4))
    with pytest.raises(TypeError, match="normalised convolutions need the float weight"):
        QuantizedSubmConv3d.from_conv(lnn.NormalizedSubmConv3d(4, 4))
    with pytest.raises(TypeError, match=r"\[QuantizedLinear.from_linear\] expected an mlx.nn.Linear"):
        QuantizedLinear.from_linear(lnn.SubmConv3d(4, 4))


def test_packed_parameters_are_frozen():
    m = QuantizedSubmConv3d.from_conv(lnn.SubmConv3d(8, 8), bits=8)
    assert [k for k, _ in tree_flatten(m.parameters())] == ["weight", "scales", "biases", "bias"]
    assert tree_flatten(m.trainable_parameters()) == []
    m.unfreeze()
    assert [k for k, _ in tree_flatten(m.trainable_parameters())] == ["bias"]
    assert m.nbytes == m.weight.nbytes + m.scales.nbytes + m.biases.nbytes


def test_transpose_module_with_target_is_rejected():
    skip = rand_input(make_cloud("batched"), 16)
    coarse = ops.conv3d(skip, mx.zeros((16, 2, 2, 2, 16)), kernel_size=2, stride=2)
    q = QuantizedConvTranspose3d(16, 8)
    assert q(coarse).active_count > 0
    with pytest.raises(ValueError, match="explicit target"):
        q(coarse, skip)
    g = QuantizedGenerativeConvTranspose3d(16, 8)
    assert g(coarse, skip).active_count == skip.active_count


@pytest.mark.parametrize("bits", [4, 8])
def test_quantized_linear(bits):
    for f in (lnn.Linear(40, 12), mnn.Linear(40, 12, bias=False)):
        q = QuantizedLinear.from_linear(f, bits=bits)
        assert (q.in_channels, q.out_channels) == (40, 12) and q.weight.shape == (12, 64 * bits // 32)
        a = mx.array(np.random.default_rng(1).standard_normal((300, 40)).astype(np.float32))
        assert_loose(q(a), f(a), bits)
        assert_tight(q(a), ops.linear(a, dequantize_weight(q.qweight()), q.get("bias")))
        x = rand_input(make_cloud("random_sparse"), 40)
        y = q(x)
        assert y.coord_key == x.coord_key and y.feats.shape == (x.active_count, 12)
    m = QuantizedLinear(64, 8, bits=bits)
    assert m.group_size == 64 and m(mx.ones((2, 64))).shape == (2, 8)
    assert "input_dims=64, output_dims=8" in repr(m)


def test_weights_save_and_load(tmp_path):
    a = QuantizedSubmConv3d(8, 16, bits=8)
    path = tmp_path / "q.safetensors"
    a.save_weights(str(path))
    b = QuantizedSubmConv3d(8, 16, bits=8)
    b.load_weights(str(path))
    x = rand_input(make_cloud("plane"), 8)
    np.testing.assert_array_equal(np.asarray(a(x).feats), np.asarray(b(x).feats))


class _Net(mnn.Module):
    def __init__(self):
        super().__init__()
        self.stem = lnn.SubmConv3d(8, 16)
        self.norm = lnn.NormalizedSubmConv3d(16, 16)
        self.down = [lnn.Conv3d(16, 32, kernel_size=2, stride=2), lnn.ReLU()]
        self.up = lnn.GenerativeConvTranspose3d(32, 16)
        self.head = lnn.Linear(16, 4)

    def __call__(self, x):
        x = self.norm(self.stem(x))
        for layer in self.down:
            x = layer(x)
        return self.head(self.up(x))


@pytest.mark.parametrize("bits", [4, 8])
def test_nn_quantize_swaps_modules_in_place(bits):
    mx.random.seed(0)
    net = _Net()
    x = rand_input(make_cloud("dense_block"), 8)
    ref = net(x)
    assert quantize(net, bits=bits) is net
    assert isinstance(net.stem, QuantizedSubmConv3d) and isinstance(net.down[0], QuantizedConv3d)
    assert isinstance(net.up, QuantizedGenerativeConvTranspose3d) and isinstance(net.head, QuantizedLinear)
    assert type(net.norm) is lnn.NormalizedSubmConv3d and isinstance(net.down[1], lnn.ReLU)
    assert net.stem.bits == bits
    y = net(x)
    np.testing.assert_array_equal(np.asarray(y.coords), np.asarray(ref.coords))
    err = np.linalg.norm(as_np(y.feats) - as_np(ref.feats)) / np.linalg.norm(as_np(ref.feats))
    assert err < {8: 0.02, 4: 0.3}[bits]  # four quantized layers compound the per-layer error
    assert tree_flatten(net.trainable_parameters())  # the normalised conv is still trainable


def test_nn_quantize_predicate_and_bad_parameters():
    net = _Net()
    quantize(net, bits=8, group_size=32, class_predicate=lambda path, m: not path.startswith("up"))
    assert isinstance(net.stem, QuantizedSubmConv3d) and type(net.up) is lnn.GenerativeConvTranspose3d
    fresh = _Net()
    with pytest.raises(ValueError, match=r"bits must be 4 or 8, got 5"):
        quantize(fresh, bits=5)
    with pytest.raises(ValueError, match=r"group_size must be 32, 64 or 128, got 0"):
        quantize(fresh, group_size=0)
    assert type(fresh.stem) is lnn.SubmConv3d  # nothing swapped
    with pytest.raises(TypeError, match=r"\[quantize\] model must be an mlx.nn.Module"):
        quantize([fresh])
