"""Coordinate identity (issue 17): ``same_coords`` is manager-and-key ownership, ``same_rows``
compares rows, a key's tensor holds the key's own array, and outputs that keep their input's
or target's support share its coordinate array object, key and manager."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import lattice
import lattice.nn as lnn
from lattice import CoordinateManager, SparseTensor, ops

CLOUDS = {
    "line": np.array([[0, 0, 0, 0], [0, 1, 0, 0], [0, 2, 0, 0], [0, 4, 0, 0]], np.int32),
    "batch with an empty member": np.array(
        [[0, 0, 0, 0], [0, 1, 1, 0], [2, 0, 0, 0], [2, 1, 0, 1]], np.int32
    ),
    "empty": np.zeros((0, 4), np.int32),
}


def _tensor(name: str, channels: int = 2, **kwargs) -> SparseTensor:
    c = CLOUDS[name]
    rng = np.random.default_rng(len(c))
    return SparseTensor(
        mx.array(c), mx.array(rng.normal(size=(len(c), channels)).astype(np.float32)), **kwargs
    )


def _same_identity(out: SparseTensor, ref: SparseTensor) -> None:
    assert out.coord_key == ref.coord_key
    assert out.coord_manager is ref.coord_manager
    assert out.coords is ref.coords
    assert out.same_coords(ref) and ref.same_coords(out)


def test_a_tensor_holds_the_array_it_was_given_and_the_manager_returns_it():
    for name in CLOUDS:
        x = _tensor(name)
        assert x.coord_manager.coords(x.coord_key) is x.coords
        y = x.replace(feats=x.feats * 2)
        _same_identity(y, x)
        assert x.astype(mx.float16).coords is x.coords


@pytest.mark.parametrize("name", list(CLOUDS))
def test_same_coords_is_ownership_not_value_equality(name):
    x = _tensor(name)
    copy = SparseTensor(mx.array(CLOUDS[name]), x.feats)
    wrapped = SparseTensor(x.coords, x.feats)  # one array, a manager of its own
    for other in (copy, wrapped):
        assert not x.same_coords(other) and x.same_rows(other)
        with pytest.raises(ValueError, match=r"^\[reuse_coords_from\] sparse tensor coordinates must match"):
            other.reuse_coords_from(x)
    _same_identity(x.replace(feats=x.feats + 1).reuse_coords_from(x), x)


@pytest.mark.parametrize("name", list(CLOUDS))
def test_a_key_takes_only_its_own_array(name):
    c = CLOUDS[name]
    m = CoordinateManager()
    key = m.insert_coords(mx.array(c))
    feats = mx.zeros((len(c), 1))
    own = m.coords(key)
    assert SparseTensor(own, feats, coord_key=key, coord_manager=m).coords is own
    with pytest.raises(
        ValueError, match=r"^\[SparseTensor\] coord_manager is required when coord_key is set"
    ):
        SparseTensor(own, feats, coord_key=key)
    with pytest.raises(ValueError, match=r"^\[SparseTensor\] coord_key .* does not belong to coord_manager"):
        SparseTensor(own, feats, coord_key=key, coord_manager=CoordinateManager())
    if len(c):  # an empty array has no rows to differ in
        with pytest.raises(ValueError, match=r"^\[SparseTensor\] coords must be the manager-owned array"):
            SparseTensor(mx.array(c), feats, coord_key=key, coord_manager=m)
        with pytest.raises(ValueError, match="manager-owned array"):
            SparseTensor(c[::-1].copy(), feats, coord_key=key, coord_manager=m)
    # NumPy rows equal to the key's are converted and accepted
    assert SparseTensor(c.copy(), feats, coord_key=key, coord_manager=m).same_coords(
        SparseTensor(own, feats, coord_key=key, coord_manager=m)
    )


@pytest.mark.parametrize("name", list(CLOUDS))
def test_value_equal_operands_still_join_on_the_fast_path(name):
    x = _tensor(name)
    y = SparseTensor(mx.array(CLOUDS[name]), x.feats + 1)
    assert lattice.explain(ops.sparse_add, x, y).name == "cpu.same_support"
    out = ops.sparse_add(x, y)
    _same_identity(out, x)
    np.testing.assert_allclose(np.asarray(out.feats), 2 * np.asarray(x.feats) + 1, rtol=1e-6)
    _same_identity(x + x, x)


@pytest.mark.parametrize("name", list(CLOUDS))
def test_submanifold_outputs_share_the_input_array(name):
    x = _tensor(name)
    w = mx.ones((3, 3, 3, 3, 2)) / 27
    for out in (
        ops.subm_conv3d(x, w),
        ops.normalized_subm_conv3d(x, w),
        lnn.SubmConv3d(2, 3, kernel_size=3)(x),
        lnn.NormalizedSubmConv3d(2, 3, kernel_size=3)(x),
        lnn.ReLU()(x),
        ops.max_pool3d(x, kernel_size=3, stride=1),
    ):
        _same_identity(out, x)


def test_outputs_onto_a_target_of_the_same_manager_share_its_array():
    source = SparseTensor(
        mx.array([[0, 0, 0, 0], [0, 1, 0, 0], [2, 1, 1, 1]], mx.int32), mx.ones((3, 1)), stride=2
    )
    c = np.array([[0, 0, 0, 0], [0, 1, 0, 0], [0, 2, 0, 0], [0, 3, 1, 0], [2, 2, 2, 2]], np.int32)
    target = SparseTensor(mx.array(c), mx.zeros((5, 1)), coord_manager=source.coord_manager)
    w = mx.ones((1, 2, 2, 2, 1))
    _same_identity(ops.conv_transpose3d(source, w, coordinates=target), target)
    _same_identity(ops.normalized_conv_transpose3d(source, w, coordinates=target), target)
    module = lnn.NormalizedConvTranspose3d(1, 1, kernel_size=2, stride=2, bias=False)
    _same_identity(module(source, target), target)
    _same_identity(ops.pool_transpose3d(source, target, kernel_size=2, stride=2), target)
    # an empty target
    empty = SparseTensor(mx.zeros((0, 4), mx.int32), mx.zeros((0, 1)), coord_manager=source.coord_manager)
    out = ops.conv_transpose3d(source, w, coordinates=empty)
    _same_identity(out, empty)
    assert out.feats.shape == (0, 1)


def test_a_padded_input_keeps_its_key_and_the_key_s_own_array():
    c = np.concatenate([CLOUDS["batch with an empty member"], np.zeros((2, 4), np.int32)])
    x = SparseTensor(mx.array(c), mx.ones((6, 2)), active_rows=4)
    out = ops.subm_conv3d(x, mx.ones((1, 3, 3, 3, 2)))
    assert out.coord_key == x.coord_key and out.coord_manager is x.coord_manager
    assert out.coords is x.coord_manager.coords(x.coord_key)
    np.testing.assert_array_equal(np.asarray(out.coords), c[:4])
    relu = lnn.ReLU()(x)
    assert relu.same_coords(x) and relu.same_rows(x)


@pytest.mark.parametrize("name", list(CLOUDS))
def test_one_array_in_one_manager_is_one_key(name):
    x = _tensor(name)
    m = x.coord_manager
    same = SparseTensor(x.coords, mx.zeros((x.capacity, 1)), coord_manager=m)
    _same_identity(same, x)
    assert m.insert_coords(x.coords) == x.coord_key
    # another stride, another count or another array object: another key
    assert not SparseTensor(x.coords, x.feats, 2, coord_manager=m).same_coords(x)
    assert not SparseTensor(mx.array(CLOUDS[name]), x.feats, coord_manager=m).same_coords(x)
    if x.capacity:
        fewer = SparseTensor(x.coords, x.feats, coord_manager=m, active_rows=x.capacity - 1)
        assert not fewer.same_coords(x) and fewer.active_count == x.capacity - 1
    # an output onto that target keeps the input's key (the target is the input's set)
    if x.capacity:
        out = ops.conv3d(x, mx.ones((1, 3, 1, 1, 2)), kernel_size=(3, 1, 1), coordinates=same)
        _same_identity(out, x)


# ---- conv argument forms (issue 17) -------------------------------------------------------------


@pytest.mark.parametrize("name", list(CLOUDS))
def test_a_pointwise_weight_may_be_a_matrix(name):
    x = _tensor(name, channels=3)
    w = mx.array(np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32))  # (C_out, C_in)
    b = mx.array([1.0, -1.0, 0.5, 0.0])
    want = np.asarray(x.feats) @ np.asarray(w).T + np.asarray(b)
    for out in (
        ops.conv3d(x, w, b, kernel_size=1),
        ops.subm_conv3d(x, w, b, kernel_size=1),
        ops.conv3d(x, w.reshape(4, 1, 1, 1, 3), b, kernel_size=1),
    ):
        _same_identity(out, x)
        np.testing.assert_allclose(np.asarray(out.feats), want.reshape(-1, 4), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"or \(C_out, C_in\) for a 1x1x1 kernel"):
        ops.conv3d(x, w, kernel_size=3)


def test_geometry_errors_come_before_weight_errors():
    x = _tensor("line", channels=1)
    for op in (ops.subm_conv3d, ops.normalized_subm_conv3d):
        with pytest.raises(ValueError, match=r"need an odd kernel_size on every axis, got \(2, 2, 2\)"):
            op(x, mx.ones((2, 1, 1)), kernel_size=2)
    for op in (ops.conv_transpose3d, ops.generative_conv_transpose3d, ops.normalized_conv_transpose3d):
        with pytest.raises(
            ValueError, match=r"the transposed stride \(2, 2, 2\) must divide the tensor stride \(1, 1, 1\)"
        ):
            op(x, mx.ones((2, 1, 1)))
