"""mlx_lattice's relations in the documented forms (``lattice.core.relation_documented``).

The documented constructors (edge arrays and views in, the same out; their validation),
the documented counts and edge order of the relations mlx_lattice hands out against a
brute-force NumPy oracle (several distributions, an empty input, a batch with an empty
member), and the routes of lattice's ops run on a documented relation exactly as on
lattice's own.
"""

from __future__ import annotations

import itertools

import mlx.core as mx
import numpy as np
import pytest
from conftest import SMALL_CLOUDS, make_cloud

import lattice
from lattice.backends.cpu import conv as cpu_conv
from lattice.backends.cpu import pool as cpu_pool
from lattice.backends.gpu import conv as gpu_conv
from lattice.core import KernelRelation as LatticeKernelRelation
from lattice.core import NeighborRelation as LatticeNeighborRelation
from lattice.core.relation_documented import documented
from mlx_lattice.core import CoordinateManager, KernelRelation, NeighborRelation
from mlx_lattice.core.coords import builders
from mlx_lattice.core.relations import NeighborEdges, RelationEdges, SparseRelationContract
from mlx_lattice.ops import relations as ops_relations


def _i32(a) -> mx.array:
    return mx.array(np.asarray(a, dtype=np.int32))


def _cloud(name: str) -> np.ndarray:
    """A named distribution, or ``gap``: batches 0 and 2 with nothing in batch 1."""
    if name == "gap":
        rng = np.random.default_rng(5)
        rows = {tuple(r) for r in rng.integers(-3, 4, size=(30, 3)).tolist()}
        cells = np.array(sorted(rows), np.int32)
        half = len(cells) // 2
        batch = np.array([0] * half + [2] * (len(cells) - half), np.int32)[:, None]
        return np.concatenate([batch, cells], axis=1)
    return make_cloud(name)


CLOUDS = (*SMALL_CLOUDS, "gap")


# ---- the oracle -----------------------------------------------------------------------------


