"""Neighbour relations over raw coordinate buffers, their documented members, and
gathering features along them — against brute-force oracles (``reference.views``).

``build_knn_relation`` / ``build_radius_relation`` over the distributions of
``conftest.SMALL_CLOUDS`` (queries: the sources themselves, and a shifted set with rows in
a batch the sources lack), buffers with rows past ``active_rows``; the ``mlx_lattice``
adapters over them; the implicit-GEMM builders of ``mlx_lattice.core.coords.builders``.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import SMALL_CLOUDS, make_cloud
from reference import views as rv

import lattice
from lattice import ops
from lattice.core import NeighborEdges, NeighborRelation
from lattice.ops.coord_relations import radius_capacity


def _queries(coords: np.ndarray) -> np.ndarray:
    """Every other row shifted by one, plus rows of batch 7 (no source there)."""
    q = coords[::2].copy()
    q[:, 1] += 1
    extra = np.array([[7, 0, 0, 0], [7, 1, 2, 3]], np.int32)
    return np.concatenate([q, extra]).astype(np.int32)


def check_neighbors(rel: NeighborRelation, want, n_query: int, n_source: int, cap) -> None:
    """``rel`` holds, per live query, exactly the oracle's (source row, squared distance)."""
    assert isinstance(rel, NeighborRelation)
    offsets = np.asarray(rel.row_offsets)
    assert rel.row_offsets is rel.offsets and offsets.shape == (n_query + 1,)
    assert rel.n_query_capacity == n_query and rel.n_source_capacity == n_source
    assert rel.max_neighbors == cap
    assert rel.query_count.dtype == mx.int32 and rel.query_count.tolist() == [len(want)]
    rows, dist = np.asarray(rel.source_rows), np.asarray(rel.distances)
    assert rel.distances.dtype == mx.float32
    e = rel.edges
    assert isinstance(e, NeighborEdges) and e is rel.edges
    assert e.capacity == rel.edge_capacity == rel.edge_count == len(rows)
    qrows, ranks = np.asarray(e.query_rows), np.asarray(e.neighbor_ids)
    np.testing.assert_array_equal(np.asarray(e.source_rows), rows)
    for qi in range(n_query):
        got = slice(offsets[qi], offsets[qi + 1])
        hits = want[qi] if qi < len(want) else []  # queries past the live ones: no neighbours
        assert list(zip(rows[got].tolist(), dist[got].tolist(), strict=True)) == hits, f"query {qi}"
        assert qrows[got].tolist() == [qi] * len(hits) and ranks[got].tolist() == list(range(len(hits)))
    assert offsets[-1] == len(rows)


@pytest.mark.parametrize("k", [1, 4, 40])
@pytest.mark.parametrize("name", SMALL_CLOUDS)
def test_knn_builder_matches_oracle(name, k):
    coords = make_cloud(name)
    rel = ops.build_knn_relation(coords, k=k)
    check_neighbors(rel, rv.neighbors(coords, coords, k=k), len(coords), len(coords), k)
    q = _queries(coords)
    rel = ops.build_knn_relation(mx.array(coords), mx.array(q), k=k)
    check_neighbors(rel, rv.neighbors(coords, q, k=k), len(q), len(coords), k)


@pytest.mark.parametrize("radius,cap", [(0, None), (1, None), (1.5, None), (2.9, None), (1.5, 3), (4, 5)])
@pytest.mark.parametrize("name", SMALL_CLOUDS)
def test_radius_builder_matches_oracle(name, radius, cap):
    coords = make_cloud(name)
    q = _queries(coords)
    rel = ops.build_radius_relation(coords, q, radius=radius, max_neighbors=cap)
    want = rv.neighbors(coords, q, radius=radius, max_neighbors=cap)
    check_neighbors(rel, want, len(q), len(coords), rv.radius_capacity(radius) if cap is None else cap)


