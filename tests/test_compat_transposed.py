"""mlx_lattice's transposed family (0.6.3's offsets, numbered from 0 on every axis) against
a NumPy oracle of the documented rule ``fine = coarse * stride + k * dilation - padding``:
generated and explicit support, convolution, normalised convolution and pooling
transpose, odd and even kernels, paddings above and below the centre, dilation, an empty
input and a batch with an empty member; and the modules and their quantized twins."""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np
import pytest

import lattice
import mlx_lattice
from mlx_lattice import nn as mnn
from mlx_lattice import ops as mops
from mlx_lattice._transposed import indexed_geometry


def _source(kind: str, c_in: int = 3) -> lattice.SparseTensor:
    rng = np.random.default_rng(len(kind))
    if kind == "empty":
        coords = np.zeros((0, 4), np.int32)
    else:
        xyz = np.unique(rng.integers(-4, 5, size=(30, 3)), axis=0)
        batch = np.zeros(len(xyz), np.int64) if kind == "one" else (np.arange(len(xyz)) % 2) * 2  # 1 empty
        coords = np.unique(np.concatenate([batch[:, None], xyz], axis=1), axis=0).astype(np.int32)
    feats = rng.normal(size=(len(coords), c_in)).astype(np.float32)
    return lattice.SparseTensor(coords, feats, stride=2)


def _edges(coords, kernel, stride, padding, dilation):
    """(source row, kernel row, fine coordinate) of every edge, kernel rows z fastest."""
    out = []
    for k, pos in enumerate(itertools.product(*(range(n) for n in kernel))):
        off = np.array(pos) * np.array(dilation)
        for i, c in enumerate(coords):
            out.append(
                (i, k, (int(c[0]), *(int(v) for v in c[1:] * np.array(stride) + off - np.array(padding))))
            )
    return out


def _oracle(x, weight, kernel, stride, padding, dilation, target=None, mode="conv"):
    """{fine coordinate: feature row} (generated) or rows in ``target`` order."""
    coords = np.asarray(x.coords[: x.active_count])
    feats = np.asarray(x.feats[: x.active_count], np.float64)
    edges = _edges(coords, kernel, stride, padding, dilation)
    w = (
        None
        if weight is None
        else np.asarray(weight, np.float64).reshape(weight.shape[0], -1, weight.shape[-1])
    )
    c = feats.shape[1] if mode == "pool" else w.shape[0]
    acc, count = {}, {}
    for i, k, t in edges:
        v = feats[i] if mode == "pool" else w[:, k, :] @ feats[i]
        acc[t] = acc.get(t, np.zeros(c)) + v
        count[t] = count.get(t, 0) + 1
    if mode == "pool":
        acc = {t: v / count[t] for t, v in acc.items()}
    if target is None:
        return acc
    return (
        np.stack([acc.get(tuple(int(v) for v in r), np.zeros(c)) for r in target])
        if len(target)
        else np.zeros((0, c))
    )


def _as_dict(out) -> dict:
    coords = np.asarray(out.coords[: out.active_count])
    feats = np.asarray(out.feats[: out.active_count], np.float64)
    return {tuple(int(v) for v in c): f for c, f in zip(coords, feats, strict=True)}


