"""Kernel relations of every kind against the slow reference oracles.

Every distribution of ``conftest.CLOUDS`` (isolated, line, plane, dense block,
random sparse, a batch with an empty member, empty, single point; negative
coordinates throughout) meets a spread of kernel geometries: sizes 1..5 odd and
even where legal, strides 1..3, padding 0..2, dilation 1..2 and anisotropic
triples. A tiny cloud meets the full product of those ranges.
"""

from __future__ import annotations

import itertools
import time

import mlx.core as mx
import numpy as np
import pytest
from conftest import CLOUDS, FORWARD_GEOMETRIES, make_cloud
from reference import coords as rc
from reference import relations as rr

import lattice
from lattice import ops
from lattice.core import RelationKind, SparseTensor

# (kernel_size, stride, padding, dilation)

TRANSPOSED_GEOMETRIES = [
    (1, 1, 0, 1),
    (1, 2, 0, 1),
    (2, 2, 0, 1),
    (2, 3, 1, 1),
    (3, 1, 1, 1),
    (3, 2, 1, 1),
    (3, 2, 0, 2),
    (4, 2, 1, 1),
    (4, 3, 2, 2),
    (5, 2, 2, 1),
    (5, 1, 0, 2),
    ((2, 3, 1), (2, 1, 3), (0, 1, 2), (1, 2, 1)),
]

# (7, 1): 171 probed offsets, more than the native builder probes in one batch (128). Kernels
# of 27 offsets or more read the bricks of a window up to 17 points wide first; (3, 9) is
# wider (19: probed directly), ((3, 1, 5), ...) has 15 offsets (probed directly).
SUBMANIFOLD_GEOMETRIES = [
    (1, 1),
    (3, 1),
    (3, 2),
    (5, 1),
    (5, 2),
    (7, 1),
    ((3, 1, 5), (1, 2, 1)),
    (3, 9),
    ((9, 3, 1), (2, 1, 1)),
]

GENERATIVE_GEOMETRIES = [
    (1, 1),
    (1, 2),
    (2, 2),
    (2, 3),
    (3, 1),
    (3, 2),
    (4, 2),
    (5, 3),
    ((2, 1, 3), (2, 3, 1)),
]


def _ids(geoms):
    return [str(g).replace(" ", "") for g in geoms]


def _n(coords) -> int:
    return int(np.asarray(coords).shape[0])


def _offsets_equal(rel, size, dilation) -> None:
    np.testing.assert_array_equal(np.asarray(rel.kernel_offsets), np.array(rr.kernel_offsets(size, dilation)))
    assert rel.n_kernels == len(rr.kernel_offsets(size, dilation))


def _target_support(coords, level_rule, rng) -> np.ndarray:
    """A target: most reachable rows, plus unreachable extras, shuffled."""
    base = level_rule(coords)
    keep = base[np.arange(len(base)) % 3 != 1]
    extra = rc.to_array([(0, 1000, -1000, 7), (1, 999, 999, 999), (5, -50, 50, 0)])
    t = np.concatenate([keep, extra]).astype(np.int64)
    return t[rng.permutation(len(t))].astype(np.int32)


# ---- forward ---------------------------------------------------------------------------


@pytest.mark.parametrize("geom", FORWARD_GEOMETRIES, ids=_ids(FORWARD_GEOMETRIES))
def test_forward_matches_reference(cloud, geom):
    size, stride, padding, dilation = geom
    rel = ops.kernel_relation(cloud, kernel_size=size, stride=stride, padding=padding, dilation=dilation)
    ref = rr.forward(cloud, size, stride, padding, dilation)
    rr.assert_relation_matches(rel, ref, _n(cloud))
    assert rel.kind is RelationKind.FORWARD
    assert rel.out_key.stride == rc._triple(stride)
    _offsets_equal(rel, size, dilation)


@pytest.mark.parametrize("geom", FORWARD_GEOMETRIES[::3], ids=_ids(FORWARD_GEOMETRIES[::3]))
@pytest.mark.parametrize("name", CLOUDS)
def test_target_matches_reference(name, geom):
    size, stride, padding, dilation = geom
    coords = make_cloud(name)
    rng = np.random.default_rng(7)
    target = _target_support(coords, lambda c: rc.downsample(c, stride), rng)
    rel = ops.target_kernel_relation(
        coords, target, kernel_size=size, stride=stride, padding=padding, dilation=dilation
    )
    ref = rr.target(coords, target, size, stride, padding, dilation)
    rr.assert_relation_matches(rel, ref, _n(coords), same_out_order=True)
    assert rel.kind is RelationKind.TARGET
    # the unreachable extra target rows keep their place and receive no edge
    extra = np.nonzero((np.abs(target[:, 1:]).max(axis=1) >= 50) | (target[:, 0] % 2 == 1))[0]
    assert len(extra) == 3
    assert not np.isin(rr.native_edges(rel)[2], extra).any()


