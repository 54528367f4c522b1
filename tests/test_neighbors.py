"""knn_relation and radius_relation against brute force."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import make_cloud
from reference import coords as rc

from lattice import ops
from lattice.core import NeighborRelation, SparseTensor


def _check(rel: NeighborRelation, ref) -> None:
    """CSR layout, rows (nearest first, ties by row) and distances equal to the reference."""
    assert isinstance(rel, NeighborRelation)
    off = np.asarray(rel.offsets).astype(np.int64)
    rows = np.asarray(rel.source_rows)
    dist = np.asarray(rel.distances)
    assert off.shape == (len(ref) + 1,)
    assert off[0] == 0 and np.all(np.diff(off) >= 0)
    assert rel.edge_count == off[-1] == rows.shape[0] == dist.shape[0]
    np.testing.assert_array_equal(np.asarray(rel.counts), [len(h) for h in ref])
    np.testing.assert_array_equal(
        np.asarray(rel.query_rows), np.repeat(np.arange(len(ref)), [len(h) for h in ref])
    )
    for q, hits in enumerate(ref):
        got = rows[off[q] : off[q + 1]].tolist()
        assert got == [h[0] for h in hits], f"query {q}: rows {got} != {[h[0] for h in hits]}"
        np.testing.assert_allclose(dist[off[q] : off[q + 1]], [h[1] for h in hits], rtol=1e-6, atol=1e-6)


def _cloud(kind: str, n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Float points and batch ids (members 0 and 2; member 1 empty)."""
    rng = np.random.default_rng(seed)
    if kind == "uniform":
        p = rng.uniform(-5, 5, size=(n, 3))
    elif kind == "clustered":  # a few tight clusters far apart
        centres = rng.uniform(-100, 100, size=(5, 3))
        p = centres[rng.integers(0, 5, n)] + rng.normal(scale=0.3, size=(n, 3))
    elif kind == "line":
        t = rng.uniform(-20, 20, n)
        p = np.stack([t, 2 * t, np.full(n, 0.5)], axis=1)
    elif kind == "plane":
        u, v = rng.uniform(-10, 10, size=(2, n))
        p = np.stack([u, v, np.zeros(n)], axis=1)
    elif kind == "huge_span":
        p = rng.uniform(-1e6, 1e6, size=(n, 3))
    else:
        raise KeyError(kind)
    b = np.where(rng.random(n) < 0.5, 0, 2).astype(np.int32)
    return p.astype(np.float32), b


KINDS = ["uniform", "clustered", "line", "plane", "huge_span"]


@pytest.mark.parametrize("k", [1, 4, 16])
@pytest.mark.parametrize("kind", KINDS)
def test_knn_self_matches_brute_force(kind, k):
    p, b = _cloud(kind)
    rel = ops.knn_relation(p, k=k, source_batch=b)
    ref = rc.knn(p, b, p, b, k)
    _check(rel, ref)
    # each point is its own nearest neighbour
    assert np.all(np.asarray(rel.source_rows)[np.asarray(rel.offsets)[:-1]] == np.arange(len(p)))


@pytest.mark.parametrize("kind", KINDS)
def test_knn_separate_queries(kind):
    p, b = _cloud(kind, 300, seed=1)
    q, qb = _cloud(kind, 120, seed=2)
    qb[::7] = 1  # batch member 1 has no source points: those queries get no neighbours
    rel = ops.knn_relation(p, q, k=5, source_batch=b, query_batch=qb)
    ref = rc.knn(p, b, q, qb, 5)
    _check(rel, ref)
    assert all(len(ref[i]) == 0 for i in range(0, len(q), 7))


def test_knn_k_larger_than_a_batch():
    p, b = _cloud("uniform", 30)
    rel = ops.knn_relation(p, k=100, source_batch=b)
    _check(rel, rc.knn(p, b, p, b, 100))
    counts = np.asarray(rel.counts)
    np.testing.assert_array_equal(counts, np.where(b == 0, (b == 0).sum(), (b == 2).sum()))


def test_knn_on_lattice_ties_break_by_row():
    """Integer lattice points: many equal distances; ties must go to the lower source row."""
    c = make_cloud("dense_block")
    x = SparseTensor(c, mx.zeros((len(c), 1)))
    rel = ops.knn_relation(x, k=7)
    ref = rc.knn(c[:, 1:], c[:, 0], c[:, 1:], c[:, 0], 7)
    _check(rel, ref)
    rel2 = ops.knn_relation(x, k=27)
    _check(rel2, rc.knn(c[:, 1:], c[:, 0], c[:, 1:], c[:, 0], 27))


def test_knn_on_batched_tensor_stays_in_batch():
    c = make_cloud("batched")
    x = SparseTensor(c, mx.zeros((len(c), 1)))
    rel = ops.knn_relation(x, k=9)
    _check(rel, rc.knn(c[:, 1:], c[:, 0], c[:, 1:], c[:, 0], 9))
    src_b = c[np.asarray(rel.source_rows), 0]
    qry_b = c[np.asarray(rel.query_rows), 0]
    np.testing.assert_array_equal(src_b, qry_b)


