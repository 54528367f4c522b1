"""Alignment records (build_sparse_alignment, sparse_alignment), gather_aligned_features and
sparse_cat_aligned against the dict-join oracle."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import CLOUDS, make_cloud
from reference import rows as rr
from reference.coords import to_array

import lattice
import mlx_lattice
from lattice import ops
from lattice.ops import SparseAlignment, build_sparse_alignment, gather_aligned_features, sparse_alignment

JOINS = ("inner", "left", "right", "outer")


def _np(a) -> np.ndarray:
    return np.asarray(a).astype(np.int64)


def _other(c: np.ndarray) -> np.ndarray:
    """A set sharing part of ``c``: every other row kept, every fourth moved by one in y,
    plus new rows (two in a batch member ``c`` lacks), shuffled."""
    keep = c[::2].astype(np.int64)
    keep[::2, 2] += 1
    extra = to_array([(0, 50, 50, 50), (3, 1, 2, 3), (3, 0, 0, 0)])
    out = np.unique(np.concatenate([keep, extra]), axis=0)
    return out[np.random.default_rng(len(c)).permutation(len(out))].astype(np.int32)


def _capacity(join, nl, nr):
    return {"inner": nl, "left": nl, "right": nr, "outer": nl + nr}[join]


def _check(a, lhs, rhs, join, lhs_cap, rhs_cap, dtype=mx.int32) -> None:
    """``a`` is the oracle's join of ``lhs`` and ``rhs`` with the documented buffers."""
    assert isinstance(a, SparseAlignment)
    coords, lrows, rrows = rr.align(lhs, rhs, join)
    m, cap = len(coords), _capacity(join, lhs_cap, rhs_cap)
    assert a.capacity == cap and a.coords.shape == (cap, 4) and a.coords.dtype == dtype
    assert a.active_rows.shape == (1,) and a.active_rows.dtype == mx.int32
    assert int(a.active_count.item()) == m
    np.testing.assert_array_equal(_np(a.coords)[:m], to_array(coords))
    np.testing.assert_array_equal(_np(a.lhs_rows)[:m], lrows)
    np.testing.assert_array_equal(_np(a.rhs_rows)[:m], rrows)
    assert not _np(a.coords)[m:].any()
    assert (_np(a.lhs_rows)[m:] == -1).all() and (_np(a.rhs_rows)[m:] == -1).all()
    assert a.lhs_rows.dtype == mx.int32 and a.rhs_rows.dtype == mx.int32


def _pairs():
    for name in CLOUDS:
        c = make_cloud(name)
        yield name, c, _other(c)
    c = make_cloud("batched")
    yield "empty-rhs", c, np.zeros((0, 4), np.int32)
    yield "empty-lhs", np.zeros((0, 4), np.int32), c
    yield "disjoint", make_cloud("line"), make_cloud("plane") + np.array([0, 0, 0, 100], np.int32)


PAIRS = {name: (lhs, rhs) for name, lhs, rhs in _pairs()}


# ---- build_sparse_alignment ----------------------------------------------------------------


@pytest.mark.parametrize("join", JOINS)
@pytest.mark.parametrize("pair", list(PAIRS))
def test_build_sparse_alignment_matches_reference(pair, join):
    lhs, rhs = PAIRS[pair]
    a = build_sparse_alignment(mx.array(lhs), None, mx.array(rhs), None, join=join)
    _check(a, lhs, rhs, join, len(lhs), len(rhs))


@pytest.mark.parametrize("join", JOINS)
def test_build_sparse_alignment_of_a_real_scan(kitti_coords, join):
    rhs = _other(kitti_coords[::3])
    a = build_sparse_alignment(
        kitti_coords, len(kitti_coords), rhs, mx.array([len(rhs)], mx.int32), join=join
    )
    _check(a, kitti_coords, rhs, join, len(kitti_coords), len(rhs))


@pytest.mark.parametrize("join", JOINS)
def test_build_sparse_alignment_reads_the_active_rows(join):
    lhs, rhs = PAIRS["random_sparse"]
    nl, nr = 101, mx.array([40], dtype=mx.int32)
    a = build_sparse_alignment(lhs, nl, rhs, nr, join=join)
    _check(a, lhs[:nl], rhs[:40], join, len(lhs), len(rhs))  # capacity: the buffers, not the live rows
    b = build_sparse_alignment(lhs, 0, rhs, 10**6, join=join)  # 0 rows, and a count past the buffer
    _check(b, lhs[:0], rhs, join, len(lhs), len(rhs))


def test_build_sparse_alignment_keeps_int64_coords():
    lhs, rhs = PAIRS["batched"]
    a = build_sparse_alignment(mx.array(lhs.astype(np.int64)), None, mx.array(rhs.astype(np.int64)), None)
    _check(a, lhs, rhs, "inner", len(lhs), len(rhs), dtype=mx.int64)