@pytest.mark.parametrize("name", ["empty", "single", "batched"])
def test_rows_past_active_rows_have_no_neighbors(name):
    coords = make_cloud(name)
    junk = np.zeros((4, 4), np.int32)  # repeats of (0, 0, 0, 0): not looked at
    buf = np.concatenate([coords, junk])
    live = mx.array([len(coords)], dtype=mx.int32)
    rel = ops.build_knn_relation(buf, k=3, source_active_rows=live)
    check_neighbors(rel, rv.neighbors(coords, coords, k=3), len(buf), len(buf), 3)
    q = _queries(coords)
    qbuf = np.concatenate([q, junk])
    rel = ops.build_radius_relation(
        buf, qbuf, source_active_rows=len(coords), query_active_rows=len(q), radius=2
    )
    check_neighbors(rel, rv.neighbors(coords, q, radius=2), len(qbuf), len(buf), rv.radius_capacity(2))
    # the same buffer as queries shares the sources' live rows
    same = mx.array(buf)
    rel = ops.build_knn_relation(same, same, k=2, source_active_rows=live)
    assert rel.query_count.tolist() == [len(coords)]


def test_radius_capacity_counts_integer_offsets():
    for r in (0, 0.4, 1, 1.5, np.sqrt(2), 2, 2.5, 3.7, 6):
        assert radius_capacity(float(r)) == rv.radius_capacity(float(r)), r
    assert radius_capacity(1) == 7 and radius_capacity(0) == 1


def test_neighbor_builders_check_their_arguments():
    c = make_cloud("line")
    for bad in (0, -1, True, 2.0):
        with pytest.raises(ValueError, match="k must be a positive int"):
            ops.build_knn_relation(c, k=bad)
    with pytest.raises(ValueError, match="non-negative"):
        ops.build_radius_relation(c, radius=-1)
    with pytest.raises(ValueError, match="max_neighbors"):
        ops.build_radius_relation(c, radius=1, max_neighbors=0)
    with pytest.raises(ValueError, match="query_active_rows"):
        ops.build_knn_relation(c, c[:3], query_active_rows=4, k=1)


def test_lattice_neighbor_relations_carry_the_documented_members():
    pts = mx.array(np.random.default_rng(0).normal(size=(50, 3)).astype(np.float32))
    rel = ops.knn_relation(pts, pts[:20], k=5)
    assert (rel.n_source_capacity, rel.max_neighbors, rel.n_query_capacity) == (50, 5, 20)
    assert rel.query_count.tolist() == [20] and rel.edge_capacity == 100
    assert rel.edges.neighbor_ids.tolist() == list(range(5)) * 20
    rel = ops.radius_relation(pts, radius=0.5)
    assert rel.max_neighbors is None and rel.n_source_capacity == 50


# ---- gathering features along a relation -----------------------------------------------------


@pytest.mark.parametrize("name", ["empty", "single", "random_sparse", "batched"])
def test_gather_neighbor_features_matches_oracle(name):
    coords = make_cloud(name)
    feats = np.random.default_rng(1).normal(size=(len(coords), 3)).astype(np.float32)
    x = lattice.SparseTensor(coords, feats)
    rel = ops.build_knn_relation(coords, _queries(coords), k=4)
    got = ops.gather_neighbor_features(x, rel)
    want = np.array([feats[s] for s in np.asarray(rel.source_rows).tolist()], np.float32).reshape(-1, 3)
    assert got.shape == (rel.edge_capacity, 3) and got.dtype == mx.float32
    np.testing.assert_array_equal(np.asarray(got), want)
    np.testing.assert_array_equal(np.asarray(ops.gather_neighbor_features(mx.array(feats), rel)), want)
    # differentiable in the features: each source row's gradient counts its edges
    grad = mx.grad(lambda f: ops.gather_neighbor_features(f, rel).sum())(mx.array(feats))
    uses = np.bincount(np.asarray(rel.source_rows), minlength=len(coords)).astype(np.float32)
    np.testing.assert_array_equal(np.asarray(grad), np.repeat(uses[:, None], 3, axis=1))