# ---- submanifold -------------------------------------------------------------------------


@pytest.mark.parametrize("geom", SUBMANIFOLD_GEOMETRIES, ids=_ids(SUBMANIFOLD_GEOMETRIES))
def test_submanifold_matches_reference(cloud, geom):
    size, dilation = geom
    rel = ops.submanifold_kernel_relation(cloud, kernel_size=size, dilation=dilation)
    ref = rr.submanifold(cloud, size, dilation)
    rr.assert_relation_matches(rel, ref, _n(cloud), same_out_order=True)
    assert rel.kind is RelationKind.SUBMANIFOLD
    assert rel.out_key == rel.in_key
    _offsets_equal(rel, size, dilation)


def test_submanifold_edges_are_symmetric(cloud):
    rel = ops.submanifold_kernel_relation(cloud, kernel_size=3)
    kid, ins, outs = rr.native_edges(rel)
    forward = set(zip(kid.tolist(), ins.tolist(), outs.tolist(), strict=True))
    mirrored = {(26 - k, o, i) for k, i, o in forward}
    assert forward == mirrored
    # the centre offset maps every row to itself
    a, b = rel.offset_edges(13)
    np.testing.assert_array_equal(np.sort(np.asarray(a)), np.arange(len(cloud)))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---- transposed and generative -------------------------------------------------------------


@pytest.mark.parametrize("geom", TRANSPOSED_GEOMETRIES, ids=_ids(TRANSPOSED_GEOMETRIES))
def test_transposed_generated_matches_reference(cloud, geom):
    size, stride, padding, dilation = geom
    rel = ops.transposed_kernel_relation(
        cloud, kernel_size=size, stride=stride, padding=padding, dilation=dilation
    )
    ref = rr.transposed(cloud, size, stride, padding, dilation)
    rr.assert_relation_matches(rel, ref, _n(cloud))
    assert rel.kind is RelationKind.TRANSPOSED
    assert rel.out_key.stride == (1, 1, 1)  # a coords array is taken at the transposed stride
    # generated support: every (input, offset) pair is an edge
    assert rel.edge_count == _n(cloud) * rel.n_kernels
    _offsets_equal(rel, size, dilation)


@pytest.mark.parametrize("geom", TRANSPOSED_GEOMETRIES[::2], ids=_ids(TRANSPOSED_GEOMETRIES[::2]))
@pytest.mark.parametrize("name", CLOUDS)
def test_transposed_onto_target_matches_reference(name, geom):
    size, stride, padding, dilation = geom
    coords = make_cloud(name)
    rng = np.random.default_rng(11)
    target = _target_support(
        coords, lambda c: rr.transposed(c, size, stride, padding, dilation).out_coords, rng
    )
    rel = ops.transposed_kernel_relation(
        coords, target, kernel_size=size, stride=stride, padding=padding, dilation=dilation
    )
    ref = rr.transposed(coords, size, stride, padding, dilation, target_coords=target)
    rr.assert_relation_matches(rel, ref, _n(coords), same_out_order=True)


@pytest.mark.parametrize("geom", GENERATIVE_GEOMETRIES, ids=_ids(GENERATIVE_GEOMETRIES))
def test_generative_matches_reference(cloud, geom):
    size, stride = geom
    rel = ops.generative_kernel_relation(cloud, kernel_size=size, stride=stride)
    ref = rr.generative(cloud, size, stride)
    rr.assert_relation_matches(rel, ref, _n(cloud))
    assert rel.kind is RelationKind.GENERATIVE
    # with an explicit target: every other generated row, in a shuffled order
    rng = np.random.default_rng(3)
    target = ref.out_coords[::2][rng.permutation(len(ref.out_coords[::2]))].astype(np.int32)
    rel_t = ops.generative_kernel_relation(cloud, target, kernel_size=size, stride=stride)
    rr.assert_relation_matches(
        rel_t, rr.generative(cloud, size, stride, target_coords=target), _n(cloud), same_out_order=True
    )


# ---- the full parameter product on a tiny cloud -----------------------------------------------

_TINY = None


def _tiny() -> np.ndarray:
    global _TINY
    if _TINY is None:
        rng = np.random.default_rng(5)
        xyz = np.unique(rng.integers(-5, 6, size=(90, 3)), axis=0)[:50]
        b = (np.arange(len(xyz)) % 3 == 0) * 2  # batches 0 and 2
        _TINY = np.concatenate([b[:, None], xyz], axis=1).astype(np.int32)
    return _TINY


