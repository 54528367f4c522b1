"""Convolution modules (``lattice.nn.conv``): each equals its functional op with the module's
parameters; constructors check their arguments; parameters train with ``mlx.optimizers``;
the documented ``mlx_lattice`` import path gives the very same classes.
"""

from __future__ import annotations

import math

import mlx.core as mx
import mlx.nn as mlx_nn
import mlx.optimizers as optim
import numpy as np
import pytest
from conftest import make_cloud

import lattice.nn
import lattice.nn.conv
from lattice import ops
from lattice.core import SparseTensor
from lattice.nn import conv as nnc


def _x(name: str = "random_sparse", c: int = 3, stride=1, seed: int = 0) -> SparseTensor:
    coords = make_cloud(name)
    rng = np.random.default_rng(seed)
    return SparseTensor(coords, mx.array(rng.standard_normal((len(coords), c)).astype(np.float32)), stride)


def _bias_of(m):
    return m["bias"] if "bias" in m else None


def _randomise_bias(m) -> None:
    if "bias" in m:
        m.bias = mx.random.normal(m.bias.shape)


# (module factory, functional call with the module's parameters, input stride)
MODULE_CASES = {
    "Conv3d_k3": (
        lambda b: nnc.Conv3d(3, 5, kernel_size=3, stride=2, padding=1, dilation=1, bias=b),
        lambda m, x: ops.conv3d(x, m.weight, _bias_of(m), kernel_size=3, stride=2, padding=1),
        1,
    ),
    "Conv3d_k2s2": (
        lambda b: nnc.Conv3d(3, 5, kernel_size=2, stride=2, bias=b),
        lambda m, x: ops.conv3d(x, m.weight, _bias_of(m), kernel_size=2, stride=2),
        1,
    ),
    "SubmConv3d": (
        lambda b: nnc.SubmConv3d(3, 5, kernel_size=3, dilation=2, bias=b),
        lambda m, x: ops.subm_conv3d(x, m.weight, _bias_of(m), kernel_size=3, dilation=2),
        1,
    ),
    "ConvTranspose3d": (
        lambda b: nnc.ConvTranspose3d(3, 5, kernel_size=3, stride=2, padding=1, bias=b),
        lambda m, x: ops.conv_transpose3d(x, m.weight, _bias_of(m), kernel_size=3, stride=2, padding=1),
        2,
    ),
    "GenerativeConvTranspose3d": (
        lambda b: nnc.GenerativeConvTranspose3d(3, 5, bias=b),
        lambda m, x: ops.generative_conv_transpose3d(x, m.weight, _bias_of(m), kernel_size=2, stride=2),
        2,
    ),
    "NormalizedSubmConv3d": (
        lambda b: nnc.NormalizedSubmConv3d(3, 5, bias=b, eps=1e-6),
        lambda m, x: ops.normalized_subm_conv3d(x, m.weight, _bias_of(m), kernel_size=3, eps=1e-6),
        1,
    ),
    "NormalizedConvTranspose3d": (
        lambda b: nnc.NormalizedConvTranspose3d(3, 5, bias=b),
        lambda m, x: ops.normalized_conv_transpose3d(x, m.weight, _bias_of(m), kernel_size=2, stride=2),
        2,
    ),
    "NormalizedGenerativeConvTranspose3d": (
        lambda b: nnc.NormalizedGenerativeConvTranspose3d(3, 5, kernel_size=3, bias=b),
        lambda m, x: ops.normalized_generative_conv_transpose3d(
            x, m.weight, _bias_of(m), kernel_size=3, stride=2
        ),
        2,
    ),
}


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("name", list(MODULE_CASES))
def test_module_equals_functional_op(name, bias):
    make, functional, stride = MODULE_CASES[name]
    m = make(bias)
    _randomise_bias(m)
    for cloud in ("random_sparse", "batched", "empty"):
        x = _x(cloud, stride=stride)
        y = m(x)
        ref = functional(m, x)
        np.testing.assert_array_equal(np.asarray(y.coords), np.asarray(ref.coords))
        np.testing.assert_array_equal(np.asarray(y.feats), np.asarray(ref.feats))
        assert y.stride == ref.stride
    assert ("bias" in m) is bias