def test_build_sparse_alignment_checks_its_arguments():
    lhs, rhs = PAIRS["line"]
    with pytest.raises(ValueError, match=r"\[build_sparse_alignment\] lhs_coords and rhs_coords must share"):
        build_sparse_alignment(mx.array(lhs), None, mx.array(rhs.astype(np.int64)), None)
    with pytest.raises(ValueError, match=r"\[build_sparse_alignment\] join must be one of"):
        build_sparse_alignment(lhs, None, rhs, None, join="full")
    with pytest.raises(ValueError, match=r"\[build_sparse_alignment\] duplicate"):
        build_sparse_alignment(np.concatenate([lhs, lhs[:1]]), None, rhs, None)


def test_alignment_record_checks_its_fields():
    coords, count = mx.zeros((3, 4), mx.int32), mx.array([0], dtype=mx.int32)
    rows = mx.full((3,), -1, mx.int32)
    assert SparseAlignment(coords, count, rows, rows).capacity == 3
    with pytest.raises(ValueError, match=r"\[SparseAlignment\] rhs_rows must be a \(3,\) mlx.core.int32"):
        SparseAlignment(coords, count, rows, rows.astype(mx.int64))


# ---- on tensors -----------------------------------------------------------------------------


def _tensors(lhs, rhs, channels=(2, 3)):
    rng = np.random.default_rng(len(lhs) + len(rhs))
    x = lattice.SparseTensor(lhs, rng.normal(size=(len(lhs), channels[0])).astype(np.float32))
    y = lattice.SparseTensor(rhs, rng.normal(size=(len(rhs), channels[1])).astype(np.float32))
    return x, y


@pytest.mark.parametrize("join", JOINS)
@pytest.mark.parametrize("pair", list(PAIRS))
def test_sparse_alignment_of_tensors_matches_reference(pair, join):
    lhs, rhs = PAIRS[pair]
    x, y = _tensors(lhs, rhs)
    _check(sparse_alignment(x, y, join=join), lhs, rhs, join, len(lhs), len(rhs))


@pytest.mark.parametrize("join", JOINS)
def test_alignment_of_one_support_is_the_identity(join):
    c = make_cloud("random_sparse")
    x, _ = _tensors(c, c)
    y = x.replace(feats=mx.ones((len(c), 3)))  # the same key
    assert lattice.explain(sparse_alignment, x, y, join=join).name == "cpu.same_support"
    _check(sparse_alignment(x, y, join=join), c, c, join, len(c), len(c))


def test_sparse_alignment_joins_like_the_algebra():
    lhs, rhs = PAIRS["batched"]
    x, y = _tensors(lhs, rhs, (2, 2))
    for join in JOINS:
        a = sparse_alignment(x, y, join=join)
        m = int(a.active_count.item())
        s = ops.sparse_add(x, y, join=join)
        np.testing.assert_array_equal(_np(a.coords)[:m], _np(s.coords)[: s.active_count])
        assert lattice.explain(sparse_alignment, x, y, join=join).name == "cpu.hash_join"


# ---- gather_aligned_features --------------------------------------------------------------


@pytest.mark.parametrize("fill", [0.0, -2.5, 7])
@pytest.mark.parametrize("join", JOINS)
def test_gather_aligned_features(join, fill):
    lhs, rhs = PAIRS["batched"]
    x, y = _tensors(lhs, rhs)
    a = sparse_alignment(x, y, join=join)
    for t, rows in ((x, a.lhs_rows), (y, a.rhs_rows)):
        got = np.asarray(gather_aligned_features(t, rows, fill=fill))
        r = _np(rows)
        want = np.where((r >= 0)[:, None], np.asarray(t.feats)[np.maximum(r, 0)], np.float32(fill))
        assert got.shape == (a.capacity, t.channels) and got.dtype == np.float32
        np.testing.assert_array_equal(got, want)


def test_gather_aligned_features_edge_cases():
    empty = lattice.SparseTensor(np.zeros((0, 4), np.int32), np.zeros((0, 3), np.float32))
    got = gather_aligned_features(empty, mx.array([-1, -1], dtype=mx.int32), fill=4.0)
    np.testing.assert_array_equal(np.asarray(got), np.full((2, 3), 4.0, np.float32))
    feats = mx.arange(6, dtype=mx.float16).reshape(3, 2)
    got = gather_aligned_features(feats, [2, -1, 0])
    assert got.dtype == mx.float16
    np.testing.assert_array_equal(np.asarray(got), [[4, 5], [0, 0], [0, 1]])
    assert gather_aligned_features(feats, mx.zeros((0,), mx.int32)).shape == (0, 2)
    with pytest.raises(ValueError, match=r"\[gather_aligned_features\] rows must be below 3"):
        gather_aligned_features(feats, [3])
    with pytest.raises(ValueError, match=r"\[gather_aligned_features\] rows must be a 1-D integer array"):
        gather_aligned_features(feats, mx.zeros((2, 1), mx.int32))