def test_gather_neighbor_features_checks_its_arguments():
    coords = make_cloud("line")
    x = lattice.SparseTensor(coords, np.ones((len(coords), 2), np.float32))
    with pytest.raises(TypeError, match="NeighborRelation"):
        ops.gather_neighbor_features(x, ops.build_kernel_relation(coords))
    with pytest.raises(ValueError, match="source rows"):
        ops.gather_neighbor_features(mx.ones((3, 2)), ops.build_knn_relation(coords, k=2))
    with pytest.raises(TypeError, match="source"):
        ops.gather_neighbor_features(np.ones((3, 2)), ops.build_knn_relation(coords, k=2))


# ---- the mlx_lattice adapters -------------------------------------------------------------------


def test_mlx_lattice_knn_and_radius_relations_report_squared_distances():
    from mlx_lattice.ops import gather_neighbor_features, knn_relation, radius_relation

    coords = make_cloud("batched")
    x = lattice.SparseTensor(coords, np.arange(len(coords) * 2, dtype=np.float32).reshape(-1, 2))
    rel = knn_relation(x, k=3)
    check_neighbors(rel, rv.neighbors(coords, coords, k=3), len(coords), len(coords), 3)
    rel = radius_relation(x, radius=1.5, max_neighbors=4)
    check_neighbors(
        rel, rv.neighbors(coords, coords, radius=1.5, max_neighbors=4), len(coords), len(coords), 4
    )
    assert gather_neighbor_features(x, rel).shape == (rel.edge_capacity, 2)
    coarse = lattice.SparseTensor(coords, np.ones((len(coords), 1), np.float32), stride=2)
    with pytest.raises(ValueError, match="same coordinate stride"):
        knn_relation(x, coarse, k=1)


def test_mlx_lattice_implicit_gemm_builders():
    from mlx_lattice.core.coords import builders as b

    coords = make_cloud("random_sparse")
    sub = b.build_submanifold_kernel_relation(coords)
    assert b.build_relation_implicit_gemm_view(sub) is sub.require_implicit_gemm()
    up = b.build_transposed_kernel_relation(coords)
    with pytest.raises(ValueError, match="forward, target and submanifold"):
        b.build_relation_implicit_gemm_view(up)
    view = b.build_relation_implicit_gemm_view_from_edges(up)
    assert view.out_in_map.shape == (up.out_count, 8)
    with pytest.raises(TypeError, match="KernelRelation"):
        b.build_relation_implicit_gemm_view(object())


@pytest.mark.parametrize("geom", [(2, 2, 0, 1), (3, 2, 1, 1), (3, 2, 0, 2)])
def test_target_transposed_implicit_gemm_view_matches_oracle(geom):
    from mlx_lattice.core.coords.builders import build_target_transposed_implicit_gemm_view

    size, stride, padding, dilation = geom
    source = make_cloud("batched")
    rng = np.random.default_rng(2)
    target = np.unique(
        np.concatenate([source[:, :1], rng.integers(-16, 17, size=(len(source), 3))], axis=1), axis=0
    ).astype(np.int32)
    buf = np.concatenate([target, np.zeros((3, 4), np.int32)])  # rows past the live ones
    view = build_target_transposed_implicit_gemm_view(
        source,
        buf,
        source_active_rows=mx.array([len(source)], dtype=mx.int32),
        target_active_rows=mx.array([len(target)], dtype=mx.int32),
        kernel_size=size,
        stride=stride,
        padding=padding,
        dilation=dilation,
    )
    from reference.relations import kernel_offsets

    rows = {tuple(c): i for i, c in enumerate(source.tolist())}
    offs = kernel_offsets(size, dilation)
    want = np.full((len(buf), len(offs)), -1)
    for t, (tb, *tc) in enumerate(target.tolist()):
        for k, off in enumerate(offs):
            s = [tc[a] + padding - off[a] for a in range(3)]
            if all(v % stride == 0 for v in s):
                want[t, k] = rows.get((tb, *(v // stride for v in s)), -1)
    np.testing.assert_array_equal(np.asarray(view.out_in_map), want)
    np.testing.assert_array_equal(np.asarray(view.row_masks), rv.row_masks(want))