PRODUCT = list(itertools.product(range(1, 6), range(1, 4), range(0, 3), range(1, 3)))


@pytest.mark.parametrize("size,stride,padding,dilation", PRODUCT)
def test_forward_parameter_product(size, stride, padding, dilation):
    c = _tiny()
    rel = ops.kernel_relation(c, kernel_size=size, stride=stride, padding=padding, dilation=dilation)
    rr.assert_relation_matches(rel, rr.forward(c, size, stride, padding, dilation), len(c))


@pytest.mark.parametrize("size,stride,padding,dilation", PRODUCT)
def test_transposed_parameter_product(size, stride, padding, dilation):
    c = _tiny()
    rel = ops.transposed_kernel_relation(
        c, kernel_size=size, stride=stride, padding=padding, dilation=dilation
    )
    rr.assert_relation_matches(rel, rr.transposed(c, size, stride, padding, dilation), len(c))


# ---- tensors, levels and the forward / transposed duality ---------------------------------------


def _tensor(coords, stride=1, channels=2) -> SparseTensor:
    return SparseTensor(coords, mx.zeros((len(coords), channels)), stride)


def test_tensor_levels_and_manager_sharing():
    c = make_cloud("batched")
    x = _tensor(c, stride=2)
    fwd = ops.kernel_relation(x, kernel_size=3, stride=2, padding=1)
    assert fwd.in_key == x.coord_key
    assert fwd.out_key.stride == (4, 4, 4)
    assert fwd.out_key.manager_id == x.coord_manager.id
    rr.assert_relation_matches(fwd, rr.forward(c, 3, 2, 1, 1), len(c))

    y = SparseTensor(
        fwd.out_coords, mx.zeros((fwd.out_count, 2)), 4, coord_key=fwd.out_key, coord_manager=x.coord_manager
    )
    up = ops.transposed_kernel_relation(y, x, kernel_size=2, stride=2)
    assert up.out_key == x.coord_key
    assert up.out_key.stride == (2, 2, 2)
    rr.assert_relation_matches(
        up,
        rr.transposed(np.asarray(fwd.out_coords), 2, 2, target_coords=c),
        fwd.out_count,
        same_out_order=True,
    )


@pytest.mark.parametrize("name", ["random_sparse", "dense_block", "batched", "line"])
@pytest.mark.parametrize("size,stride", [(2, 2), (3, 2), (3, 3), (4, 2)])
def test_transposed_onto_input_mirrors_forward(name, size, stride):
    """With the input as target and no padding, transposed edges are the forward edges reversed."""
    c = make_cloud(name)
    x = _tensor(c)
    fwd = ops.kernel_relation(x, kernel_size=size, stride=stride)
    y = SparseTensor(
        fwd.out_coords,
        mx.zeros((fwd.out_count, 1)),
        stride,
        coord_key=fwd.out_key,
        coord_manager=x.coord_manager,
    )
    up = ops.transposed_kernel_relation(y, x, kernel_size=size, stride=stride)
    f = set(zip(*(a.tolist() for a in rr.native_edges(fwd)), strict=True))
    t = {(k, o, i) for k, i, o in zip(*(a.tolist() for a in rr.native_edges(up)), strict=True)}
    assert f == t
    assert len(f) == fwd.edge_count == up.edge_count


def test_generative_equals_transposed_without_padding():
    c = make_cloud("random_sparse")
    g = ops.generative_kernel_relation(c, kernel_size=3, stride=2)
    t = ops.transposed_kernel_relation(c, kernel_size=3, stride=2)
    gs = {tuple(r) for r in np.asarray(g.out_coords).tolist()}
    ts = {tuple(r) for r in np.asarray(t.out_coords).tolist()}
    assert gs == ts
    np.testing.assert_array_equal(np.asarray(g.counts), np.asarray(t.counts))


def test_inputs_as_mx_array_and_numpy_agree():
    c = make_cloud("plane")
    a = ops.submanifold_kernel_relation(c)
    b = ops.submanifold_kernel_relation(mx.array(c))
    for x, y in zip(rr.native_edges(a), rr.native_edges(b), strict=True):
        np.testing.assert_array_equal(x, y)


def test_kernel_ids_and_offset_edges_are_consistent():
    c = make_cloud("dense_block")
    rel = ops.kernel_relation(c, kernel_size=3, stride=2, padding=1)
    kid = np.asarray(rel.edges.kernel_ids)
    counts = np.asarray(rel.counts)
    np.testing.assert_array_equal(kid, np.repeat(np.arange(27), counts))
    np.testing.assert_array_equal(np.asarray(rel.edge_offsets), np.concatenate([[0], np.cumsum(counts)]))
    assert len(rel.edges) == rel.edge_count == int(counts.sum())
    for k in range(27):
        i, o = rel.offset_edges(k)
        assert i.shape == o.shape == (int(counts[k]),)