# ---- sparse_cat_aligned ---------------------------------------------------------------------


@pytest.mark.parametrize("join", JOINS)
@pytest.mark.parametrize("pair", ["single", "random_sparse", "batched", "empty-rhs", "empty-lhs", "disjoint"])
def test_sparse_cat_aligned_matches_reference(pair, join):
    lhs, rhs = PAIRS[pair]
    x, y = _tensors(lhs, rhs)
    out = ops.sparse_cat_aligned(x, y, join=join)
    coords, lrows, rrows = rr.align(lhs, rhs, join)
    m, cap = len(coords), _capacity(join, len(lhs), len(rhs))
    assert isinstance(out, lattice.SparseTensor)
    assert out.active_count == m and out.capacity == cap and out.channels == 5
    np.testing.assert_array_equal(_np(out.coords)[:m], to_array(coords))
    fx, fy = np.asarray(x.feats), np.asarray(y.feats)
    want = np.zeros((m, 5), np.float32)
    for i, (a, b) in enumerate(zip(lrows, rrows, strict=True)):
        if a >= 0:
            want[i, :2] = fx[a]
        if b >= 0:
            want[i, 2:] = fy[b]
    np.testing.assert_array_equal(np.asarray(out.feats)[:m], want)
    assert not np.asarray(out.feats)[m:].any() and not _np(out.coords)[m:].any()
    # the live rows are cat's (the compact form)
    c = ops.cat([x, y], join=join)
    np.testing.assert_array_equal(np.asarray(c.feats)[: c.active_count], want)
    # and the result works on: a feature op keeps its rows
    r = ops.relu(out)
    np.testing.assert_array_equal(np.asarray(r.feats)[:m], np.maximum(want, 0))


def test_sparse_cat_aligned_on_one_support_keeps_the_key():
    c = make_cloud("plane")
    x, _ = _tensors(c, c)
    y = x.replace(feats=mx.ones((len(c), 1)))
    out = ops.sparse_cat_aligned(x, y, join="outer")
    assert out.coord_key == x.coord_key and out.capacity == len(c) and out.channels == 3
    np.testing.assert_array_equal(np.asarray(out.feats)[:, 2], 1.0)


def test_sparse_cat_aligned_keeps_declared_batches():
    a = ops.sparse_collate(
        [np.array([[0, 0, 0], [1, 1, 1]]), np.zeros((0, 3), np.int32)],
        [np.ones((2, 1))] * 1 + [np.ones((0, 1))],
    )
    b = ops.sparse_collate(
        [np.array([[1, 1, 1], [2, 2, 2]]), np.zeros((0, 3), np.int32)],
        [np.ones((2, 1))] * 1 + [np.ones((0, 1))],
    )
    out = ops.sparse_cat_aligned(a, b, join="outer")
    assert out.batch_counts == (3, 0) and out.capacity == 4 and out.active_count == 3


# ---- the documented names ------------------------------------------------------------------


def test_mlx_lattice_serves_the_documented_alignment():
    from mlx_lattice.core.coords.alignment import SparseAlignment as documented
    from mlx_lattice.ops.tensor import align_sparse

    assert documented is SparseAlignment and align_sparse is sparse_alignment
    assert mlx_lattice.ops.build_sparse_alignment is build_sparse_alignment
    lhs, rhs = PAIRS["batched"]
    x, y = _tensors(lhs, rhs)
    a = align_sparse(x, y)  # documented default: inner
    _check(a, lhs, rhs, "inner", len(lhs), len(rhs))
    aligned = lattice.ops.align_sparse(x, y)  # lattice's own: two tensors, outer
    assert isinstance(aligned, tuple) and aligned[0].active_count == len(rr.align(lhs, rhs, "outer")[0])


@pytest.mark.parametrize("join", JOINS)
def test_a_lazily_counted_operand_aligns_by_its_live_rows(join):
    from test_lazy_rows import lazy_copy

    lhs, rhs = PAIRS["batched"]
    x, y = _tensors(lhs, rhs)
    lx = lazy_copy(x)  # x's rows, then spare rows of batch -1, and a lazy count
    for a_args, b_args in (((x, y), (lx, y)), ((y, x), (y, lx))):
        a, b = sparse_alignment(*a_args, join=join), sparse_alignment(*b_args, join=join)
        m = int(a.active_count.item())
        assert int(b.active_count.item()) == m
        for field in ("coords", "lhs_rows", "rhs_rows"):
            np.testing.assert_array_equal(_np(getattr(b, field))[:m], _np(getattr(a, field))[:m])
        c, d = ops.sparse_cat_aligned(*a_args, join=join), ops.sparse_cat_aligned(*b_args, join=join)
        assert d.active_count == c.active_count
        np.testing.assert_array_equal(_np(d.coords)[:m], _np(c.coords)[:m])
        np.testing.assert_array_equal(np.asarray(d.feats)[:m], np.asarray(c.feats)[:m])
