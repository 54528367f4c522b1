"""Sparse tensor algebra (lattice.ops.algebra, lattice.ops.tensors) against a dict-of-coordinates reference:
joins, fills, row order, the identity fast path, keys, managers, gradients, errors."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import make_cloud

import lattice.ops.algebra as A
import lattice.ops.tensors as T
from lattice.core import CoordinateManager, CoordinateSet, SparseTensor

JOINS = ("inner", "left", "right", "outer")
NP_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum}


# ---- reference -----------------------------------------------------------------------------


def _rows(coords) -> list[tuple[int, ...]]:
    return [tuple(r) for r in np.asarray(coords).reshape(-1, 4).tolist()]


def ref_join(tensors, join):
    """Output coordinate tuples of a join, by the rule (Python sets and lists)."""
    keys = [_rows(t[0]) for t in tensors]
    if join == "left":
        return keys[0]
    if join == "right":
        return keys[-1]
    if join == "inner":
        common = set(keys[0]).intersection(*map(set, keys[1:]))
        return [k for k in keys[0] if k in common]
    out, seen = [], set()
    for ks in keys:
        for k in ks:
            if k not in seen:
                seen.add(k)
                out.append(k)
    return out


def ref_gather(coords, feats, out_keys, fill):
    table = {k: np.asarray(f, np.float64) for k, f in zip(_rows(coords), np.asarray(feats), strict=True)}
    c = np.asarray(feats).shape[1]
    return np.array([table.get(k, np.full(c, fill)) for k in out_keys]).reshape(len(out_keys), c)


def ref_binary(lhs, rhs, fn, join, lfill=0.0, rfill=0.0):
    out = ref_join([lhs, rhs], join)
    return out, fn(ref_gather(*lhs, out, lfill), ref_gather(*rhs, out, rfill))


def overlapping(seed=0, n=60, c=3, cloud="batched"):
    """Two (coords, feats) sets drawn from one cloud with a partial overlap, rows shuffled."""
    rng = np.random.default_rng(seed)
    pool = make_cloud(cloud)
    pick = rng.permutation(len(pool))
    a = pool[pick[:n]]
    b = pool[pick[n // 2 : n // 2 + n]]
    b = b[rng.permutation(len(b))]
    fa = rng.normal(size=(len(a), c)).astype(np.float32)
    fb = rng.normal(size=(len(b), c)).astype(np.float32)
    return (a, fa), (b, fb)


def st(pair, **kwargs) -> SparseTensor:
    return SparseTensor(pair[0], pair[1], **kwargs)


def check(result: SparseTensor, keys, feats, tol=1e-6):
    assert _rows(result.coords[: result.active_count]) == list(keys)
    np.testing.assert_allclose(np.asarray(result.feats.astype(mx.float32)), feats, rtol=tol, atol=tol)


# ---- binary ops ------------------------------------------------------------------------------


@pytest.mark.parametrize("join", JOINS)
@pytest.mark.parametrize("op", sorted(NP_OPS))
def test_sparse_binary_matches_reference(op, join):
    lp, rp = overlapping(seed=len(op) + len(join))
    lhs, rhs = st(lp), st(rp)
    out = A.sparse_binary(lhs, rhs, op, join=join, lhs_fill=-1.5, rhs_fill=2.0)
    keys, feats = ref_binary(lp, rp, NP_OPS[op], join, -1.5, 2.0)
    check(out, keys, feats)
    manager = rhs.coord_manager if join == "right" else lhs.coord_manager
    assert out.coord_manager is manager
    if join in ("left", "right"):  # the output rows are that operand's rows: its key is kept
        assert out.coord_key == (lhs if join == "left" else rhs).coord_key


@pytest.mark.parametrize(
    "fn,op,join",
    [
        (A.sparse_add, np.add, "outer"),
        (A.sparse_sub, np.subtract, "outer"),
        (A.sparse_mul, np.multiply, "inner"),
        (A.sparse_maximum, np.maximum, "inner"),
        (A.sparse_minimum, np.minimum, "inner"),
    ],
)
def test_named_ops_default_joins(fn, op, join):
    lp, rp = overlapping(seed=3, cloud="random_sparse")
    out = fn(st(lp), st(rp))
    check(out, *ref_binary(lp, rp, op, join))


def test_outer_join_row_order_is_lhs_then_rhs_only():
    lhs = SparseTensor([[0, 5, 0, 0], [0, 1, 0, 0], [1, 0, 0, 0]], mx.ones((3, 1)))
    rhs = SparseTensor([[2, 0, 0, 0], [0, 1, 0, 0], [0, -3, 0, 0]], mx.full((3, 1), 2.0))
    out = A.sparse_add(lhs, rhs)
    assert _rows(out.coords) == [(0, 5, 0, 0), (0, 1, 0, 0), (1, 0, 0, 0), (2, 0, 0, 0), (0, -3, 0, 0)]
    assert np.asarray(out.feats).ravel().tolist() == [1, 3, 1, 2, 2]
    inner = A.sparse_mul(rhs, lhs)  # intersection in lhs (here: rhs) order
    assert _rows(inner.coords) == [(0, 1, 0, 0)] and inner.feats.item() == 2.0


def test_callable_op_and_channel_broadcast():
    lp, rp = overlapping(seed=5)
    out = A.sparse_binary(st(lp), st(rp), lambda a, b: mx.concatenate([a, a * b], axis=1), join="inner")
    keys, _ = ref_binary(lp, rp, np.add, "inner")
    a, b = ref_gather(*lp, keys, 0.0), ref_gather(*rp, keys, 0.0)
    check(out, keys, np.concatenate([a, a * b], axis=1), tol=1e-5)
    one = (rp[0], rp[1][:, :1])  # one channel broadcasts against three
    check(A.sparse_mul(st(lp), st(one)), *ref_binary(lp, one, np.multiply, "inner"))


def test_identity_fast_path_keeps_the_key():
    lp, _ = overlapping(seed=1)
    x = st(lp)
    y = x.replace(feats=mx.ones_like(x.feats))
    n_keys = len(x.coord_manager.keys)
    for join in JOINS:
        out = A.sparse_add(x, y, join=join)
        assert out.coord_key == x.coord_key and out.coord_manager is x.coord_manager
        np.testing.assert_allclose(np.asarray(out.feats), lp[1] + 1)
    assert len(x.coord_manager.keys) == n_keys  # nothing inserted
    # Same rows in another manager: coordinates compared, lhs key kept.
    other = SparseTensor(lp[0], np.full_like(lp[1], 2.0))
    out = A.sparse_mul(x, other)
    assert out.coord_key == x.coord_key and np.allclose(np.asarray(out.feats), lp[1] * 2)


def test_join_covering_lhs_keeps_lhs_key():
    lp, _ = overlapping(seed=2)
    x = st(lp)
    sub = SparseTensor(lp[0][::2], lp[1][::2])  # a subset of x
    assert A.sparse_add(x, sub).coord_key == x.coord_key  # union == x's rows
    assert A.sparse_mul(sub, x).coord_key == sub.coord_key  # intersection == sub's rows
    assert A.sparse_mul(x, sub).coord_key != x.coord_key


def test_different_managers_and_empty_operands():
    lp, rp = overlapping(seed=4)
    lhs, rhs = st(lp), st(rp, coord_manager=CoordinateManager())
    assert lhs.coord_manager is not rhs.coord_manager
    out = A.sparse_sub(lhs, rhs)
    assert out.coord_manager is lhs.coord_manager
    check(out, *ref_binary(lp, rp, np.subtract, "outer"))
    empty = SparseTensor(np.zeros((0, 4), np.int32), np.zeros((0, 3), np.float32))
    check(A.sparse_add(empty, rhs), _rows(rp[0]), rp[1])
    check(A.sparse_add(lhs, empty), _rows(lp[0]), lp[1])
    assert A.sparse_mul(lhs, empty).active_count == 0
    assert A.sparse_add(empty, empty).shape == (0, 3)
    check(A.sparse_add(empty, rhs, join="left"), [], np.zeros((0, 3)))


def test_batch_with_empty_member_keeps_declared_batch_size():
    a = SparseTensor([[0, 1, 1, 1], [2, 0, 0, 0]], mx.ones((2, 1)), batch_counts=[1, 0, 1, 0])
    b = SparseTensor([[0, 1, 1, 1], [2, 5, 0, 0]], mx.ones((2, 1)))
    out = A.sparse_add(a, b)
    assert out.batch_counts == (1, 0, 2, 0)
    assert np.asarray(out.feats).ravel().tolist() == [2, 1, 1]


def test_active_rows_past_the_count_are_ignored():
    lp, rp = overlapping(seed=6)
    lhs = SparseTensor(lp[0], lp[1], active_rows=40)
    out = A.sparse_add(lhs, st(rp))
    check(out, *ref_binary((lp[0][:40], lp[1][:40]), rp, np.add, "outer"))


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16])
def test_low_precision_binary_and_cat(dtype):
    lp, rp = overlapping(seed=8)
    lhs, rhs = st(lp).astype(dtype), st(rp).astype(dtype)
    out = A.sparse_add(lhs, rhs)
    assert out.dtype == dtype
    keys, ref = ref_binary(
        (lp[0], np.asarray(lhs.feats.astype(mx.float32))),
        (rp[0], np.asarray(rhs.feats.astype(mx.float32))),
        np.add,
        "outer",
    )
    check(out, keys, ref, tol=2e-2)
    assert A.cat([lhs, rhs], join="outer").dtype == dtype


def test_binary_errors():
    lp, rp = overlapping(seed=9)
    lhs, rhs = st(lp), st(rp)
    with pytest.raises(ValueError, match=r"^\[sparse_add\] strides differ: lhs \(1, 1, 1\), rhs \(2, 2, 2\)"):
        A.sparse_add(lhs, SparseTensor(rp[0], rp[1], stride=2))
    with pytest.raises(ValueError, match=r"^\[sparse_mul\] channels differ: lhs has 3, rhs has 2"):
        A.sparse_mul(lhs, SparseTensor(rp[0], rp[1][:, :2]))
    with pytest.raises(
        ValueError,
        match=r"^\[sparse_add\] join must be one of \('inner', 'left', 'right', 'outer'\), got 'full'",
    ):
        A.sparse_add(lhs, rhs, join="full")
    with pytest.raises(
        ValueError,
        match=r"^\[sparse_binary\] op must be one of \('add', 'sub', 'mul', 'maximum', 'minimum'\), got 'pow'",
    ):
        A.sparse_binary(lhs, rhs, "pow")
    with pytest.raises(TypeError, match=r"^\[sparse_binary\] op must be a callable"):
        A.sparse_binary(lhs, rhs, 3)
    with pytest.raises(TypeError, match=r"^\[sparse_add\] rhs must be a SparseTensor, got ndarray"):
        A.sparse_add(lhs, rp[1])
    with pytest.raises(TypeError, match=r"^\[sparse_add\] lhs_fill must be a number, got 'x'"):
        A.sparse_add(lhs, rhs, lhs_fill="x")
    with pytest.raises(
        ValueError, match=r"^\[sparse_binary\] op must return \(\d+, C\) features, got \(3,\)"
    ):
        A.sparse_binary(lhs, rhs, lambda a, b: mx.zeros(3))


# ---- operators ---------------------------------------------------------------------------------


def test_operators():
    lp, rp = overlapping(seed=10)
    lhs, rhs = st(lp), st(rp)
    check(lhs + rhs, *ref_binary(lp, rp, np.add, "outer"))
    check(lhs - rhs, *ref_binary(lp, rp, np.subtract, "outer"))
    check(lhs * rhs, *ref_binary(lp, rp, np.multiply, "inner"))
    check(lhs & rhs, *ref_binary(lp, rp, np.multiply, "inner"))
    with pytest.raises(TypeError):
        lhs & 2
    keys = _rows(lp[0])
    for value, ref in [
        (lhs * 2.0, lp[1] * 2),
        (3 * lhs, lp[1] * 3),
        (lhs + 1, lp[1] + 1),
        (1 + lhs, lp[1] + 1),
        (lhs - 0.5, lp[1] - 0.5),
        (2 - lhs, 2 - lp[1]),
        (-lhs, -lp[1]),
        (lhs / 4, lp[1] / 4),
        (lhs + mx.array([1.0, 2.0, 3.0]), lp[1] + [1, 2, 3]),
        (np.array([1.0, 2.0, 3.0]) * lhs, lp[1] * [1, 2, 3]),
        (lhs * mx.array(lp[1]), lp[1] ** 2),
    ]:
        assert value.coord_key == lhs.coord_key
        check(value, keys, ref, tol=1e-6)
    with pytest.raises(
        ValueError, match=r"^\[SparseTensor.__add__\] operand of shape \(2,\) does not broadcast"
    ):
        lhs + mx.ones(2)
    with pytest.raises(
        ValueError, match=r"^\[SparseTensor.__mul__\] operand of shape \(\d+, 3, 2\) does not broadcast"
    ):
        lhs * mx.ones((len(lp[0]), 3, 2))
    with pytest.raises(TypeError):
        lhs + "a"


# ---- cat, align, reindex ------------------------------------------------------------------------


@pytest.mark.parametrize("join", JOINS)
def test_cat_three_tensors(join):
    rng = np.random.default_rng(11)
    pool = make_cloud("batched")
    parts = []
    for i, c in enumerate((2, 1, 3)):
        rows = rng.choice(len(pool), size=120, replace=False)
        parts.append((pool[rows], rng.normal(size=(120, c)).astype(np.float32) + i))
    out = A.cat([st(p) for p in parts], join=join)
    keys = ref_join(parts, join)
    ref = np.concatenate([ref_gather(*p, keys, 0.0) for p in parts], axis=1)
    check(out, keys, ref)
    assert out.channels == 6


def test_cat_fast_path_and_errors():
    lp, rp = overlapping(seed=12)
    x = st(lp)
    out = A.cat([x, x.replace(feats=x.feats * 2), x])
    assert out.coord_key == x.coord_key
    check(out, _rows(lp[0]), np.concatenate([lp[1], lp[1] * 2, lp[1]], axis=1))
    assert A.cat([x]).coord_key == x.coord_key
    with pytest.raises(ValueError, match=r"^\[cat\] tensors must be a non-empty sequence"):
        A.cat([])
    with pytest.raises(
        ValueError, match=r"^\[cat\] strides differ: tensors\[0\] \(1, 1, 1\), tensors\[1\] \(2, 2, 2\)"
    ):
        A.cat([x, SparseTensor(rp[0], rp[1], stride=2)])
    with pytest.raises(TypeError, match=r"^\[cat\] tensors\[1\] must be a SparseTensor, got int"):
        A.cat([x, 3])


@pytest.mark.parametrize("join", JOINS)
def test_align_sparse(join):
    lp, rp = overlapping(seed=13)
    a, b = A.align_sparse(st(lp), st(rp), join=join, fill=-7.0)
    keys = ref_join([lp, rp], join)
    check(a, keys, ref_gather(*lp, keys, -7.0))
    check(b, keys, ref_gather(*rp, keys, -7.0))
    assert a.coord_key == b.coord_key and a.coord_manager is b.coord_manager


def test_reindex_sparse():
    lp, rp = overlapping(seed=14)
    x, target = st(lp), st(rp, coord_manager=None)
    same = SparseTensor(rp[0], rp[1], coord_manager=x.coord_manager)
    for t in (target, same):
        out = A.reindex_sparse(x, t, fill=9.0)
        assert out.coord_key == t.coord_key and out.coord_manager is t.coord_manager
        check(out, _rows(rp[0]), ref_gather(*lp, _rows(rp[0]), 9.0))
    out = A.reindex_sparse(x, rp[0])  # a coordinate array: a new key in x's manager
    assert out.coord_manager is x.coord_manager and out.coord_key != x.coord_key
    check(out, _rows(rp[0]), ref_gather(*lp, _rows(rp[0]), 0.0))
    check(
        A.reindex_sparse(x, CoordinateSet(mx.array(rp[0]), 5)),
        _rows(rp[0][:5]),
        ref_gather(*lp, _rows(rp[0][:5]), 0.0),
    )
    assert A.reindex_sparse(x, x.replace(feats=x.feats[:, :1])).coord_key == x.coord_key
    empty = SparseTensor(np.zeros((0, 4), np.int32), np.zeros((0, 3), np.float32))
    check(A.reindex_sparse(empty, rp[0], fill=1.0), _rows(rp[0]), np.ones((len(rp[0]), 3)))
    with pytest.raises(
        ValueError, match=r"^\[reindex_sparse\] strides differ: input \(1, 1, 1\), target \(2, 2, 2\)"
    ):
        A.reindex_sparse(x, SparseTensor(rp[0], rp[1], stride=2))
    with pytest.raises(ValueError, match=r"^\[reindex_sparse\] duplicate active coordinates"):
        A.reindex_sparse(x, np.concatenate([rp[0], rp[0][:1]]))
    with pytest.raises(ValueError, match=r"^\[reindex_sparse\] target must have shape \(N, 4\)"):
        A.reindex_sparse(x, rp[0][:, :3])


# ---- row selection -----------------------------------------------------------------------------


def test_prune_prune_mask_crop_replace_feature():
    lp, _ = overlapping(seed=15)
    x = st(lp)
    rows = [5, 0, 17, 3]
    out = T.prune(x, rows)
    assert out.coord_manager is x.coord_manager and out.coord_key != x.coord_key
    check(out, _rows(lp[0][rows]), lp[1][rows])
    assert T.prune(x, []).shape == (0, 3)
    mask = np.asarray(lp[1][:, 0] > 0)
    check(T.prune_mask(x, mask), _rows(lp[0][mask]), lp[1][mask])
    lo, hi = (-3, -2, -4), (4, 2, 5)
    inside = np.all((lp[0][:, 1:] >= lo) & (lp[0][:, 1:] <= hi), axis=1)
    assert 0 < inside.sum() < len(inside)
    check(T.crop(x, min_coord=lo, max_coord=hi), _rows(lp[0][inside]), lp[1][inside])
    new = T.replace_feature(x, mx.zeros((len(lp[0]), 7)))
    assert new.coord_key == x.coord_key and new.shape == (len(lp[0]), 7)
    with pytest.raises(
        ValueError, match=rf"^\[prune\] rows must be in \[0, {len(lp[0])}\), got values from -1 to 3"
    ):
        T.prune(x, [3, -1])
    with pytest.raises(ValueError, match=r"^\[prune\] duplicate active coordinates"):
        T.prune(x, [1, 1])
    with pytest.raises(ValueError, match=r"^\[prune\] rows must be a 1-D integer array"):
        T.prune(x, [0.5])
    with pytest.raises(ValueError, match=rf"^\[prune_mask\] mask must be bool of shape \({len(lp[0])},\)"):
        T.prune_mask(x, mask[:-1])
    # A mask over the whole buffer: rows past active_rows must stay False.
    pad = st((np.concatenate([lp[0], lp[0][:2]]), np.concatenate([lp[1], lp[1][:2]])), active_rows=len(lp[0]))
    full = np.concatenate([mask, [False, False]])
    check(T.prune_mask(pad, full), _rows(lp[0][mask]), lp[1][mask])
    assert T.prune_mask(pad, np.zeros(len(full), bool)).shape == (0, 3)
    with pytest.raises(
        ValueError, match=rf"^\[prune_mask\] mask selects inactive rows \(rows {len(lp[0])} and"
    ):
        T.prune_mask(pad, np.concatenate([mask, [False, True]]))
    with pytest.raises(
        ValueError,
        match=r"^\[crop\] min_coord must be <= max_coord on every axis, got \(0, 0, 0\) and \(1, -1, 1\)",
    ):
        T.crop(x, min_coord=0, max_coord=(1, -1, 1))
    with pytest.raises(
        ValueError, match=rf"^\[replace_feature\] feats must have shape \({len(lp[0])}, C\), got \(2, 3\)"
    ):
        T.replace_feature(x, mx.zeros((2, 3)))


# ---- collation --------------------------------------------------------------------------------


def test_sparse_collate_with_empty_members():
    rng = np.random.default_rng(16)
    samples = [
        make_cloud("random_sparse")[:50, 1:],
        np.zeros((0, 3), np.int64),
        make_cloud("line")[:, 1:],
        np.zeros((0, 3), np.int32),
    ]
    feats = [rng.normal(size=(len(c), 2)).astype(np.float32) for c in samples]
    out = T.sparse_collate(samples, feats, stride=2)
    keys = [(i, *map(int, r)) for i, c in enumerate(samples) for r in c]
    check(out, keys, np.concatenate(feats))
    assert out.stride == (2, 2, 2) and out.batch_counts == (50, 0, 25, 0)
    with pytest.raises(ValueError, match=r"^\[sparse_collate\] duplicate active coordinates"):
        T.sparse_collate([np.array([[1, 2, 3], [1, 2, 3]])], [np.ones((2, 1))])
    with pytest.raises(
        ValueError,
        match=r"^\[sparse_collate\] coords_list and feats_list must be non-empty and of equal length, got 2 and 1",
    ):
        T.sparse_collate(samples[:2], feats[:1])
    with pytest.raises(
        ValueError, match=r"^\[sparse_collate\] feats_list\[1\] has 3 channels, feats_list\[0\] has 2"
    ):
        T.sparse_collate(samples[:2], [feats[0], np.zeros((0, 3))])
    with pytest.raises(ValueError, match=r"^\[sparse_collate\] coords_list\[0\] must be integer \(n, 3\)"):
        T.sparse_collate([np.ones((2, 3))], [np.ones((2, 1))])
    with pytest.raises(
        ValueError,
        match=r"^\[sparse_collate\] duplicate_reduction must be one of \('none', 'mean'\), got 'sum'",
    ):
        T.sparse_collate(samples, feats, duplicate_reduction="sum")


def test_sparse_collate_mean_averages_duplicates():
    rng = np.random.default_rng(17)
    samples = [
        rng.integers(-3, 3, size=(80, 3)),
        np.zeros((0, 3), np.int64),
        rng.integers(-1000, 1000, size=(5, 3)),
    ]
    feats = [rng.normal(size=(len(c), 4)).astype(np.float32) for c in samples]
    out = T.sparse_collate(samples, feats, duplicate_reduction="mean")
    groups: dict[tuple, list] = {}
    for i, (c, f) in enumerate(zip(samples, feats, strict=True)):
        for r, v in zip(c.tolist(), f, strict=True):
            groups.setdefault((i, *r), []).append(v)
    check(out, list(groups), np.array([np.mean(v, axis=0) for v in groups.values()]), tol=1e-5)
    assert out.batch_counts == tuple(len([k for k in groups if k[0] == b]) for b in range(3))
    half = T.sparse_collate(samples, [f.astype(np.float16) for f in feats], duplicate_reduction="mean")
    assert half.dtype == mx.float16


def test_sparse_from_coordinates():
    coords = make_cloud("batched")
    feats = np.random.default_rng(18).normal(size=(len(coords), 2)).astype(np.float32)
    counts = np.bincount(coords[:, 0]).tolist() + [0]
    out = T.sparse_from_coordinates(coords, feats, batch_counts=counts)
    check(out, _rows(coords), feats)
    assert out.batch_counts == tuple(counts)
    dup = np.concatenate([coords, coords[:3]])
    fd = np.concatenate([feats, feats[:3] + 2])
    mean = T.sparse_from_coordinates(dup, fd, duplicate_reduction="mean")
    ref = feats.copy()
    ref[:3] += 1
    check(mean, _rows(coords), ref, tol=1e-6)
    with pytest.raises(ValueError, match=r"^\[sparse_from_coordinates\] duplicate active coordinates"):
        T.sparse_from_coordinates(dup, fd)
    with pytest.raises(ValueError, match=r"^\[sparse_from_coordinates\] batch_counts \[1, 2\] do not match"):
        T.sparse_from_coordinates(coords, feats, batch_counts=[1, 2])
    with pytest.raises(
        ValueError, match=r"^\[sparse_from_coordinates\] feats must have shape \(\d+, C\), got \(3, 2\)"
    ):
        T.sparse_from_coordinates(coords, feats[:3])
    with pytest.raises(
        ValueError, match=r"^\[sparse_from_coordinates\] batch indices must be non-negative, got -1"
    ):
        T.sparse_from_coordinates([[-1, 0, 0, 0]], [[1.0]], duplicate_reduction="mean")


# ---- gradients ----------------------------------------------------------------------------------


def _directional_check(loss, f0: mx.array, seed: int, h: float = 1e-2):
    """mx.grad against a central finite difference along a random direction."""
    g = mx.grad(loss)(f0)
    v = mx.array(np.random.default_rng(seed).normal(size=f0.shape).astype(np.float32))
    fd = (loss(f0 + h * v) - loss(f0 - h * v)).item() / (2 * h)
    assert abs(mx.sum(g * v).item() - fd) <= 1e-2 * max(1.0, abs(fd))
    return np.asarray(g)


def test_gradients_through_algebra():
    lp, rp = overlapping(seed=19)
    lhs, rhs = st(lp), st(rp)
    keys = ref_join([lp, rp], "outer")
    w = mx.array(np.random.default_rng(20).normal(size=(len(keys), 3)).astype(np.float32))

    def add_loss(f):
        return mx.sum(A.sparse_add(lhs.replace(feats=f), rhs).feats * w)

    g = _directional_check(add_loss, lhs.feats, 1)
    np.testing.assert_allclose(g, np.asarray(w)[: len(lp[0])], rtol=1e-6)  # lhs rows come first

    def mul_loss(f):
        out = A.sparse_mul(lhs.replace(feats=f), rhs)
        return mx.sum(out.feats * out.feats)

    g = _directional_check(mul_loss, lhs.feats, 2)
    inner = set(ref_join([lp, rp], "inner"))
    rhs_at = ref_gather(*rp, _rows(lp[0]), 0.0)
    ref = np.where([[k in inner] for k in _rows(lp[0])], 2 * lp[1] * rhs_at**2, 0.0)
    np.testing.assert_allclose(g, ref, rtol=1e-4, atol=1e-5)

    def cat_loss(f):
        out = A.cat([rhs, lhs.replace(feats=f)], join="outer")
        return mx.sum(mx.sin(out.feats))

    _directional_check(cat_loss, lhs.feats, 3)

    def reindex_loss(f):
        return mx.sum(A.reindex_sparse(lhs.replace(feats=f), rhs, fill=1.0).feats ** 2)

    g = _directional_check(reindex_loss, lhs.feats, 4)
    present = np.isin(
        np.arange(len(lp[0])), [i for i, k in enumerate(_rows(lp[0])) if k in set(_rows(rp[0]))]
    )
    np.testing.assert_allclose(g, np.where(present[:, None], 2 * lp[1], 0.0), rtol=1e-5, atol=1e-6)

    dup = np.concatenate([lp[0][:, 1:], lp[0][:4, 1:]])

    def collate_loss(f):
        return mx.sum(T.sparse_collate([dup], [f], duplicate_reduction="mean").feats ** 2)

    _directional_check(collate_loss, mx.array(np.concatenate([lp[1], lp[1][:4]])), 5)
    _directional_check(lambda f: mx.sum(T.prune(lhs.replace(feats=f), [3, 1]).feats ** 3), lhs.feats, 6)


def test_empty_inputs_across_ops():
    empty = SparseTensor(np.zeros((0, 4), np.int32), np.zeros((0, 2), np.float32))
    x = SparseTensor([[0, 1, 2, 3], [1, 0, 0, 0]], np.ones((2, 2), np.float32))
    assert A.sparse_mul(empty, x).shape == (0, 2)
    assert A.cat([empty, x]).shape == (0, 4)
    check(A.cat([empty, x], join="outer"), _rows(x.coords), [[0, 0, 1, 1], [0, 0, 1, 1]])
    a, b = A.align_sparse(empty, x, fill=-1.0)
    check(a, _rows(x.coords), -np.ones((2, 2)))
    assert b.coord_key == a.coord_key
    assert A.reindex_sparse(x, empty).shape == (0, 2)
    assert T.crop(empty, min_coord=0, max_coord=1).shape == (0, 2)
    collated = T.sparse_collate(
        [np.zeros((0, 3), int)] * 2, [np.zeros((0, 2))] * 2, duplicate_reduction="mean"
    )
    assert collated.shape == (0, 2) and collated.batch_counts == (0, 0)


@pytest.mark.parametrize("offset,span", [(2**24, 3), (0, 2**25)])
def test_mean_dedup_is_exact_at_large_coordinates(offset, span):
    # Native quantisation computes in float32: far from 0 (shifted path) and over a wide span
    # (sorting path) neighbouring integers must stay distinct.
    c = np.array([[0, offset, 0, 0], [0, offset + 1, 0, 0], [0, offset + 1, 0, 0], [1, offset + span, -7, 0]])
    out = T.sparse_from_coordinates(c, np.array([[1.0], [2.0], [4.0], [8.0]]), duplicate_reduction="mean")
    check(out, [tuple(r) for r in c[[0, 1, 3]].tolist()], [[1.0], [3.0], [8.0]])