def test_generated_rows_in_first_occurrence_order():
    """The numbering stated for generated outputs: forward by input row, transposed by (row, offset)."""
    c = make_cloud("random_sparse")
    fwd = ops.kernel_relation(c, kernel_size=2, stride=3)
    np.testing.assert_array_equal(np.asarray(fwd.out_coords), rc.downsample(c, 3))
    tr = ops.transposed_kernel_relation(c, kernel_size=3, stride=2, padding=1)
    np.testing.assert_array_equal(np.asarray(tr.out_coords), rr.transposed(c, 3, 2, 1, 1).out_coords)


def test_design_example_stride_two_over_four_cells():
    """DESIGN.md: a stride-2 convolution over x = 0..3 yields x = 0, 1 at stride (2, 2, 2)."""
    c = np.array([[0, x, 0, 0] for x in range(4)], np.int32)
    x = _tensor(c)
    rel = ops.kernel_relation(x, kernel_size=2, stride=2)
    assert sorted(np.asarray(rel.out_coords).tolist()) == [[0, 0, 0, 0], [0, 1, 0, 0]]
    assert rel.out_key.stride == (2, 2, 2)
    out = np.asarray(rel.out_coords)
    edges = {
        (k, i, int(out[o, 1])) for k, i, o in zip(*(a.tolist() for a in rr.native_edges(rel)), strict=True)
    }
    # offset (0,0,0) is k = 0, offset (1,0,0) is k = 4: x_in = 2 * x_out + dx
    assert edges == {(0, 0, 0), (4, 1, 0), (0, 2, 1), (4, 3, 1)}
    ref = rr.forward(c, 2, 2)
    ref_edges = zip(ref.kernel_ids.tolist(), ref.in_rows.tolist(), ref.out_rows.tolist(), strict=True)
    assert edges == {(k, i, int(ref.out_coords[o, 1])) for k, i, o in ref_edges}


def test_transposed_single_point_hand_checked():
    c = np.array([[0, 1, -1, 0]], np.int32)
    rel = ops.transposed_kernel_relation(c, kernel_size=2, stride=2)
    got = {tuple(r) for r in np.asarray(rel.out_coords).tolist()}
    assert got == {(0, x, y, z) for x in (2, 3) for y in (-2, -1) for z in (0, 1)}
    ref = rr.transposed(c, 2, 2)
    assert {tuple(r) for r in ref.out_coords.tolist()} == got


def test_tensor_with_inactive_rows():
    """Rows past ``active_rows`` take no part in a relation (they may even repeat live rows)."""
    c = make_cloud("random_sparse")
    buf = np.concatenate([c, c[:5]])
    x = SparseTensor(buf, mx.zeros((len(buf), 1)), active_rows=len(c))
    rr.assert_relation_matches(
        ops.submanifold_kernel_relation(x), rr.submanifold(c, 3), len(c), same_out_order=True
    )
    rr.assert_relation_matches(ops.kernel_relation(x, kernel_size=3, stride=2), rr.forward(c, 3, 2), len(c))


# ---- errors ------------------------------------------------------------------------------------


