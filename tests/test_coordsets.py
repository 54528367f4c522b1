"""Coordinate functions (downsample, union, intersection, lookup, inverse map,
Morton codes and order) against the reference oracles."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import CLOUDS, make_cloud
from reference import coords as rc

from lattice.core import (
    CoordinateManager,
    CoordinateSet,
    SparseTensor,
    contains_coords,
    downsample_coords,
    intersection_coords,
    inverse_map,
    lookup_coords,
    morton_codes,
    morton_order,
    morton_sort_coords,
    union_coords,
)

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


def _live(cs: CoordinateSet) -> np.ndarray:
    assert isinstance(cs, CoordinateSet)
    assert len(cs) == cs.active_count and cs.active_rows.tolist() == [cs.active_count]
    return np.asarray(cs.coords)[: cs.active_count].astype(np.int64).reshape(-1, 4)


def _other(name: str) -> np.ndarray:
    """A second set overlapping ``make_cloud(name)`` in part: a shifted copy of half of it plus new rows."""
    c = make_cloud(name).astype(np.int64)
    half = c[::2].copy()
    half[:, 1] += np.where(np.arange(len(half)) % 2 == 0, 0, 1)  # half kept, half moved by one in x
    extra = rc.to_array([(0, 100, 100, 100), (1, -3, 4, -5), (2, 0, 0, 0)])
    out = np.unique(np.concatenate([half, extra]), axis=0)
    return out[np.random.default_rng(1).permutation(len(out))].astype(np.int32)


# ---- downsample -----------------------------------------------------------------------


@pytest.mark.parametrize("stride", [1, 2, 3, (1, 2, 3), (4, 1, 2)])
def test_downsample_matches_reference(cloud, stride):
    got = _live(downsample_coords(cloud, stride))
    np.testing.assert_array_equal(got, rc.downsample(cloud, stride))  # first-occurrence order


def test_downsample_of_tensor_uses_its_table():
    c = make_cloud("batched")
    x = SparseTensor(c, mx.zeros((len(c), 1)))
    np.testing.assert_array_equal(_live(downsample_coords(x, 2)), rc.downsample(c, 2))
    np.testing.assert_array_equal(_live(downsample_coords(mx.array(c), 2)), rc.downsample(c, 2))


def test_downsample_negative_coordinates_floor():
    c = np.array([[0, -1, -2, -3], [0, 0, 1, 2], [0, -4, -4, -4], [1, -1, -1, -1]], np.int32)
    np.testing.assert_array_equal(
        _live(downsample_coords(c, 2)), [[0, -1, -1, -2], [0, 0, 0, 1], [0, -2, -2, -2], [1, -1, -1, -1]]
    )


def test_downsample_rejects_bad_stride():
    with pytest.raises(ValueError, match=r"\[downsample_coords\] stride must be positive, got \(0, 0, 0\)"):
        downsample_coords(make_cloud("line"), 0)


# ---- union / intersection ----------------------------------------------------------------


@pytest.mark.parametrize("name", CLOUDS)
def test_union_matches_reference(name):
    cloud = make_cloud(name)
    other = _other(name)
    np.testing.assert_array_equal(_live(union_coords(cloud, other)), rc.union(cloud, other))
    np.testing.assert_array_equal(_live(union_coords(other, cloud)), rc.union(other, cloud))


@pytest.mark.parametrize("name", CLOUDS)
def test_intersection_matches_reference(name):
    cloud = make_cloud(name)
    other = _other(name)
    np.testing.assert_array_equal(_live(intersection_coords(cloud, other)), rc.intersection(cloud, other))
    np.testing.assert_array_equal(_live(intersection_coords(other, cloud)), rc.intersection(other, cloud))


def test_set_functions_accept_sets_and_tensors():
    a = make_cloud("random_sparse")
    b = _other("random_sparse")
    x = SparseTensor(a, mx.zeros((len(a), 1)))
    u = union_coords(x, b)
    np.testing.assert_array_equal(_live(u), rc.union(a, b))
    i = intersection_coords(u, x)  # a CoordinateSet as an argument
    np.testing.assert_array_equal(_live(i), rc.intersection(rc.union(a, b), a))
    assert len(i) == len(a)


def test_union_and_intersection_with_empty():
    a = make_cloud("plane")
    e = make_cloud("empty")
    np.testing.assert_array_equal(_live(union_coords(a, e)), a)
    np.testing.assert_array_equal(_live(union_coords(e, a)), a)
    assert len(intersection_coords(a, e)) == 0
    assert len(intersection_coords(e, a)) == 0
    assert len(union_coords(e, e)) == 0


# ---- lookup / contains / inverse map -------------------------------------------------------


def _queries(c: np.ndarray) -> np.ndarray:
    """Present rows, near misses (shifted by one on each axis and in batch), and far misses."""
    c = c.astype(np.int64)
    parts = [c[::2]]
    for axis in range(4):
        shifted = c[1::3].copy()
        shifted[:, axis] += 1
        parts.append(shifted)
    parts.append(rc.to_array([(0, 10**6, 0, 0), (7, 0, 0, 0), (0, -(10**6), -(10**6), -(10**6))]))
    q = np.concatenate(parts)
    return q[np.random.default_rng(0).permutation(len(q))].astype(np.int32)


def test_lookup_matches_reference(cloud):
    q = _queries(cloud)
    rows = lookup_coords(cloud, q)
    assert rows.dtype == mx.int32
    np.testing.assert_array_equal(np.asarray(rows), rc.lookup(cloud, q))
    np.testing.assert_array_equal(np.asarray(contains_coords(cloud, q)), rc.lookup(cloud, q) >= 0)


def test_lookup_every_row_finds_itself(cloud):
    np.testing.assert_array_equal(np.asarray(lookup_coords(cloud, cloud)), np.arange(len(cloud)))


def test_lookup_of_negative_batch_query_is_missing():
    c = make_cloud("line")
    q = np.array([[-1, 0, -1, 2], [0, 0, -1, 2]], np.int32)
    np.testing.assert_array_equal(np.asarray(lookup_coords(c, q)), rc.lookup(c, q))
    assert np.asarray(lookup_coords(c, q)).tolist()[0] == -1


def test_inverse_map_between_levels(cloud):
    x = SparseTensor(cloud, mx.zeros((len(cloud), 1)), 1)
    coarse = rc.downsample(cloud, 2)
    y = SparseTensor(coarse, mx.zeros((len(coarse), 1)), 2)
    got = np.asarray(inverse_map(x, y))
    np.testing.assert_array_equal(got, rc.inverse_map(cloud, coarse, 1, 2))
    assert (got >= 0).all()  # every fine row lies in its own downsampled voxel
    # anisotropic levels: source stride (1, 2, 1), target stride (2, 4, 3)
    c2 = rc.downsample(cloud, (2, 2, 3))
    z = SparseTensor(c2, mx.zeros((len(c2), 1)), (2, 4, 3))
    w = SparseTensor(cloud, mx.zeros((len(cloud), 1)), (1, 2, 1))
    np.testing.assert_array_equal(
        np.asarray(inverse_map(w, z)), rc.inverse_map(cloud, c2, (1, 2, 1), (2, 4, 3))
    )


def test_inverse_map_plain_arrays_is_a_lookup():
    a = make_cloud("random_sparse")
    b = _other("random_sparse")
    np.testing.assert_array_equal(np.asarray(inverse_map(b, a)), rc.lookup(a, b))


def test_inverse_map_rejects_non_multiple_strides():
    c = make_cloud("line")
    x = SparseTensor(c, mx.zeros((len(c), 1)), 2)
    y = SparseTensor(rc.downsample(c, 2), mx.zeros((len(rc.downsample(c, 2)), 1)), 3)
    with pytest.raises(ValueError, match=r"\[inverse_map\] target stride \(3, 3, 3\) must be a multiple"):
        inverse_map(x, y)


# ---- Morton ----------------------------------------------------------------------------------


def test_morton_codes_match_reference(cloud):
    codes = morton_codes(cloud)
    assert codes.dtype == mx.uint64
    np.testing.assert_array_equal(np.asarray(codes), rc.morton_codes(cloud))


def test_morton_codes_hand_checked():
    b = rc.MORTON_BIAS
    c = np.array(
        [
            [0, -b, -b, -b],
            [0, 1 - b, -b, -b],
            [0, -b, 1 - b, -b],
            [0, -b, -b, 1 - b],
            [0, b - 1, b - 1, b - 1],
        ],
        np.int32,
    )
    got = np.asarray(morton_codes(c)).tolist()
    assert got[:4] == [0, 0b100, 0b010, 0b001]  # x in the highest interleaved position
    assert got[4] == 2**63 - 1


def test_morton_order_matches_reference(cloud):
    order = np.asarray(morton_order(cloud))
    np.testing.assert_array_equal(order, rc.morton_order(cloud))
    s, o = morton_sort_coords(cloud)
    np.testing.assert_array_equal(np.asarray(o), order)
    np.testing.assert_array_equal(np.asarray(s), np.asarray(cloud)[order].reshape(-1, 4))


def test_morton_order_is_stable_for_equal_codes():
    c = np.array([[1, 0, 0, 0], [0, 5, 5, 5], [0, 5, 5, 5], [0, 0, 0, 0], [1, 0, 0, 0]], np.int32)
    np.testing.assert_array_equal(np.asarray(morton_order(c)), [3, 1, 2, 0, 4])


@pytest.mark.parametrize("value", [2**20, -(2**20) - 1, INT32_MAX, INT32_MIN])
def test_morton_rejects_out_of_range(value):
    c = np.array([[0, 0, 0, 0], [0, 0, value, 0]], np.int32)
    with pytest.raises(
        ValueError, match=r"\[morton_codes\] coordinates must lie in \[-2\^20, 2\^20\).*row 1"
    ):
        morton_codes(c)
    with pytest.raises(ValueError, match="morton"):
        morton_order(c)


# ---- packing limits, no dense grid -------------------------------------------------------------


def test_extreme_but_packable_span_works():
    """x over the whole int32 range with y, z spans keeping the product below 2^64."""
    c = np.array(
        [[0, INT32_MIN, 0, 0], [0, INT32_MAX, 2**20, 2**10], [1, 0, 5, 7], [0, -1, 2**19, 3]], np.int32
    )
    q = np.concatenate([c, c + np.array([0, 0, 1, 0], np.int32)[None]]).astype(np.int32)
    np.testing.assert_array_equal(np.asarray(lookup_coords(c, q)), rc.lookup(c, q))
    np.testing.assert_array_equal(_live(union_coords(c, q)), rc.union(c, q))


def test_span_too_large_to_pack_raises():
    c = np.array([[0, INT32_MIN, 0, 0], [0, INT32_MAX, INT32_MAX, INT32_MAX]], np.int32)
    msg = r"coordinates span too large to pack into a 64-bit key: batch 0\.\.0, x -2147483648\.\.2147483647"
    with pytest.raises(ValueError, match=r"\[SparseTensor\] " + msg):
        SparseTensor(c, np.zeros((2, 1), np.float32))
    with pytest.raises(ValueError, match=msg):
        lookup_coords(c, c)
    with pytest.raises(ValueError, match=msg):
        CoordinateManager().insert(c)
    # a union whose combined box is too large, although each side packs
    a = np.array([[0, INT32_MIN, 0, 0], [0, INT32_MAX, 0, 0]], np.int32)
    b = np.array([[0, 0, INT32_MIN, INT32_MIN], [0, 0, INT32_MAX, INT32_MAX]], np.int32)
    with pytest.raises(ValueError, match=r"\[union_coords\] coordinates span too large"):
        union_coords(a, b)


# ---- the real scan ----------------------------------------------------------------------------


def test_scan_coordinate_functions(kitti_coords):
    c = kitti_coords
    np.testing.assert_array_equal(
        _live(downsample_coords(c, 2)),
        rc.unique_first_vectorized(np.concatenate([c[:, :1], np.floor_divide(c[:, 1:], 2)], axis=1))[0],
    )
    q = _queries(c)
    np.testing.assert_array_equal(np.asarray(lookup_coords(c, q)), rc.lookup_vectorized(c, q))
    shifted = c.copy()
    shifted[:, 3] += 1
    inter = _live(intersection_coords(c, shifted))
    keep = rc.lookup_vectorized(shifted, c) >= 0
    np.testing.assert_array_equal(inter, c[keep])
    uni = _live(union_coords(c, shifted))
    np.testing.assert_array_equal(uni, np.concatenate([c, shifted[rc.lookup_vectorized(c, shifted) < 0]]))
    order = np.asarray(morton_order(c))
    codes = np.asarray(morton_codes(c))
    np.testing.assert_array_equal(order, np.lexsort((np.arange(len(c)), codes, c[:, 0])))
    sample = np.random.default_rng(0).choice(len(c), 500, replace=False)
    np.testing.assert_array_equal(codes[sample], rc.morton_codes(c[sample]))


def test_tensor_inputs_use_only_active_rows():
    c = make_cloud("batched")
    buf = np.concatenate([c, c[:7]])  # rows past active_rows repeat live rows
    x = SparseTensor(buf, mx.zeros((len(buf), 1)), active_rows=len(c))
    np.testing.assert_array_equal(_live(downsample_coords(x, 2)), rc.downsample(c, 2))
    q = _queries(c)
    np.testing.assert_array_equal(np.asarray(lookup_coords(x, q)), rc.lookup(c, q))
    np.testing.assert_array_equal(np.asarray(lookup_coords(c, x)), np.arange(len(c)))
    np.testing.assert_array_equal(np.asarray(morton_order(x)), rc.morton_order(c))
    np.testing.assert_array_equal(_live(union_coords(x, x)), c)