@pytest.mark.parametrize(
    "cls, k",
    [
        (nnc.Conv3d, 3),
        (nnc.SubmConv3d, 3),
        (nnc.ConvTranspose3d, 2),
        (nnc.GenerativeConvTranspose3d, 2),
        (nnc.NormalizedSubmConv3d, 3),
        (nnc.NormalizedConvTranspose3d, 2),
        (nnc.NormalizedGenerativeConvTranspose3d, 2),
    ],
)
def test_parameters_and_initialisation(cls, k):
    mx.random.seed(0)
    m = cls(16, 8)
    assert m.weight.shape == (8, k, k, k, 16) and m.weight.dtype == mx.float32
    np.testing.assert_array_equal(np.asarray(m.bias), np.zeros(8))
    scale = math.sqrt(1.0 / (16 * k**3))
    w = np.asarray(m.weight)
    assert np.abs(w).max() <= scale and np.abs(w).max() > 0.9 * scale  # uniform in +-scale
    assert set(dict(mlx_nn.utils.tree_flatten(m.trainable_parameters()))) == {"weight", "bias"}
    assert m.in_channels == 16 and m.out_channels == 8 and m.kernel_size == (k, k, k)
    assert "bias" not in cls(16, 8, bias=False)
    assert cls.__name__ in repr(m)