def _same(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for key, row in want.items():
        np.testing.assert_allclose(got[key], row, rtol=1e-4, atol=1e-4)


GEOMETRIES = [  # kernel, padding, dilation (stride 2)
    ((3, 1, 2), (0, 0, 0), (1, 1, 1)),  # odd axis below the centre: the support moves
    ((3, 3, 3), (1, 1, 1), (1, 1, 1)),  # padding at the centre: lattice's own call, padding 0
    ((3, 1, 1), (2, 0, 0), (2, 1, 1)),  # dilated: the centre is 2
    ((5, 2, 3), (3, 1, 0), (1, 1, 1)),  # above the centre on x, even y, below on z
    ((2, 2, 2), (0, 0, 0), (1, 1, 1)),  # even kernels: as lattice
]


@pytest.mark.parametrize("kind", ["empty", "one", "batched"])
@pytest.mark.parametrize("kernel, padding, dilation", GEOMETRIES)
def test_conv_transpose3d_follows_the_indexed_rule(kind, kernel, padding, dilation):
    x = _source(kind)
    rng = np.random.default_rng(1)
    w = mx.array(rng.normal(size=(4, *kernel, 3)).astype(np.float32))
    geo = {"kernel_size": kernel, "stride": 2, "padding": padding, "dilation": dilation}
    want = _oracle(x, w, kernel, (2, 2, 2), padding, dilation)
    _same(_as_dict(mops.conv_transpose3d(x, w, **geo)), want)
    # an explicit target: rows and order kept, rows nobody reaches are zero
    target = np.array(sorted(want)[::2] + [(0, 99, 99, 99)], np.int32).reshape(-1, 4)
    out = mops.conv_transpose3d(x, w, **geo, coordinates=mx.array(target))
    np.testing.assert_array_equal(np.asarray(out.coords), target)
    np.testing.assert_allclose(
        np.asarray(out.feats),
        _oracle(x, w, kernel, (2, 2, 2), padding, dilation, target),
        rtol=1e-4,
        atol=1e-4,
    )
    # the normalised form divides by the same rule's conv(1, W**2)
    norm = mops.normalized_conv_transpose3d(x, w, **geo)
    ones = x.replace(feats=mx.ones((x.feats.shape[0], 1)))
    den = _oracle(ones, mx.sum(w * w, axis=-1, keepdims=True), kernel, (2, 2, 2), padding, dilation)
    _same(_as_dict(norm), {t: v / np.sqrt(den[t] + 1e-8) for t, v in want.items()})


@pytest.mark.parametrize("kind", ["empty", "batched"])
@pytest.mark.parametrize("kernel, padding, dilation", GEOMETRIES)
def test_pool_transpose3d_follows_the_indexed_rule(kind, kernel, padding, dilation):
    x = _source(kind)
    geo = {"kernel_size": kernel, "stride": 2, "padding": padding, "dilation": dilation}
    want = _oracle(x, None, kernel, (2, 2, 2), padding, dilation, mode="pool")
    _same(_as_dict(mops.pool_transpose3d(x, **geo)), want)
    module = mnn.PoolTranspose3d(kernel_size=kernel, stride=2, padding=padding, dilation=dilation)
    _same(_as_dict(module(x)), want)


@pytest.mark.parametrize("kind", ["empty", "batched"])
@pytest.mark.parametrize("kernel, stride", [(3, 2), (3, 1), ((3, 2, 1), 2), (2, 2)])
def test_generative_conv_transpose3d_follows_the_indexed_rule(kind, kernel, stride):
    x = _source(kind)
    k = lattice.core.KernelSpec(kernel).size
    s = lattice.core.KernelSpec(1, stride).stride
    if kind != "empty" and x.stride[0] % s[0]:
        pytest.skip("stride must divide")
    w = mx.array(np.random.default_rng(2).normal(size=(2, *k, 3)).astype(np.float32))
    want = _oracle(x, w, k, s, (0, 0, 0), (1, 1, 1))
    out = mops.generative_conv_transpose3d(x, w, kernel_size=kernel, stride=stride)
    _same(_as_dict(out), want)
    again = mops.generative_conv_transpose3d(x, w, kernel_size=kernel, stride=stride, coordinates=out)
    np.testing.assert_allclose(np.asarray(again.feats), np.asarray(out.feats), rtol=1e-5, atol=1e-5)


def test_centred_paddings_are_lattices_own_call():
    assert indexed_geometry(3, 1, 1, "t") == ((0, 0, 0), (0, 0, 0))
    assert indexed_geometry((3, 2, 5), (0, 1, 3), (2, 1, 1), "t") == ((0, 1, 1), (2, 0, 0))
    x = _source("batched")
    w = mx.ones((2, 3, 3, 3, 3))
    out = mops.conv_transpose3d(x, w, kernel_size=3, stride=2, padding=1)
    ref = lattice.ops.conv_transpose3d(x, w, kernel_size=3, stride=2, padding=0)
    assert out.coord_key == ref.coord_key and out.coord_manager is x.coord_manager


def test_modules_and_quantized_twins_use_the_rule():
    x = _source("batched", c_in=32)
    conv = mnn.ConvTranspose3d(32, 4, kernel_size=3, stride=2)
    assert isinstance(conv, lattice.nn.ConvTranspose3d)
    _same(
        _as_dict(conv(x)), _as_dict(mops.conv_transpose3d(x, conv.weight, conv.bias, kernel_size=3, stride=2))
    )
    q = conv.to_quantized(group_size=32, bits=8)
    assert type(q) is mnn.QuantizedConvTranspose3d
    deq = mlx_lattice.dequantize_weight(q.qweight())
    _same(_as_dict(q(x)), _as_dict(mops.conv_transpose3d(x, deq, q.bias, kernel_size=3, stride=2)))
    gen = mnn.GenerativeConvTranspose3d(32, 2, kernel_size=3, stride=2)
    _same(_as_dict(gen(x)), _oracle(x, gen.weight, (3, 3, 3), (2, 2, 2), (0, 0, 0), (1, 1, 1)))
    assert type(gen.to_quantized(group_size=32)) is mnn.QuantizedGenerativeConvTranspose3d
    norm = mnn.NormalizedConvTranspose3d(32, 2, kernel_size=3, stride=2)
    assert isinstance(norm, mnn.ConvTranspose3d) and norm.to_quantized() is norm  # normalised: kept float