def test_knn_empty_inputs():
    p, b = _cloud("uniform", 50)
    empty = np.zeros((0, 3), np.float32)
    rel = ops.knn_relation(p, empty, k=3, source_batch=b, query_batch=np.zeros(0, np.int32))
    _check(rel, [])
    rel = ops.knn_relation(empty, p, k=3, source_batch=np.zeros(0, np.int32), query_batch=b)
    _check(rel, [[] for _ in range(len(p))])
    one = np.array([[1.0, 2.0, 3.0]], np.float32)
    _check(ops.knn_relation(one, k=4), [[(0, 0.0)]])


@pytest.mark.parametrize("radius,max_neighbors", [(0.5, None), (1.0, None), (1.0, 3), (2.5, 8)])
@pytest.mark.parametrize("kind", KINDS[:4])
def test_radius_matches_brute_force(kind, radius, max_neighbors):
    p, b = _cloud(kind, 400, seed=3)
    q, qb = _cloud(kind, 150, seed=4)
    qb[::5] = 1
    rel = ops.radius_relation(
        p, q, radius=radius, max_neighbors=max_neighbors, source_batch=b, query_batch=qb
    )
    _check(rel, rc.radius(p, b, q, qb, radius, max_neighbors))
    self_rel = ops.radius_relation(p, radius=radius, max_neighbors=max_neighbors, source_batch=b)
    _check(self_rel, rc.radius(p, b, p, b, radius, max_neighbors))


@pytest.mark.parametrize("radius", [1.0, 1.5, 2.0])
def test_radius_on_lattice(radius):
    c = make_cloud("batched")
    x = SparseTensor(c, mx.zeros((len(c), 1)))
    rel = ops.radius_relation(x, radius=radius)
    _check(rel, rc.radius(c[:, 1:], c[:, 0], c[:, 1:], c[:, 0], radius))


def test_radius_on_huge_span():
    p, b = _cloud("huge_span", 500)
    near = p[:100] + np.float32(20.0)  # queries 20 units away from a hundred of the points
    rel = ops.radius_relation(p, near, radius=50.0, source_batch=b, query_batch=b[:100])
    ref = rc.radius(p, b, near, b[:100], 50.0)
    _check(rel, ref)
    assert all(i in [h[0] for h in ref[i]] for i in range(100))


# ---- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize("k", [0, -1, True, 1.5, None])
def test_knn_rejects_bad_k(k):
    with pytest.raises(ValueError, match=r"\[knn_relation\] k must be a positive int, got"):
        ops.knn_relation(np.zeros((3, 3), np.float32), k=k)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"radius": 0.0}, r"\[radius_relation\] radius must be positive"),
        ({"radius": float("nan")}, r"\[radius_relation\] radius must be finite"),
        (
            {"radius": 1.0, "max_neighbors": 0},
            r"\[radius_relation\] max_neighbors must be a positive int or None, got 0",
        ),
        (
            {"radius": 1.0, "max_neighbors": True},
            r"\[radius_relation\] max_neighbors must be a positive int or None, got True",
        ),
        (
            {"radius": (1.0, 2.0, 3.0)},
            r"\[radius_relation\] radius must be a single number, got \(1.0, 2.0, 3.0\)",
        ),
    ],
)
def test_radius_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ops.radius_relation(np.zeros((3, 3), np.float32), **kwargs)


def test_neighbors_reject_bad_points():
    with pytest.raises(
        ValueError, match=r"\[knn_relation\] source must be a SparseTensor or \(N, 3\) points, got \(3, 2\)"
    ):
        ops.knn_relation(np.zeros((3, 2), np.float32), k=1)
    with pytest.raises(
        ValueError, match=r"\[radius_relation\] query must be a SparseTensor or \(N, 3\) points"
    ):
        ops.radius_relation(np.zeros((3, 3), np.float32), np.zeros((2, 4), np.float32), radius=1.0)
    with pytest.raises(ValueError, match=r"\[knn_relation\] source_batch must have shape \(3,\), got \(2,\)"):
        ops.knn_relation(np.zeros((3, 3), np.float32), k=1, source_batch=[0, 0])
    bad = np.zeros((3, 3), np.float32)
    bad[1, 2] = np.inf
    with pytest.raises(ValueError, match=r"\[knn_relation\] source holds a non-finite value at row 1"):
        ops.knn_relation(bad, k=1)
    with pytest.raises(ValueError, match=r"\[radius_relation\] query holds a non-finite value at row 1"):
        ops.radius_relation(np.zeros((3, 3), np.float32), bad, radius=1.0)


# ---- regressions: wide spans and degenerate extents (cell sizes must keep cell keys packable) ----


def test_radius_small_radius_over_wide_span():
    p, b = _cloud("huge_span", 100)
    rel = ops.radius_relation(p, radius=0.5, source_batch=b)
    _check(rel, rc.radius(p, b, p, b, 0.5))


def test_knn_nearly_degenerate_extent():
    rng = np.random.default_rng(0)
    p = np.zeros((1000, 3), np.float32)
    p[:, 0] = rng.uniform(-1e3, 1e3, 1000)
    p[0, 1] = 1e-30
    b = np.zeros(1000, np.int32)
    rel = ops.knn_relation(p, k=2)
    _check(rel, rc.knn(p, b, p, b, 2))