def _offsets(size: int) -> list[tuple[int, int, int]]:
    """lattice's kernel offsets: odd sizes centred, even from 0, z fastest."""
    axis = list(range(-(size // 2), size // 2 + 1)) if size % 2 else list(range(size))
    return list(itertools.product(axis, axis, axis))


def _forward_oracle(coords: np.ndarray, out_coords: np.ndarray, size: int, stride: int):
    """Every (in row, out row, k) with ``in = out * stride + offset_k`` in the same batch,
    sorted by (out row, k); and the output support ``unique(floor(coords / stride))``."""
    where = {tuple(r): i for i, r in enumerate(coords.tolist())}
    edges = []
    for o, (b, *xyz) in enumerate(out_coords.tolist()):
        for k, off in enumerate(_offsets(size)):
            i = where.get((b, *(c * stride + d for c, d in zip(xyz, off, strict=True))))
            if i is not None:
                edges.append((i, o, k))
    support = {(r[0], *(v // stride for v in r[1:])) for r in coords.tolist()}
    return edges, support


def _knn_oracle(source: np.ndarray, query: np.ndarray, k: int) -> int:
    """The edges of the k-nearest relation: per query, min(k, sources of its batch)."""
    per_batch = {}
    for b in source[:, 0].tolist():
        per_batch[b] = per_batch.get(b, 0) + 1
    return sum(min(k, per_batch.get(b, 0)) for b in query[:, 0].tolist())


def _edges_of(rel) -> list[tuple[int, int, int]]:
    e = rel.edges
    return list(zip(e.in_rows.tolist(), e.out_rows.tolist(), e.kernel_ids.tolist(), strict=True))


# ---- counts and edges against the oracle ----------------------------------------------------


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("name", CLOUDS)
def test_builder_counts_and_edges_match_the_oracle(name, stride):
    coords = _cloud(name)
    rel = builders.build_kernel_relation(mx.array(coords), kernel_size=3, stride=stride)
    assert isinstance(rel, KernelRelation) and isinstance(rel, LatticeKernelRelation)
    out = np.asarray(rel.out_coords)[: int(rel.out_count.item())]
    want, support = _forward_oracle(coords, out, 3, stride)
    assert {tuple(r) for r in out.tolist()} == support and len(out) == len(support)
    for name_, a in (("counts", rel.counts), ("edge_count", rel.edge_count), ("out_count", rel.out_count)):
        assert a.dtype == mx.int32, name_
    assert rel.counts.shape == (2,) and rel.edge_count.shape == (1,) and rel.out_count.shape == (1,)
    assert rel.counts.tolist() == [len(want), len(support)]
    assert rel.edge_count.tolist() == [len(want)] and rel.out_count.tolist() == [len(support)]
    assert _edges_of(rel) == want  # by output row, kernel offset ascending within a row
    assert rel.kernel_offsets == builders.kernel_offsets(3) == tuple(_offsets(3))
    assert all(type(v) is int for t in rel.kernel_offsets for v in t)
    # the CSR views over those edges
    n_out, n_in = rel.n_out_capacity, rel.n_in_capacity
    assert (n_out, n_in, rel.n_kernels) == (len(support), len(coords), 27)
    outs = np.array([e[1] for e in want], np.int64)
    ins = np.array([e[0] for e in want], np.int64)
    ks = np.array([e[2] for e in want], np.int64)
    assert rel.row_offsets.tolist() == [0, *np.cumsum(np.bincount(outs, minlength=n_out)).tolist()]
    assert rel.output_csr.edge_ids is None
    assert rel.in_row_offsets.tolist() == [0, *np.cumsum(np.bincount(ins, minlength=n_in)).tolist()]
    assert rel.in_edge_ids.tolist() == np.argsort(ins, kind="stable").tolist()
    assert rel.kernel_row_offsets.tolist() == [0, *np.cumsum(np.bincount(ks, minlength=27)).tolist()]
    assert rel.kernel_edge_ids.tolist() == np.argsort(ks, kind="stable").tolist()
    assert (
        rel.out_view is rel.output_csr and rel.in_view is rel.input_csr and rel.kernel_view is rel.kernel_csr
    )
    assert rel.edge_capacity == len(want)


@pytest.mark.parametrize("name", CLOUDS)
def test_knn_counts_match_the_oracle(name):
    source = _cloud(name)
    query = source[::2].copy()
    rel = builders.build_knn_relation(mx.array(source), mx.array(query), k=3)
    assert isinstance(rel, NeighborRelation) and isinstance(rel, LatticeNeighborRelation)
    e = _knn_oracle(source, query, 3)
    assert rel.counts.dtype == mx.int32 and rel.counts.tolist() == [e, len(query)]
    assert rel.edge_count.tolist() == [e] and rel.query_count.tolist() == [len(query)]
    assert rel.n_query_capacity == len(query) and rel.edge_capacity == e
    # fewer live queries: the live count, the capacity unchanged
    live = builders.build_knn_relation(
        mx.array(source), mx.array(query), query_active_rows=len(query) // 2, k=3
    )
    assert live.counts.tolist() == [_knn_oracle(source, query[: len(query) // 2], 3), len(query) // 2]
    assert live.n_query_capacity == len(query)


def test_tensor_and_manager_relations_are_documented_and_cached():
    coords = mx.array(_cloud("gap"))
    x = lattice.SparseTensor(coords, mx.ones((coords.shape[0], 2)))
    rel = ops_relations.kernel_relation(x)
    assert isinstance(rel, KernelRelation) and rel is ops_relations.kernel_relation(x)
    manager, key = x.coord_manager, x.coord_key
    assert manager.kernel_relation(key) is rel
    cached = manager.relation("forward", key, lattice.core.KernelSpec(3))
    assert type(cached) is LatticeKernelRelation and documented(cached) is rel
    assert cached.counts.shape == (27,) and isinstance(cached.edge_count, int)  # lattice's own forms
    sub = ops_relations.submanifold_kernel_relation(x, kernel_size=3)
    assert isinstance(sub, KernelRelation) and sub.out_count.tolist() == [coords.shape[0]]
    nb = ops_relations.knn_relation(x, k=2)
    assert isinstance(nb, NeighborRelation) and documented(nb) is nb
    m = CoordinateManager()
    k2 = m.insert_coords(coords)
    assert m.target_kernel_relation(k2, k2, kernel_size=3) is m.target_kernel_relation(k2, k2, kernel_size=3)


# ---- the documented constructors ------------------------------------------------------------


def _round_trip(rel: KernelRelation) -> KernelRelation:
    c = rel.contract
    return KernelRelation(
        rel.edges.in_rows,
        rel.edges.out_rows,
        rel.edges.kernel_ids,
        row_offsets=rel.row_offsets,
        counts=rel.counts,
        in_row_offsets=rel.in_row_offsets,
        in_edge_ids=rel.in_edge_ids,
        kernel_row_offsets=rel.kernel_row_offsets,
        kernel_edge_ids=rel.kernel_edge_ids,
        kernel_offsets=rel.kernel_offsets,
        out_coords=rel.out_coords,
        n_in_capacity=rel.n_in_capacity,
        n_out_capacity=rel.n_out_capacity,
        n_kernels=rel.n_kernels,
        source_coords=c.source_coords,
        source_active_rows=c.source_active_rows,
        target_coords=c.target_coords,
        target_active_rows=c.target_active_rows,
        stride=c.stride,
        padding=c.padding,
        kind=c.kind,
    )


@pytest.mark.parametrize("name", CLOUDS)
def test_kernel_relation_round_trips_through_its_constructor(name):
    coords = mx.array(_cloud(name))
    rel = builders.build_kernel_relation(coords, kernel_size=3, stride=2)
    back = _round_trip(rel)
    assert _edges_of(back) == _edges_of(rel)
    for member in ("counts", "edge_count", "out_count", "row_offsets", "in_row_offsets", "in_edge_ids"):
        assert getattr(back, member).tolist() == getattr(rel, member).tolist(), member
    assert back.kernel_row_offsets.tolist() == rel.kernel_row_offsets.tolist()
    assert back.kernel_offsets == rel.kernel_offsets and back.n_kernels == rel.n_kernels
    assert (back.n_in_capacity, back.n_out_capacity) == (rel.n_in_capacity, rel.n_out_capacity)
    assert back.contract.stride == (2, 2, 2) and back.contract.kind == "forward"
    # lattice's form of it: the same map as the builder's relation
    assert back.neighbor_map.tolist() == rel.neighbor_map.tolist()
    assert back.require_implicit_gemm().out_in_map.tolist() == rel.require_implicit_gemm().out_in_map.tolist()


def test_kernel_relation_constructor_keeps_what_it_is_given():
    rows = _i32([0, 1, 0])
    out_coords = _i32([[0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 0, 0]])  # a buffer: row 2 padding
    counts = _i32([2, 2])  # edge 2 is padding
    rel = KernelRelation(
        rows,
        rows,
        _i32([1, 0, 0]),
        counts=counts,
        kernel_offsets=((0, 0, 0), (1, 0, 0)),
        out_coords=out_coords,
    )
    assert rel.counts is counts and rel.edge_count.tolist() == [2] and rel.out_count.tolist() == [2]
    assert rel.edge_capacity == 3 and rel.n_out_capacity == 3 and rel.n_kernels == 2
    assert rel.out_coords is out_coords
    assert isinstance(rel.edges, RelationEdges) and isinstance(rel.contract, SparseRelationContract)
    assert rel.row_offsets.tolist() == [0, 0, 0, 0]  # not given: zero-filled, as documented
    assert rel.in_edge_ids.tolist() == [0, 0, 0] and rel.kernel_row_offsets.tolist() == [0, 0, 0]
    assert rel.implicit_gemm is None
    # lattice's form holds the live edges only; the implicit-GEMM view spans the buffer
    assert rel.neighbor_map.tolist() == [[-1, 0], [1, -1]]
    assert rel.require_implicit_gemm().out_in_map.tolist() == [[-1, 0], [1, -1], [-1, -1]]
    defaults = KernelRelation(rows, rows, rows)
    assert defaults.counts.tolist() == [3, 0] and defaults.n_kernels is None and defaults.kernel_offsets == ()
    assert defaults.out_coords is None and defaults.row_offsets.tolist() == [0]


def test_kernel_relation_constructor_validates_as_documented():
    rows, short = _i32([0, 1]), _i32([0])
    with pytest.raises(ValueError, match="same row count"):
        KernelRelation(rows, short, rows)
    with pytest.raises(ValueError, match="n_kernels"):
        KernelRelation(rows, rows, rows, kernel_offsets=((0, 0, 0),), n_kernels=2)
    with pytest.raises(ValueError, match="counts"):
        KernelRelation(rows, rows, rows, counts=_i32([2, 1, 0]))
    with pytest.raises(ValueError, match="counts"):
        KernelRelation(rows, rows, rows, counts=mx.array([2, 1], dtype=mx.int64))
    with pytest.raises(ValueError, match="n_out_capacity"):
        KernelRelation(rows, rows, rows, out_coords=_i32([[0, 0, 0, 0]] * 2), n_out_capacity=3)
    with pytest.raises(ValueError, match="row_offsets must have length n_out_capacity"):
        KernelRelation(rows, rows, rows, n_out_capacity=2, row_offsets=_i32([0, 1]))
    with pytest.raises(ValueError, match="row_offsets"):
        KernelRelation(rows, rows, rows, row_offsets=mx.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="kind"):
        KernelRelation(rows, rows, rows, kind="sideways")
    with pytest.raises(ValueError, match="in_rows"):
        KernelRelation(mx.array([0.0, 1.0]), rows, rows)
    with pytest.raises(ValueError, match="n_in_capacity"):
        KernelRelation(rows, rows, rows, n_in_capacity=-1)
    with pytest.raises(ValueError, match="out_coords"):
        KernelRelation(rows, rows, rows, out_coords=_i32([[0, 0, 0]]))
    with pytest.raises(ValueError, match="non-negative"):
        KernelRelation(_i32([0, -1]), rows, rows)


def test_neighbor_relation_constructor_round_trips_and_validates():
    source = mx.array(_cloud("gap"))
    rel = builders.build_knn_relation(source, k=3)
    back = NeighborRelation(
        rel.edges.query_rows,
        rel.edges.source_rows,
        rel.edges.neighbor_ids,
        rel.distances,
        row_offsets=rel.row_offsets,
        counts=rel.counts,
        n_query_capacity=rel.n_query_capacity,
        n_source_capacity=rel.n_source_capacity,
        max_neighbors=rel.max_neighbors,
    )
    assert back.row_offsets is rel.row_offsets and back.counts is rel.counts
    for member in ("query_rows", "source_rows", "neighbor_ids"):
        assert getattr(back.edges, member).tolist() == getattr(rel.edges, member).tolist()
    assert (back.n_query_capacity, back.n_source_capacity, back.max_neighbors) == (
        rel.n_query_capacity,
        rel.n_source_capacity,
        rel.max_neighbors,
    )
    feats = mx.array(np.random.default_rng(0).normal(size=(source.shape[0], 3)).astype(np.float32))
    want = lattice.ops.gather_neighbor_features(feats, rel)
    assert lattice.ops.gather_neighbor_features(feats, back).tolist() == want.tolist()

    rows, short, d = _i32([0, 1]), _i32([0]), mx.array([1.0, 4.0])
    plain = NeighborRelation(rows, rows, rows, d)
    assert isinstance(plain.edges, NeighborEdges) and plain.edge_capacity == 2
    assert plain.counts.tolist() == [2, 0] and plain.query_count.tolist() == [0]
    assert plain.n_query_capacity is None and plain.row_offsets.tolist() == [0]
    with pytest.raises(ValueError, match="same row count"):
        NeighborRelation(rows, short, rows, d)
    with pytest.raises(ValueError, match="distances"):
        NeighborRelation(rows, rows, rows, rows)
    with pytest.raises(ValueError, match="same row count"):
        NeighborRelation(rows, rows, rows, mx.array([1.0]))
    with pytest.raises(ValueError, match="counts"):
        NeighborRelation(rows, rows, rows, d, counts=_i32([2]))
    with pytest.raises(ValueError, match="n_query_capacity"):
        NeighborRelation(rows, rows, rows, d, row_offsets=_i32([0, 2]), n_query_capacity=2)
    with pytest.raises(ValueError, match="max_neighbors"):
        NeighborRelation(rows, rows, rows, d, max_neighbors=-1)


# ---- lattice's routes on documented relations -----------------------------------------------


@pytest.mark.parametrize("name", ["random_sparse", "batched", "gap", "empty"])
def test_routes_run_on_documented_relations_as_on_lattice_s(name):
    coords = mx.array(_cloud(name))
    n = coords.shape[0]
    rng = np.random.default_rng(1)
    feats = mx.array(rng.normal(size=(n, 3)).astype(np.float32))
    weight = mx.array(rng.normal(size=(27, 3, 2)).astype(np.float32))
    own = lattice.ops.build_kernel_relation(coords, kernel_size=3, stride=2)
    assert type(own) is LatticeKernelRelation
    for rel in (documented(own), _round_trip(documented(own))):
        assert isinstance(rel, KernelRelation)
        np.testing.assert_allclose(
            cpu_conv.gather_gemm_scatter(feats, weight, rel), cpu_conv.gather_gemm_scatter(feats, weight, own)
        )
        np.testing.assert_allclose(
            gpu_conv.gather_matmul_scatter(feats, weight, rel, device=mx.cpu),
            gpu_conv.gather_matmul_scatter(feats, weight, own, device=mx.cpu),
            rtol=1e-5,
            atol=1e-6,
        )
        for mode in ("sum", "max", "avg"):
            got = cpu_pool.segment_reduce(feats, rel, mode, backward="scatter_general")
            want = cpu_pool.segment_reduce(feats, own, mode, backward="scatter_general")
            np.testing.assert_allclose(got, want)
    # lattice's own relation is untouched by the documented copy
    assert type(own) is LatticeKernelRelation and own.counts.shape == (27,)


def test_lattice_ops_on_a_tensor_are_unchanged_by_a_documented_fetch():
    coords = mx.array(_cloud("random_sparse"))
    rng = np.random.default_rng(2)
    x = lattice.SparseTensor(coords, mx.array(rng.normal(size=(coords.shape[0], 2)).astype(np.float32)))
    w = mx.array(rng.normal(size=(27, 2, 3)).astype(np.float32))
    before = lattice.ops.conv3d(x, w, kernel_size=3, stride=1).feats
    rel = x.coord_manager.kernel_relation(x.coord_key)  # documented copy of the cached relation
    assert isinstance(rel, KernelRelation) and rel.counts.shape == (2,)
    after = lattice.ops.conv3d(x, w, kernel_size=3, stride=1).feats
    np.testing.assert_allclose(after, before)
    pooled = lattice.ops.pool3d(x, mode="sum", kernel_size=3, stride=1).feats
    own = x.coord_manager.relation("forward", x.coord_key, lattice.core.KernelSpec(3))
    want = cpu_pool.segment_reduce(x.feats, own, "sum", backward="scatter_general")
    np.testing.assert_allclose(pooled, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cpu_pool.segment_reduce(x.feats, rel, "sum", backward="scatter_general"), want)