def test_default_geometry_matches_the_api():
    assert nnc.Conv3d(1, 1).spec.size == (3, 3, 3) and nnc.Conv3d(1, 1).stride == (1, 1, 1)
    t = nnc.ConvTranspose3d(1, 1)
    assert t.kernel_size == (2, 2, 2) and t.stride == (2, 2, 2) and t.padding == (0, 0, 0)
    g = nnc.GenerativeConvTranspose3d(1, 1, kernel_size=(2, 3, 1), stride=(2, 1, 3))
    assert g.kernel_size == (2, 3, 1) and g.stride == (2, 1, 3) and g.dilation == (1, 1, 1)
    assert nnc.NormalizedSubmConv3d(1, 1).eps == 1e-8


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda: nnc.Conv3d(0, 4), r"\[Conv3d\] in_channels must be a positive int, got 0"),
        (lambda: nnc.Conv3d(4, -1), r"out_channels must be a positive int, got -1"),
        (
            lambda: nnc.Conv3d(4, 4, kernel_size=0),
            r"\[Conv3d\] kernel_size must be positive, got \(0, 0, 0\)",
        ),
        (lambda: nnc.Conv3d(4, 4, stride=(1, 0, 1)), r"stride must be positive, got \(1, 0, 1\)"),
        (lambda: nnc.Conv3d(4, 4, padding=-1), r"padding must be >= 0, got \(-1, -1, -1\)"),
        (lambda: nnc.Conv3d(4, 4, dilation=0), r"dilation must be positive"),
        (
            lambda: nnc.SubmConv3d(4, 4, kernel_size=2),
            r"\[SubmConv3d\] kernel_size must be odd .* \(2, 2, 2\)",
        ),
        (lambda: nnc.SubmConv3d(4, 4, kernel_size=(3, 2, 3)), r"odd .* \(3, 2, 3\)"),
        (lambda: nnc.ConvTranspose3d(4, 4, kernel_size=(1, 2)), r"kernel_size must be an int or 3 ints"),
        (lambda: nnc.GenerativeConvTranspose3d(4, 4, stride=0), r"stride must be positive"),
        (lambda: nnc.NormalizedSubmConv3d(4, 4, eps=-1.0), r"eps must be a finite number >= 0, got -1.0"),
        (lambda: nnc.NormalizedConvTranspose3d(4, 4, eps=float("nan")), r"eps must be a finite number"),
        (lambda: nnc.Conv3d(4, 4, bias="yes"), r"bias must be True or False, got 'yes'"),
    ],
)
def test_constructor_errors(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_conv3d_target_mode():
    x = _x("batched")
    m = nnc.Conv3d(3, 4, kernel_size=3, stride=2, padding=1)
    support = np.asarray(ops.conv3d(x, m.weight, kernel_size=3, stride=2, padding=1).coords)
    target = np.ascontiguousarray(support[::-2])  # every other row, reversed
    y = m(x, coordinates=target)
    np.testing.assert_array_equal(np.asarray(y.coords), target)
    ref = ops.conv3d(x, m.weight, m.bias, kernel_size=3, stride=2, padding=1, coordinates=target)
    np.testing.assert_array_equal(np.asarray(y.feats), np.asarray(ref.feats))


@pytest.mark.parametrize(
    "cls",
    [
        nnc.ConvTranspose3d,
        nnc.GenerativeConvTranspose3d,
        nnc.NormalizedConvTranspose3d,
        nnc.NormalizedGenerativeConvTranspose3d,
    ],
)
def test_transpose_modules_take_a_target(cls):
    skip = _x("dense_block", c=4)
    down = nnc.Conv3d(4, 6, kernel_size=2, stride=2)(skip)
    up = cls(6, 4)
    a = up(down, skip)
    b = up(down, target=skip)
    c = up(down, coordinates=skip)
    assert a.coord_key == skip.coord_key
    np.testing.assert_array_equal(np.asarray(a.coords), np.asarray(skip.coords))
    for other in (b, c):
        np.testing.assert_array_equal(np.asarray(a.feats), np.asarray(other.feats))
    with pytest.raises(ValueError, match="not both"):
        up(down, skip, coordinates=skip)


def test_submanifold_module_keeps_the_key():
    x = _x()
    y = nnc.SubmConv3d(3, 7)(x)
    assert y.coord_key == x.coord_key and y.feats.shape == (x.active_count, 7)


class TinyNet(mlx_nn.Module):
    """Subm -> strided conv -> transposed conv onto the input support -> pointwise head."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nnc.SubmConv3d(3, 8)
        self.down = nnc.Conv3d(8, 16, kernel_size=2, stride=2)
        self.up = nnc.ConvTranspose3d(16, 8, kernel_size=2, stride=2)
        self.head = nnc.Conv3d(16, 2, kernel_size=1)

    def __call__(self, x: SparseTensor) -> mx.array:
        a = self.stem(x)
        a = a.replace(feats=mlx_nn.relu(a.feats))
        b = self.down(a)
        b = b.replace(feats=mlx_nn.relu(b.feats))
        u = self.up(b, target=a)
        u = u.replace(feats=mx.concatenate([u.feats, a.feats], axis=1))
        return self.head(u).feats


def test_a_small_model_trains():
    mx.random.seed(1)
    x = _x("dense_block", c=3, seed=2)
    labels = mx.array((np.asarray(x.coords[:, 1]) + np.asarray(x.coords[:, 3]) > 0).astype(np.int32))
    model = TinyNet()
    opt = optim.Adam(learning_rate=2e-2)

    def loss_fn(model):
        return mx.mean(mlx_nn.losses.cross_entropy(model(x), labels))

    step = mlx_nn.value_and_grad(model, loss_fn)
    losses = []
    for _ in range(15):
        loss, grads = step(model)
        opt.update(model, grads)
        mx.eval(model.parameters(), opt.state)
        losses.append(float(loss))
    assert losses[-1] < 0.6 * losses[0], losses
    # every parameter received a gradient
    _, grads = step(model)
    for name, g in mlx_nn.utils.tree_flatten(grads):
        assert float(mx.abs(g).sum()) > 0, name


def test_modules_are_reexported():
    for name in nnc.__all__:
        assert getattr(lattice.nn, name) is getattr(nnc, name)
    for name in ("Linear", "ReLU", "BatchNorm", "MaxPool3d", "QuantizedConv3d", "quantize"):
        assert hasattr(lattice.nn, name)


def test_mlx_lattice_alias_is_the_same_module():
    import mlx_lattice.nn
    import mlx_lattice.nn.conv

    assert mlx_lattice.nn.conv.SubmConv3d is lattice.nn.conv.SubmConv3d
    assert mlx_lattice.nn.SubmConv3d is lattice.nn.SubmConv3d
    from mlx_lattice.nn.conv import NormalizedConvTranspose3d

    # the transposed family is adapted (0.6.3's offsets): a subclass of lattice's
    assert issubclass(NormalizedConvTranspose3d, nnc.NormalizedConvTranspose3d)
