"""The documented relation views of KernelRelation against loop oracles over its edges.

Each kind (forward, submanifold, target, transposed onto its generated support and onto a
target, generative) is built by the raw-array builders (``lattice.ops.build_*``) over the
distributions of ``conftest.CLOUDS`` — the relation itself checked against
``reference.relations`` — and every view is then checked against ``reference.views``:
output / input / kernel CSR (for each row, exactly the edges of that row, ascending edge
id), the implicit-GEMM map and its masks, the sorted view and its tile masks, the
contract. Buffers with rows past ``active_rows`` give the same relation with the views
spanning the buffers. Relations from SparseTensors and relations made as a dense map (the
form the CUDA builders make) give the same views.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import CLOUDS, make_cloud
from reference import coords as rc
from reference import relations as rr
from reference import views as rv

import lattice
from lattice import ops
from lattice.core import (
    KernelRelation,
    KernelSpec,
    RelationCSRView,
    RelationEdges,
    RelationImplicitGemmView,
    RelationKind,
    RelationSortedImplicitGemmView,
    SparseRelationContract,
)

# kind -> [(builder kwargs, reference oracle)]
CASES = {
    "forward": [
        dict(kernel_size=3, stride=1),
        dict(kernel_size=2, stride=2),
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=(3, 1, 2), stride=(1, 2, 1), dilation=(2, 1, 1)),
    ],
    "submanifold": [dict(kernel_size=3), dict(kernel_size=5), dict(kernel_size=3, dilation=2)],
    "target": [dict(kernel_size=3, stride=1), dict(kernel_size=3, stride=2, padding=1)],
    "transposed": [dict(kernel_size=2, stride=2), dict(kernel_size=3, stride=2, padding=1)],
    "transposed_target": [dict(kernel_size=2, stride=2), dict(kernel_size=3, stride=2, padding=1)],
    "generative": [dict(kernel_size=2, stride=2), dict(kernel_size=3, stride=2)],
}
PARAMS = [(kind, i) for kind, geoms in CASES.items() for i in range(len(geoms))]


def _geometry(kw):
    return (
        kw["kernel_size"],
        kw.get("stride", 1),
        kw.get("padding", 0),
        kw.get("dilation", 1),
    )


def _target_for(kind: str, coords: np.ndarray, kw) -> np.ndarray:
    """Most reachable output rows, plus unreachable ones, shuffled."""
    size, stride, padding, dilation = _geometry(kw)
    if kind == "target":
        base = rc.downsample(coords, stride)
    else:
        base = rr.transposed(coords, size, stride, padding, dilation).out_coords
    keep = base[np.arange(len(base)) % 3 != 1]
    extra = rc.to_array([(0, 1000, -1000, 7), (5, -50, 50, 0)])
    t = np.concatenate([keep, extra]).astype(np.int64)
    return t[np.random.default_rng(len(t)).permutation(len(t))].astype(np.int32)


def build(kind: str, kw, coords, active_rows=None, target=None, target_active_rows=None):
    """(relation from the builders, reference relation of the live rows, same output order?)."""
    live = coords if active_rows is None else coords[: int(np.asarray(active_rows).reshape(-1)[0])]
    size, stride, padding, dilation = _geometry(kw)
    if kind == "forward":
        return ops.build_kernel_relation(coords, active_rows, **kw), rr.forward(live, *_geometry(kw)), False
    if kind == "submanifold":
        ref = rr.submanifold(live, size, dilation)
        return ops.build_submanifold_kernel_relation(coords, active_rows, **kw), ref, True
    if kind == "generative":
        return (
            ops.build_generative_relation(coords, active_rows, **kw),
            rr.generative(live, size, stride),
            False,
        )
    if kind == "transposed":
        ref = rr.transposed(live, size, stride, padding, dilation)
        return ops.build_transposed_kernel_relation(coords, active_rows, **kw), ref, False
    t_live = target if target_active_rows is None else target[:target_active_rows]
    if kind == "target":
        rel = ops.build_target_kernel_relation(
            coords, target, active_rows=active_rows, target_active_rows=target_active_rows, **kw
        )
        return rel, rr.target(live, t_live, size, stride, padding, dilation), True
    rel = ops.build_transposed_kernel_relation(
        coords, active_rows, **kw, target_coords=target, target_active_rows=target_active_rows
    )
    return rel, rr.transposed(live, size, stride, padding, dilation, target_coords=t_live), True


def check_views(rel: KernelRelation, n_in: int, n_out: int) -> None:
    """Every documented view of ``rel`` against the oracles over its edges."""
    kid, ins, outs = rr.native_edges(rel)
    K = rel.n_kernels
    assert (rel.n_in_capacity, rel.n_out_capacity, rel.edge_capacity) == (n_in, n_out, rel.edge_count)
    assert rel.edges.capacity == rel.edge_count

    rv.assert_csr(rel.output_csr, outs, n_out)
    rv.assert_csr(rel.input_csr, ins, n_in)
    rv.assert_csr(rel.kernel_csr, kid, K)
    ids, offs = np.asarray(rel.output_csr.edge_ids), np.asarray(rel.row_offsets)
    for r in range(n_out):  # within an output row: one edge per offset, offsets ascending
        assert np.all(np.diff(kid[ids[offs[r] : offs[r + 1]]]) > 0)
    assert (
        rel.out_view is rel.output_csr and rel.in_view is rel.input_csr and rel.kernel_view is rel.kernel_csr
    )
    assert rel.row_offsets is rel.output_csr.row_offsets
    assert rel.in_row_offsets is rel.input_csr.row_offsets and rel.in_edge_ids is rel.input_csr.edge_ids
    assert rel.kernel_row_offsets is rel.kernel_csr.row_offsets
    assert rel.kernel_edge_ids is rel.kernel_csr.edge_ids

    c = rel.contract
    assert isinstance(c, SparseRelationContract) and c is rel.contract
    assert c.counts.dtype == mx.int32 and c.counts.tolist() == [rel.edge_count, rel.out_count]
    assert c.edge_count.tolist() == [rel.edge_count] and c.out_count.tolist() == [rel.out_count]
    assert c.kernel_offsets == tuple(map(tuple, np.asarray(rel.kernel_offsets).tolist()))
    assert (c.n_in_capacity, c.n_out_capacity, c.n_kernels) == (n_in, n_out, K)
    assert (c.stride, c.padding, c.kind) == (rel.spec.stride, rel.spec.padding, rel.kind)

    assert rel.implicit_gemm is None and rel.sorted_implicit_gemm is None
    view = rel.require_implicit_gemm()
    assert view is rel.require_implicit_gemm() is rel.implicit_gemm
    m = rv.out_in_map(ins, outs, kid, n_out, K)
    masks = rv.row_masks(m)
    assert view.out_in_map.dtype == mx.int32 and view.row_masks.dtype == mx.int32
    np.testing.assert_array_equal(np.asarray(view.out_in_map), m)
    np.testing.assert_array_equal(np.asarray(view.row_masks), masks)
    if K > 32:
        with pytest.raises(ValueError, match="K <= 32"):
            rel.require_sorted_implicit_gemm()
        return
    s = rel.require_sorted_implicit_gemm()
    assert s is rel.require_sorted_implicit_gemm() is rel.sorted_implicit_gemm
    order, sorted_map, tiles = rv.sorted_view(m, masks)
    np.testing.assert_array_equal(np.asarray(s.reorder_rows), order)
    np.testing.assert_array_equal(np.asarray(s.sorted_out_in_map), sorted_map)
    np.testing.assert_array_equal(np.asarray(s.sorted_kv_out_in_map), sorted_map.T)
    np.testing.assert_array_equal(np.asarray(s.tile_masks), tiles)


@pytest.mark.parametrize("name", CLOUDS)
@pytest.mark.parametrize("kind,i", PARAMS, ids=[f"{k}{i}" for k, i in PARAMS])
def test_views_of_every_kind(kind, i, name):
    kw = CASES[kind][i]
    coords = make_cloud(name)
    target = _target_for(kind, coords, kw) if kind in ("target", "transposed_target") else None
    rel, ref, same_order = build(kind, kw, coords, target=target)
    rr.assert_relation_matches(rel, ref, len(coords), same_out_order=same_order)
    check_views(rel, len(coords), rel.out_count)
    c = rel.contract
    assert c.source_coords is not None and np.array_equal(np.asarray(c.source_coords), coords)
    assert c.source_active_rows.tolist() == [len(coords)]
    if target is not None or kind == "submanifold":
        want = coords if target is None else target
        np.testing.assert_array_equal(np.asarray(c.target_coords), want)
        np.testing.assert_array_equal(np.asarray(c.out_coords), want)
        assert c.target_active_rows.tolist() == [len(want)]
    else:
        assert c.target_coords is None and c.target_active_rows is None


def _padded(coords: np.ndarray, extra: int) -> np.ndarray:
    """``coords`` and ``extra`` rows past them that are not a valid set (repeats, batch -1)."""
    junk = np.zeros((extra, 4), np.int32)
    junk[::2, 0] = -1
    if len(coords):
        junk[1::2] = coords[0]
    return np.concatenate([coords, junk]).astype(np.int32)


@pytest.mark.parametrize("name", ["empty", "single", "random_sparse", "batched"])
@pytest.mark.parametrize("kind,i", PARAMS[::2], ids=[f"{k}{i}" for k, i in PARAMS[::2]])
def test_rows_past_active_rows_are_ignored_and_spanned(kind, i, name):
    kw = CASES[kind][i]
    coords = make_cloud(name)
    buf = _padded(coords, 5)
    active = mx.array([len(coords)], dtype=mx.int32)
    target = tbuf = t_active = None
    if kind in ("target", "transposed_target"):
        target = _target_for(kind, coords, kw)
        tbuf, t_active = _padded(target, 3), len(target)
    rel, ref, same_order = build(kind, kw, buf, active, tbuf, t_active)
    rr.assert_relation_matches(rel, ref, len(coords), same_out_order=same_order)
    given = target is not None or kind == "submanifold"
    n_out = (len(tbuf) if target is not None else len(buf)) if given else rel.out_count
    check_views(rel, len(buf), n_out)
    c = rel.contract
    assert c.source_active_rows.tolist() == [len(coords)] and c.source_coords.shape == buf.shape
    if given:
        assert c.target_active_rows.tolist() == [len(coords) if target is None else len(target)]


def test_relations_of_tensors_and_dense_maps_have_the_same_views():
    coords = make_cloud("batched")
    x = lattice.SparseTensor(coords, np.ones((len(coords), 2), np.float32))
    rel = ops.submanifold_kernel_relation(x, kernel_size=3)
    check_views(rel, len(coords), len(coords))
    c = rel.contract
    np.testing.assert_array_equal(np.asarray(c.source_coords), coords)
    np.testing.assert_array_equal(np.asarray(c.target_coords), coords)
    assert c.source_active_rows.tolist() == c.target_active_rows.tolist() == [len(coords)]
    fwd = ops.kernel_relation(x, kernel_size=2, stride=2)
    assert fwd.contract.target_coords is None
    # the form a GPU builder makes: the dense map only (edges derived on first use)
    dense = KernelRelation(
        rel.kind, rel.spec, rel.in_key, rel.out_key, rel.out_coords, rel.kernel_offsets, rel.in_count,
        built_map=rel.neighbor_map,
    )  # fmt: skip
    assert dense.known_edge_count is None
    assert dense.contract.counts.tolist() == [rel.edge_count, len(coords)]
    assert dense.known_edge_count is None  # the contract counts the map lazily, no host read
    check_views(dense, len(coords), len(coords))
    np.testing.assert_array_equal(
        np.asarray(dense.require_implicit_gemm().out_in_map),
        np.asarray(rel.require_implicit_gemm().out_in_map),
    )


# ---- the documented examples and edge cases ---------------------------------------------------

LINE = mx.array([[0, 0, 0, 0], [0, 1, 0, 0], [0, 2, 0, 0]], dtype=mx.int32)


def test_documented_implicit_gemm_examples():
    rel = ops.build_kernel_relation(LINE, kernel_size=(3, 1, 1))
    assert rel.implicit_gemm is None
    view = rel.require_implicit_gemm()
    assert view.out_in_map.tolist() == [[-1, 0, 1], [0, 1, 2], [1, 2, -1]]
    assert view.row_masks.tolist() == [[6], [7], [3]]
    s = rel.require_sorted_implicit_gemm()
    assert s.reorder_rows.tolist() == [2, 0, 1]
    assert s.sorted_out_in_map.tolist() == [[1, 2, -1], [-1, 0, 1], [0, 1, 2]]
    assert s.tile_masks.tolist() == [7, 0, 0, 0]
    target = mx.array([[0, 1, 0, 0], [0, 3, 0, 0]], dtype=mx.int32)
    view = ops.build_target_kernel_relation(LINE, target, kernel_size=(3, 1, 1)).require_implicit_gemm()
    assert view.out_in_map.tolist() == [[0, 1, 2], [2, -1, -1]]
    assert view.row_masks.tolist() == [[7], [1]]
    wide = ops.build_kernel_relation(LINE[:1], kernel_size=(33, 1, 1)).require_implicit_gemm()
    assert wide.out_in_map.shape == (1, 33) and wide.out_in_map.tolist()[0][16] == 0
    assert wide.row_masks.tolist() == [[1 << 16, 0]]


def test_masks_with_bit_31_sort_first_as_int32():
    # kernel (1, 1, 32): offset 31 is bit 31; rows meeting it have a negative mask
    coords = np.array([[0, 0, 0, z] for z in (0, 31, 40, 5, 36)], np.int32)
    rel = ops.build_kernel_relation(coords, kernel_size=(1, 1, 32))
    check_views(rel, 5, 5)
    masks = np.asarray(rel.require_implicit_gemm().row_masks)[:, 0]
    assert (masks < 0).any()
    order = np.asarray(rel.require_sorted_implicit_gemm().reorder_rows)
    assert np.all(masks[order][:-1] <= masks[order][1:])


def test_many_rows_make_many_tiles():
    coords = make_cloud("dense_block")
    rel = ops.build_submanifold_kernel_relation(coords, kernel_size=3)
    assert rel.require_sorted_implicit_gemm().tile_masks.shape == (4 * ((len(coords) + 63) // 64),)


def test_value_types_check_their_arrays():
    i32 = mx.array([0, 1], dtype=mx.int32)
    with pytest.raises(ValueError, match="row_offsets"):
        RelationCSRView(mx.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="edge_ids"):
        RelationCSRView(i32, mx.zeros((2, 2), mx.int32))
    with pytest.raises(ValueError, match="ceil"):
        RelationImplicitGemmView(mx.zeros((2, 33), mx.int32), mx.zeros((2, 1), mx.int32))
    with pytest.raises(ValueError, match="same row count"):
        RelationImplicitGemmView(mx.zeros((2, 3), mx.int32), mx.zeros((3, 1), mx.int32))
    with pytest.raises(ValueError, match="K-major"):
        m = mx.zeros((2, 3), mx.int32)
        RelationSortedImplicitGemmView(m, m, i32, i32)
    with pytest.raises(ValueError, match="n_kernels"):
        SparseRelationContract(i32, ((0, 0, 0),), n_kernels=2)
    with pytest.raises(ValueError, match="counts"):
        SparseRelationContract(mx.array([1, 2, 3], dtype=mx.int32), ())
    with pytest.raises(ValueError, match="kind"):
        SparseRelationContract(i32, (), kind="sideways")
    with pytest.raises(ValueError, match="n_out_capacity"):
        SparseRelationContract(i32, (), out_coords=mx.zeros((3, 4), mx.int32), n_out_capacity=2)
    c = SparseRelationContract(i32, ([0, 0, 1],), out_coords=mx.zeros((3, 4), mx.int32))
    assert (c.kernel_offsets, c.n_kernels, c.n_out_capacity, c.kind) == (((0, 0, 1),), 1, 3, "forward")
    assert c.edge_count.tolist() == [0] and c.out_count.tolist() == [1]


def test_kernel_spec_centred_submanifold_and_edge_capacity():
    assert KernelSpec() == KernelSpec(3) and KernelSpec().size == (3, 3, 3)
    assert KernelSpec(3).is_centered_submanifold and KernelSpec(1).is_centered_submanifold
    assert KernelSpec((3, 1, 5)).is_centered_submanifold
    assert not KernelSpec(2).is_centered_submanifold
    assert not KernelSpec(3, stride=2).is_centered_submanifold
    assert not KernelSpec(3, padding=1).is_centered_submanifold
    assert KernelSpec(3, dilation=2).is_centered_submanifold  # dilated offsets stay symmetric
    e = RelationEdges(mx.array([0, 1], dtype=mx.int32), mx.array([1, 0], dtype=mx.int32), mx.array([2]))
    assert e.capacity == 2


def test_the_edge_order_stays_lattices():
    rel = ops.build_kernel_relation(LINE, kernel_size=(3, 1, 1))
    # offset-major edges: what the CPU routes walk
    assert rel.edges.kernel_ids.tolist() == [0, 0, 1, 1, 1, 2, 2]
    assert isinstance(rel.edge_count, int) and isinstance(rel.out_count, int)
    assert rel.kind is RelationKind.FORWARD


def test_builders_check_their_arguments():
    with pytest.raises(ValueError, match=r"\[build_kernel_relation\] active_rows must be in \[0, 3\]"):
        ops.build_kernel_relation(LINE, 4)
    with pytest.raises(ValueError, match="active_rows"):
        ops.build_kernel_relation(LINE, mx.array([[1, 2]]))
    with pytest.raises(ValueError, match="odd"):
        ops.build_submanifold_kernel_relation(LINE, kernel_size=2)
    with pytest.raises(ValueError, match="duplicate"):
        ops.build_kernel_relation(mx.concatenate([LINE, LINE[:1]]))
    # int64 buffers and plain ints for active_rows
    rel = ops.build_kernel_relation(LINE.astype(mx.int64), 2, kernel_size=(3, 1, 1))
    assert rel.contract.source_coords.dtype == mx.int64 and rel.n_in_capacity == 3
    assert rel.require_implicit_gemm().out_in_map.tolist() == [[-1, 0, 1], [0, 1, -1]]