def test_submanifold_rejects_even_kernels():
    with pytest.raises(
        ValueError, match=r"\[submanifold_kernel_relation\] submanifold kernels need an odd kernel_size"
    ):
        ops.submanifold_kernel_relation(make_cloud("line"), kernel_size=2)
    with pytest.raises(ValueError, match="odd"):
        ops.submanifold_kernel_relation(make_cloud("line"), kernel_size=(3, 4, 3))


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"kernel_size": 0}, r"\[kernel_relation\] kernel_size must be positive, got \(0, 0, 0\)"),
        ({"kernel_size": (2, 0, 2)}, r"kernel_size must be positive, got \(2, 0, 2\)"),
        ({"stride": 0}, r"\[kernel_relation\] stride must be positive"),
        ({"padding": -1}, r"\[kernel_relation\] padding must be >= 0"),
        ({"dilation": 0}, r"\[kernel_relation\] dilation must be positive"),
        ({"kernel_size": (2, 2)}, r"\[kernel_relation\] kernel_size must be an int or 3 ints"),
        ({"kernel_size": 65}, r"kernel_size must be at most 64"),
    ],
)
def test_kernel_relation_rejects_bad_geometry(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ops.kernel_relation(make_cloud("line"), **kwargs)


@pytest.mark.parametrize(
    "coords,exc,message",
    [
        (np.zeros((3, 3), np.int32), ValueError, r"\[kernel_relation\] coords must have shape \(N, 4\)"),
        (np.zeros((3, 4), np.float32) + 0.5, TypeError, r"\[kernel_relation\] coords must hold integers"),
        (
            np.array([[0, 1, 2, 3], [0, 1, 2, 3]]),
            ValueError,
            r"\[kernel_relation\] duplicate active coordinates",
        ),
        (np.array([[0, 1, 2, 3], [-1, 1, 2, 3]]), ValueError, r"batch indices must be non-negative, got -1"),
    ],
)
def test_kernel_relation_rejects_bad_coords(coords, exc, message):
    with pytest.raises(exc, match=message):
        ops.kernel_relation(coords)


def test_transposed_needs_divisible_tensor_stride():
    x = _tensor(make_cloud("line"), stride=1)
    with pytest.raises(
        ValueError,
        match=r"\[transposed_kernel_relation\] the transposed stride \(2, 2, 2\) must divide the tensor stride \(1, 1, 1\)",
    ):
        ops.transposed_kernel_relation(x, kernel_size=2, stride=2)
    y = _tensor(make_cloud("line"), stride=(4, 2, 3))
    with pytest.raises(ValueError, match="transposed stride .* must divide the tensor stride"):
        ops.generative_kernel_relation(y, kernel_size=2, stride=2)


def test_target_of_wrong_stride_is_rejected():
    c = make_cloud("random_sparse")
    x = _tensor(c, stride=1)
    coarse = _tensor(rc.downsample(c, 2), stride=3)
    with pytest.raises(
        ValueError, match=r"\[target_kernel_relation\] target stride must be \(2, 2, 2\).*got \(3, 3, 3\)"
    ):
        ops.target_kernel_relation(x, coarse, kernel_size=2, stride=2)
    y = _tensor(rc.downsample(c, 2), stride=2)
    wrong = _tensor(c, stride=2)
    with pytest.raises(ValueError, match=r"\[transposed_kernel_relation\] target stride must be \(1, 1, 1\)"):
        ops.transposed_kernel_relation(y, wrong, kernel_size=2, stride=2)


def test_target_relation_requires_a_target():
    with pytest.raises(ValueError, match=r"\[target_kernel_relation\] target is required"):
        ops.target_kernel_relation(make_cloud("line"), None)


def test_transposed_output_overflowing_int32_is_rejected():
    c = np.array([[0, 2**30, 0, 0], [0, 0, 0, 0]], np.int32)
    with pytest.raises(
        ValueError, match=r"\[transposed_kernel_relation\] output coordinates overflow int32 on axis x"
    ):
        ops.transposed_kernel_relation(c, kernel_size=2, stride=4)


# ---- no dense grid anywhere ---------------------------------------------------------------------


def test_huge_span_builds_fast_and_matches_reference():
    """1,000 points over +-1,000,000 per axis: memory and time follow N, not the box."""
    rng = np.random.default_rng(2024)
    xyz = rng.integers(-1_000_000, 1_000_001, size=(1000, 3))
    c = np.concatenate([np.zeros((1000, 1), np.int64), xyz], axis=1).astype(np.int32)
    queries = np.concatenate([c[::3], c[::5] + np.array([0, 1, 0, 0])]).astype(np.int32)

    t0 = time.perf_counter()
    x = _tensor(c)
    subm = ops.submanifold_kernel_relation(x, kernel_size=3)
    fwd = ops.kernel_relation(x, kernel_size=3, stride=2, padding=1)
    y = SparseTensor(
        fwd.out_coords, mx.zeros((fwd.out_count, 2)), 2, coord_key=fwd.out_key, coord_manager=x.coord_manager
    )
    up_gen = ops.transposed_kernel_relation(y, kernel_size=2, stride=2)
    up_tgt = ops.transposed_kernel_relation(y, x, kernel_size=2, stride=2)
    tr1 = ops.transposed_kernel_relation(c, kernel_size=3, stride=1, padding=1)
    rows = lattice.core.lookup_coords(x, queries)
    mx.eval(rows, subm.edges.in_rows, fwd.edges.in_rows, up_gen.edges.in_rows, up_tgt.edges.in_rows)
    elapsed = time.perf_counter() - t0
    assert elapsed < 10.0, f"building relations over a +-1e6 span took {elapsed:.3f} s"  # box-bound: hours

    rr.assert_relation_matches(subm, rr.submanifold(c, 3), len(c), same_out_order=True)
    rr.assert_relation_matches(fwd, rr.forward(c, 3, 2, 1), len(c))
    coarse = np.asarray(fwd.out_coords)
    rr.assert_relation_matches(up_gen, rr.transposed(coarse, 2, 2), len(coarse))
    rr.assert_relation_matches(
        up_tgt, rr.transposed(coarse, 2, 2, target_coords=c), len(coarse), same_out_order=True
    )
    rr.assert_relation_matches(tr1, rr.transposed(c, 3, 1, 1), len(c))
    np.testing.assert_array_equal(np.asarray(rows), rc.lookup(c, queries))


# ---- a real scan --------------------------------------------------------------------------------


def test_vectorized_oracles_agree_with_loop_oracles():
    """The vectorised oracles used on the scan are themselves checked on small inputs."""
    for name in ("batched", "dense_block", "line", "single", "empty"):
        c = make_cloud(name)
        pairs = [
            (rr.submanifold(c, 3, 1), rr.submanifold_vectorized(c, 3, 1)),
            (rr.submanifold(c, (3, 1, 5), (1, 2, 1)), rr.submanifold_vectorized(c, (3, 1, 5), (1, 2, 1))),
            (rr.forward(c, 3, 2, 1, 1), rr.forward_vectorized(c, 3, 2, 1, 1)),
            (rr.forward(c, 2, 3, 0, 2), rr.forward_vectorized(c, 2, 3, 0, 2)),
            (rr.transposed(c, 3, 2, 1, 1), rr.transposed_vectorized(c, 3, 2, 1, 1)),
            (rr.transposed(c, 2, 2, 0, 1, c), rr.transposed_vectorized(c, 2, 2, 0, 1, c)),
        ]
        for loop, vec in pairs:
            np.testing.assert_array_equal(loop.out_coords, vec.out_coords)
            a = sorted(
                zip(loop.kernel_ids.tolist(), loop.in_rows.tolist(), loop.out_rows.tolist(), strict=True)
            )
            b = sorted(zip(vec.kernel_ids.tolist(), vec.in_rows.tolist(), vec.out_rows.tolist(), strict=True))
            assert a == b


def test_scan_submanifold(kitti_coords):
    c = kitti_coords
    rel = ops.submanifold_kernel_relation(c, kernel_size=3)
    rr.assert_relation_matches(rel, rr.submanifold_vectorized(c, 3), len(c), same_out_order=True)
    assert rel.average_neighbors > 1.0


@pytest.mark.parametrize("size,stride,padding,dilation", [(2, 2, 0, 1), (3, 2, 1, 1), (3, 3, 0, 2)])
def test_scan_forward(kitti_coords, size, stride, padding, dilation):
    c = kitti_coords
    rel = ops.kernel_relation(c, kernel_size=size, stride=stride, padding=padding, dilation=dilation)
    rr.assert_relation_matches(rel, rr.forward_vectorized(c, size, stride, padding, dilation), len(c))


def test_scan_target(kitti_coords):
    c = kitti_coords
    coarse, _ = rc.unique_first_vectorized(np.concatenate([c[:, :1], np.floor_divide(c[:, 1:], 2)], axis=1))
    target = coarse[np.random.default_rng(1).permutation(len(coarse))[: len(coarse) // 2]].astype(np.int32)
    rel = ops.target_kernel_relation(c, target, kernel_size=3, stride=2, padding=1)
    rr.assert_relation_matches(rel, rr.target_vectorized(c, target, 3, 2, 1), len(c), same_out_order=True)


def test_scan_transposed(kitti_coords):
    c = kitti_coords
    x = _tensor(c)
    fwd = ops.kernel_relation(x, kernel_size=2, stride=2)
    coarse = np.asarray(fwd.out_coords)
    y = SparseTensor(
        fwd.out_coords, mx.zeros((fwd.out_count, 1)), 2, coord_key=fwd.out_key, coord_manager=x.coord_manager
    )
    gen = ops.transposed_kernel_relation(y, kernel_size=3, stride=2, padding=1)
    rr.assert_relation_matches(gen, rr.transposed_vectorized(coarse, 3, 2, 1), len(coarse))
    tgt = ops.transposed_kernel_relation(y, x, kernel_size=2, stride=2)
    rr.assert_relation_matches(
        tgt, rr.transposed_vectorized(coarse, 2, 2, 0, 1, c), len(coarse), same_out_order=True
    )
    # every fine voxel is reached from exactly one coarse voxel
    assert tgt.edge_count == len(c)


@pytest.mark.parametrize("dilation", [1, 2, (1, 3, 2)])
def test_kernel_size_one_is_the_identity_relation(cloud, dilation):
    """A kernel_size-1 submanifold relation takes the identity route (no table probed): the
    same edges as the native probe builder, and a dense map of the same rows."""
    from lattice import _ext

    x = SparseTensor(cloud, mx.ones((len(cloud), 2)))
    rel = ops.submanifold_kernel_relation(x, kernel_size=1, dilation=dilation)
    assert rel.route.name == "cpu.identity"
    probed = _ext.relation_submanifold(x.coord_manager.table(x.coord_key), (1, 1, 1), rel.spec.dilation)
    e = rel.grouped_edges
    for got, want in zip((e.in_rows, e.out_rows, e.counts), probed[:3], strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    np.testing.assert_array_equal(np.asarray(rel.neighbor_map), np.arange(len(cloud)).reshape(-1, 1))
    assert rel.known_edge_count == len(cloud) and rel.n_out == len(cloud)
    w = mx.array(np.random.default_rng(0).normal(size=(3, 1, 1, 1, 2)).astype(np.float32))
    y = ops.subm_conv3d(x, w, kernel_size=1, dilation=dilation)
    want = np.asarray(x.feats) @ np.asarray(w).reshape(3, 2).T  # NumPy: MLX CUDA's empty matmul
    np.testing.assert_allclose(np.asarray(y.feats), want, rtol=1e-6)


# (the cached larger kernel, the requested one, dilation)
RESTRICTIONS = [(5, 3, 1), (5, (3, 1, 3), 1), (3, (1, 3, 1), 2), (7, 5, 1), ((5, 3, 5), (3, 3, 1), (1, 2, 1))]


@pytest.mark.parametrize("big,small,dilation", RESTRICTIONS, ids=_ids(RESTRICTIONS))
def test_submanifold_restricted_from_a_larger_cached_relation(cloud, big, small, dilation):
    """A submanifold relation whose offsets are among those of a larger cached one of the same
    set and dilation is cut from it (route ``cpu.restricted``, no table probed): the reference
    relation, and bit for bit the edges a fresh build gives (same order in every offset)."""
    x = SparseTensor(cloud, mx.ones((len(cloud), 1)))
    source = ops.submanifold_kernel_relation(x, kernel_size=big, dilation=dilation)
    rel = ops.submanifold_kernel_relation(x, kernel_size=small, dilation=dilation)
    assert rel.route.name == "cpu.restricted"
    rr.assert_relation_matches(rel, rr.submanifold(cloud, small, dilation), _n(cloud), same_out_order=True)
    _offsets_equal(rel, small, dilation)
    fresh = ops.submanifold_kernel_relation(cloud, kernel_size=small, dilation=dilation)
    assert fresh.route.name != "cpu.restricted"
    for got, want in zip(
        (rel.edges.in_rows, rel.edges.out_rows, rel.edges.counts),
        (fresh.edges.in_rows, fresh.edges.out_rows, fresh.edges.counts),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    # the forms of the relation it was cut from (edges on the CPU, a dense map on the GPU)
    assert (rel.built_edges is None, rel.built_map is None) == (
        source.built_edges is None,
        source.built_map is None,
    )


def test_restriction_takes_the_smallest_covering_relation_and_only_a_covering_one():
    from lattice.core.kernel import KernelSpec

    c = make_cloud("random_sparse")
    x = SparseTensor(c, mx.ones((len(c), 1)))
    manager, key = x.coord_manager, x.coord_key
    seven = ops.submanifold_kernel_relation(x, kernel_size=7)
    five = ops.submanifold_kernel_relation(x, kernel_size=5)
    assert seven.route.name != "cpu.restricted" and five.route.name == "cpu.restricted"
    assert manager.covering_relation(key, KernelSpec((3, 3, 1))) is five
    assert ops.submanifold_kernel_relation(x, kernel_size=(3, 3, 1)).route.name == "cpu.restricted"
    # another dilation, a kernel wider on one axis, or another set: built afresh
    assert ops.submanifold_kernel_relation(x, kernel_size=3, dilation=2).route.name != "cpu.restricted"
    assert ops.submanifold_kernel_relation(x, kernel_size=(9, 1, 1)).route.name != "cpu.restricted"
    y = SparseTensor(c, mx.ones((len(c), 1)))
    assert ops.submanifold_kernel_relation(y, kernel_size=3).route.name != "cpu.restricted"
    # a smaller cached kernel covers nothing larger
    assert ops.submanifold_kernel_relation(y, kernel_size=5).route.name != "cpu.restricted"


@pytest.mark.parametrize("big,small,dilation", RESTRICTIONS, ids=_ids(RESTRICTIONS))
def test_restriction_of_a_dense_map_gives_its_columns(cloud, big, small, dilation):
    """A covering relation held as a dense (N, K) map only (as the GPU builder makes it) gives
    the restricted relation as the same map's columns (a strided slice of the map seen as
    (N, *kernel)): the map a fresh build gives."""
    from lattice.core.coordinates import RelationCacheKey
    from lattice.core.kernel import KernelSpec
    from lattice.core.relation import KernelRelation

    x = SparseTensor(cloud, mx.ones((len(cloud), 1)))
    manager, key = x.coord_manager, x.coord_key
    built = ops.submanifold_kernel_relation(cloud, kernel_size=big, dilation=dilation)
    spec = KernelSpec(big, dilation=dilation)
    manager._relations[RelationCacheKey(key, None, spec, RelationKind.SUBMANIFOLD)] = KernelRelation(
        kind=RelationKind.SUBMANIFOLD,
        spec=spec,
        in_key=key,
        out_key=key,
        out_coords=x.coords,
        kernel_offsets=spec.offsets(),
        in_count=len(cloud),
        built_map=built.neighbor_map,
    )
    rel = ops.submanifold_kernel_relation(x, kernel_size=small, dilation=dilation)
    assert rel.route.name == "cpu.restricted" and rel.built_edges is None
    want = ops.submanifold_kernel_relation(cloud, kernel_size=small, dilation=dilation).neighbor_map
    np.testing.assert_array_equal(np.asarray(rel.neighbor_map), np.asarray(want))
    assert rel.neighbor_map.shape == (len(cloud), KernelSpec(small).volume)


def test_explain_names_the_restricted_route_and_why_not():
    c = make_cloud("dense_block")
    x = SparseTensor(c, mx.ones((len(c), 1)))
    route = lattice.explain(ops.submanifold_kernel_relation, x, kernel_size=3)
    assert route.name != "cpu.restricted"
    assert any(r.name == "cpu.restricted" and "no larger submanifold" in r.predicate for r in route.rejected)
    lattice.explain(ops.submanifold_kernel_relation, x, kernel_size=5)  # built and cached
    x = SparseTensor(c, mx.ones((len(c), 1)))
    ops.submanifold_kernel_relation(x, kernel_size=5)
    route = lattice.explain(ops.submanifold_kernel_relation, x, kernel_size=3)
    assert route.name == "cpu.restricted" and "at this kernel's offsets" in route.reason


@pytest.mark.parametrize("rows", ["as made", "sorted", "reversed"])
@pytest.mark.parametrize(
    "size,dilation", [(3, 1), (5, 1), (3, 2), ((3, 5, 3), (1, 2, 1)), ((3, 3, 1), 1), (3, (1, 1, 5))]
)
def test_submanifold_edges_come_in_the_walk_order(cloud, rows, size, dilation):
    """The order the convolutions' sums follow (their weight gradient adds edge by edge): per
    offset before the centre, edges by output row; the centre every (r, r) in row order; the
    mirror of offset k its edges reversed, by output row too (so every offset runs through the
    output in order: the convolution takes it in output-row blocks). Kernels of 27 offsets or more
    merge sorted rows (up to a z dilation of 4), the others probe the table: both give this
    order, whatever order the rows arrive in (sorted rows skip the sort)."""
    c = {"as made": cloud, "sorted": np.unique(cloud, axis=0), "reversed": np.unique(cloud, axis=0)[::-1]}[
        rows
    ]
    c = np.ascontiguousarray(c)
    x = SparseTensor(c, np.zeros((len(c), 1), np.float32))
    rel = ops.submanifold_kernel_relation(x, kernel_size=size, dilation=dilation)
    rr.assert_relation_matches(rel, rr.submanifold(c, size, dilation), len(c), same_out_order=True)
    ins, outs = np.asarray(rel.grouped_edges.in_rows), np.asarray(rel.grouped_edges.out_rows)
    b = list(rel.edge_offsets_host)
    K = len(b) - 1
    centre = K // 2
    np.testing.assert_array_equal(ins[b[centre] : b[centre + 1]], np.arange(len(c)))
    np.testing.assert_array_equal(outs[b[centre] : b[centre + 1]], np.arange(len(c)))
    for k in range(centre):
        o = outs[b[k] : b[k + 1]]
        assert (np.diff(o) > 0).all(), k
        m = slice(b[K - 1 - k], b[K - k])
        assert (np.diff(outs[m]) > 0).all(), K - 1 - k
        by_in = np.argsort(ins[b[k] : b[k + 1]])
        np.testing.assert_array_equal(ins[m], o[by_in])
        np.testing.assert_array_equal(outs[m], ins[b[k] : b[k + 1]][by_in])
