"""CoordinateManager: keys, coordinate sets, the downsample and relation caches."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import make_cloud
from reference import coords as rc
from reference import relations as rr

from lattice import ops
from lattice.core import (
    CoordinateManager,
    CoordinateMapKey,
    KernelRelation,
    KernelSpec,
    RelationCacheKey,
    RelationKind,
    SparseTensor,
)


def _tensor(name="random_sparse", stride=1) -> SparseTensor:
    c = make_cloud(name)
    return SparseTensor(c, mx.zeros((len(c), 2)), stride)


# ---- keys and sets -----------------------------------------------------------------------


def test_insert_and_read_back():
    m = CoordinateManager()
    c = make_cloud("batched")
    k = m.insert(c, (2, 1, 4))
    assert isinstance(k, CoordinateMapKey)
    assert (k.stride, k.manager_id) == ((2, 1, 4), m.id)
    assert m.size(k) == len(c)
    np.testing.assert_array_equal(np.asarray(m.coords(k)), c)
    k2 = m.insert(make_cloud("line"))
    assert k2 != k and set(m.keys) == {k, k2}
    assert "sets=2" in repr(m)


def test_managers_have_distinct_ids_and_keys_are_hashable():
    a, b = CoordinateManager(), CoordinateManager()
    assert a.id != b.id
    ka, kb = a.insert(make_cloud("line")), b.insert(make_cloud("line"))
    assert ka != kb  # same set id, different managers
    assert len({ka, kb, ka}) == 2


def test_key_from_another_manager_is_rejected():
    a, b = CoordinateManager(), CoordinateManager()
    kb = b.insert(make_cloud("line"))
    msg = rf"coordinate key {kb.id} \(manager {b.id}\) does not belong to manager {a.id}"
    with pytest.raises(ValueError, match=msg):
        a.coords(kb)
    with pytest.raises(ValueError, match=r"^\[downsample\] " + msg):
        a.downsample(kb, 2)
    ka = a.insert(make_cloud("line"))
    with pytest.raises(ValueError, match=r"^\[submanifold_kernel_relation\] " + msg):
        a.relation("submanifold", kb, KernelSpec(3))
    with pytest.raises(ValueError, match=r"^\[target_kernel_relation\] " + msg):
        a.relation("target", ka, KernelSpec(1), kb)
    # through the functional API: a key target of another manager
    x = _tensor()
    y = _tensor()
    with pytest.raises(
        ValueError, match=r"^\[target_kernel_relation\] coordinate key .* does not belong to manager"
    ):
        ops.target_kernel_relation(x, y.coord_key, kernel_size=1)


def test_non_key_is_a_type_error():
    m = CoordinateManager()
    with pytest.raises(TypeError, match=r"expected a CoordinateMapKey, got tuple"):
        m.size((0, (1, 1, 1), m.id))


def test_insert_validates():
    m = CoordinateManager()
    with pytest.raises(ValueError, match=r"^\[CoordinateManager.insert\] duplicate active coordinates"):
        m.insert(np.array([[0, 1, 1, 1], [0, 1, 1, 1]], np.int32))
    with pytest.raises(ValueError, match=r"^\[CoordinateManager.insert\] stride must be positive"):
        m.insert(make_cloud("line"), 0)


# ---- downsample cache ---------------------------------------------------------------------


def test_downsample_is_cached_and_correct():
    x = _tensor("batched")
    m, k = x.coord_manager, x.coord_key
    d = m.downsample(k, 2)
    assert m.downsample(k, 2) is d
    assert m.downsample(k, (2, 2, 2)) is d
    assert m.downsample(k, 1) is k
    assert d.stride == (2, 2, 2)
    np.testing.assert_array_equal(np.asarray(m.coords(d)), rc.downsample(x.coords, 2))
    d3 = m.downsample(k, (1, 2, 3))
    assert d3 != d and d3.stride == (1, 2, 3)
    dd = m.downsample(d, 2)
    assert dd.stride == (4, 4, 4)
    np.testing.assert_array_equal(np.asarray(m.coords(dd)), rc.downsample(rc.downsample(x.coords, 2), 2))


# ---- relation cache -------------------------------------------------------------------------


def test_relation_cache_returns_the_same_object():
    x = _tensor()
    m = x.coord_manager
    before = m.relation_count
    r1 = ops.kernel_relation(x, kernel_size=3, stride=2, padding=1)
    assert m.relation_count == before + 1
    assert ops.kernel_relation(x, kernel_size=(3, 3, 3), stride=2, padding=(1, 1, 1)) is r1
    assert m.relation(RelationKind.FORWARD, x.coord_key, KernelSpec(3, 2, 1)) is r1
    assert m.relation("forward", x.coord_key, KernelSpec(3, 2, 1, 1)) is r1
    assert m.relation_count == before + 1
    s1 = ops.submanifold_kernel_relation(x)
    assert ops.submanifold_kernel_relation(x, kernel_size=3) is s1
    # a derived tensor (new features, same coordinates) shares the key and so the cache
    derived = x.replace(feats=x.feats + 1)
    t1 = ops.transposed_kernel_relation(derived, kernel_size=1, stride=1)
    assert ops.transposed_kernel_relation(x, kernel_size=1, stride=1) is t1
    assert ops.kernel_relation(derived, kernel_size=3, stride=2, padding=1) is r1


@pytest.mark.parametrize(
    "other",
    [
        {"kernel_size": 2, "stride": 2, "padding": 1},
        {"kernel_size": 3, "stride": 3, "padding": 1},
        {"kernel_size": 3, "stride": 2, "padding": 0},
        {"kernel_size": 3, "stride": 2, "padding": 1, "dilation": 2},
        {"kernel_size": (3, 3, 1), "stride": 2, "padding": 1},
    ],
)
def test_different_spec_gives_a_different_relation(other):
    x = _tensor()
    r1 = ops.kernel_relation(x, kernel_size=3, stride=2, padding=1)
    r2 = ops.kernel_relation(x, **other)
    assert r2 is not r1
    assert r2.spec != r1.spec
    assert x.coord_manager.relation_count >= 2


def test_kinds_are_cached_apart():
    x = _tensor()
    s = ops.submanifold_kernel_relation(x, kernel_size=3)
    t = ops.target_kernel_relation(x, x, kernel_size=3)  # same spec and sets, other kind
    assert s is not t
    assert s.kind is RelationKind.SUBMANIFOLD and t.kind is RelationKind.TARGET
    assert s.out_key == t.out_key == x.coord_key
    # the same rule, so the same edges
    for a, b in zip(rr.native_edges(s), rr.native_edges(t), strict=True):
        np.testing.assert_array_equal(np.sort(a), np.sort(b))


def test_targets_are_part_of_the_cache_key():
    x = _tensor()
    fwd = ops.kernel_relation(x, kernel_size=2, stride=2)
    y = SparseTensor(
        fwd.out_coords, mx.zeros((fwd.out_count, 1)), 2, coord_key=fwd.out_key, coord_manager=x.coord_manager
    )
    up_gen = ops.transposed_kernel_relation(y, kernel_size=2, stride=2)
    up_x = ops.transposed_kernel_relation(y, x, kernel_size=2, stride=2)
    assert up_gen is not up_x
    assert ops.transposed_kernel_relation(y, x, kernel_size=2, stride=2) is up_x
    assert ops.transposed_kernel_relation(y, x.coord_key, kernel_size=2, stride=2) is up_x
    assert ops.transposed_kernel_relation(y, kernel_size=2, stride=2) is up_gen
    assert up_gen.out_key != x.coord_key and up_x.out_key == x.coord_key
    key = RelationCacheKey(y.coord_key, x.coord_key, KernelSpec(2, 2), RelationKind.TRANSPOSED)
    assert key == RelationCacheKey(y.coord_key, x.coord_key, KernelSpec((2, 2, 2), 2), "transposed")


def test_forward_output_key_is_the_cached_downsample():
    x = _tensor()
    r = ops.kernel_relation(x, kernel_size=3, stride=2)
    assert r.out_key == x.coord_manager.downsample(x.coord_key, 2)
    assert isinstance(r, KernelRelation) and r.in_key == x.coord_key


def test_target_from_another_manager_joins_this_one():
    x = _tensor()
    c = rc.downsample(x.coords, 2)
    other = SparseTensor(c, mx.zeros((len(c), 1)), 2)  # its own manager
    r = ops.target_kernel_relation(x, other, kernel_size=2, stride=2)
    assert r.out_key.manager_id == x.coord_manager.id
    rr.assert_relation_matches(r, rr.target(x.coords, c, 2, 2), x.active_count, same_out_order=True)


# ---- manager.relation argument errors ---------------------------------------------------------


def test_manager_relation_errors():
    x = _tensor()
    m, k = x.coord_manager, x.coord_key
    with pytest.raises(ValueError, match="'diagonal' is not a valid RelationKind"):
        m.relation("diagonal", k, KernelSpec(3))
    with pytest.raises(
        ValueError, match=r"^\[submanifold_kernel_relation\] a submanifold relation has no explicit target"
    ):
        m.relation("submanifold", k, KernelSpec(3), k)
    with pytest.raises(
        ValueError,
        match=r"^\[submanifold_kernel_relation\] submanifold relations take stride 1 and padding 0",
    ):
        m.relation("submanifold", k, KernelSpec(3, 2))
    with pytest.raises(
        ValueError,
        match=r"^\[submanifold_kernel_relation\] submanifold kernels need an odd kernel_size on every axis, got \(2, 2, 2\)",
    ):
        m.relation("submanifold", k, KernelSpec(2))
    with pytest.raises(
        ValueError, match=r"^\[forward_kernel_relation\] a forward relation generates its output; use target"
    ):
        m.relation("forward", k, KernelSpec(2, 2), k)
    with pytest.raises(
        ValueError, match=r"^\[target_kernel_relation\] a target relation needs a target coordinate set"
    ):
        m.relation("target", k, KernelSpec(2, 2))
    y = _tensor(stride=2)
    with pytest.raises(
        ValueError, match=r"^\[generative_kernel_relation\] generative relations take no padding or dilation"
    ):
        y.coord_manager.relation("generative", y.coord_key, KernelSpec(2, 2, 1))
    with pytest.raises(
        ValueError,
        match=r"^\[target_kernel_relation\] target stride must be \(2, 2, 2\) for this relation, "
        r"got \(1, 1, 1\)",
    ):
        m.relation("target", k, KernelSpec(2, 2), k)
