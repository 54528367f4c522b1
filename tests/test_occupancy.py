"""Occupancy downsample / expand and child coordinates against the reference oracles."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import CLOUDS, make_cloud
from reference import occupancy as ro
from reference.coords import to_array

import lattice
from lattice.core import (
    OccupancyExpansion,
    SparseOccupancy,
    child_coords_from_indices,
    occupancy_downsample,
    occupancy_expand,
)


def _np(a) -> np.ndarray:
    return np.asarray(a).astype(np.int64)


def _check_buffers(record, capacity: int, live: int, row_fields: dict[str, int]) -> None:
    """Shapes and dtypes of a fixed-capacity record, and its padding rows."""
    assert record.capacity == capacity and record.coords.shape == (capacity, 4)
    assert record.coords.dtype == mx.int32
    assert record.active_rows.shape == (1,) and record.active_rows.dtype == mx.int32
    assert int(record.active_rows.item()) == live and record.active_count is record.active_rows
    assert not _np(record.coords)[live:].any()
    for name, fill in row_fields.items():
        v = getattr(record, name)
        assert v.shape == (capacity,) and v.dtype == mx.int32, name
        assert (_np(v)[live:] == fill).all(), name


def _with_duplicates(c: np.ndarray) -> np.ndarray:
    """``c`` with some rows repeated later (their bits OR, their parents stay first-seen)."""
    return np.concatenate([c, c[::3]]) if len(c) else c


# ---- occupancy_downsample ------------------------------------------------------------------


@pytest.mark.parametrize("name", CLOUDS)
@pytest.mark.parametrize("duplicates", [False, True])
def test_downsample_matches_reference(name, duplicates):
    c = make_cloud(name)
    if duplicates:
        c = _with_duplicates(c)
    occ = occupancy_downsample(c)
    assert isinstance(occ, SparseOccupancy)
    parents, masks = ro.occupancy_downsample(c)
    _check_buffers(occ, len(c), len(parents), {"occupancy": 0})
    np.testing.assert_array_equal(_np(occ.coords)[: len(parents)], to_array(parents))
    np.testing.assert_array_equal(_np(occ.occupancy)[: len(parents)], masks)


def test_downsample_of_a_real_scan(kitti_coords):
    occ = occupancy_downsample(kitti_coords)
    parents, masks = ro.occupancy_downsample(kitti_coords)
    m = int(occ.active_count.item())
    np.testing.assert_array_equal(_np(occ.coords)[:m], to_array(parents))
    np.testing.assert_array_equal(_np(occ.occupancy)[:m], masks)


@pytest.mark.parametrize(
    "active", [0, 1, 17, 300, 10_000, mx.array([17], dtype=mx.int32), mx.array(17), np.array([17], np.int32)]
)
def test_downsample_reads_the_first_active_rows(active):
    c = make_cloud("random_sparse")
    occ = occupancy_downsample(mx.array(c), active)
    n = min(int(np.asarray(active).reshape(())), len(c))  # past the buffer: every row
    parents, masks = ro.occupancy_downsample(c[:n])
    _check_buffers(occ, len(c), len(parents), {"occupancy": 0})
    np.testing.assert_array_equal(_np(occ.coords)[: len(parents)], to_array(parents))
    np.testing.assert_array_equal(_np(occ.occupancy)[: len(parents)], masks)


def test_downsample_bits_and_negative_coordinates():
    c = np.array([[0, 1, 1, 1], [0, 0, 0, 0], [0, -1, 2, 3], [1, 5, 5, 5], [0, 1, 1, 1]], np.int32)
    occ = occupancy_downsample(c)
    assert int(occ.active_count.item()) == 3
    np.testing.assert_array_equal(_np(occ.coords)[:3], [[0, 0, 0, 0], [0, -1, 1, 1], [1, 2, 2, 2]])
    np.testing.assert_array_equal(_np(occ.occupancy), [1 | 1 << 7, 1 << 5, 1 << 7, 0, 0])


def test_downsample_of_int64_coords_gives_int32():
    c = make_cloud("batched")
    occ = occupancy_downsample(mx.array(c.astype(np.int64)))
    parents, masks = ro.occupancy_downsample(c)
    assert occ.coords.dtype == mx.int32
    np.testing.assert_array_equal(_np(occ.coords)[: len(parents)], to_array(parents))


def test_downsample_routes_through_the_hash_set():
    c = make_cloud("plane")
    assert lattice.explain(occupancy_downsample, c).name == "cpu.hash_set"


# ---- occupancy_expand ----------------------------------------------------------------------


def _random_masks(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    masks = rng.integers(0, 256, n)
    masks[::5] = 0  # parents with no child
    masks[1::7] = 255  # parents with every child
    return masks.astype(np.int32)


@pytest.mark.parametrize("name", CLOUDS)
def test_expand_matches_reference(name):
    parents = make_cloud(name)
    masks = _random_masks(len(parents), len(name))
    exp = occupancy_expand(parents, masks)
    assert isinstance(exp, OccupancyExpansion)
    children, rows, ids = ro.occupancy_expand(parents, masks)
    _check_buffers(exp, 8 * len(parents), len(children), {"parent_rows": 0, "child_indices": 0})
    m = len(children)
    np.testing.assert_array_equal(_np(exp.coords)[:m], to_array(children))
    np.testing.assert_array_equal(_np(exp.parent_rows)[:m], rows)
    np.testing.assert_array_equal(_np(exp.child_indices)[:m], ids)


@pytest.mark.parametrize("active", [0, 1, 9, 10_000, mx.array([9], dtype=mx.int32)])
def test_expand_reads_the_first_active_parents(active):
    parents = make_cloud("isolated")
    masks = _random_masks(len(parents), 3)
    exp = occupancy_expand(mx.array(parents), mx.array(masks), active)
    n = min(int(np.asarray(active).reshape(())), len(parents))
    children, rows, ids = ro.occupancy_expand(parents[:n], masks[:n])
    _check_buffers(exp, 8 * len(parents), len(children), {"parent_rows": 0, "child_indices": 0})
    np.testing.assert_array_equal(_np(exp.coords)[: len(children)], to_array(children))
    np.testing.assert_array_equal(_np(exp.parent_rows)[: len(children)], rows)


def test_expand_ignores_bits_above_seven():
    parents = np.array([[0, 0, 0, 0], [2, -1, 3, 0]], np.int32)
    exp = occupancy_expand(parents, np.array([0b1_0000_0001, 0b111 << 8], np.int32))
    assert int(exp.active_count.item()) == 1
    np.testing.assert_array_equal(_np(exp.coords)[:1], [[0, 0, 0, 0]])


@pytest.mark.parametrize("name", CLOUDS)
def test_expand_of_downsample_gives_the_set_back(name):
    c = make_cloud(name)
    occ = occupancy_downsample(c)
    exp = occupancy_expand(occ.coords, occ.occupancy, occ.active_rows)
    m = int(exp.active_count.item())
    assert m == len(c)
    got = _np(exp.coords)[:m]
    assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, c.tolist()))
    # each child names its parent row and its id
    parents = _np(occ.coords)[_np(exp.parent_rows)[:m]]
    np.testing.assert_array_equal(got[:, 0], parents[:, 0])
    np.testing.assert_array_equal(got[:, 1:] // 2, parents[:, 1:])
    np.testing.assert_array_equal(_np(exp.child_indices)[:m], [ro.child_of(tuple(r)) for r in got.tolist()])


# ---- child_coords_from_indices -------------------------------------------------------------


@pytest.mark.parametrize("name", CLOUDS)
def test_child_coords_match_reference(name):
    parents = make_cloud(name)
    ids = np.random.default_rng(len(name)).integers(-9, 17, len(parents)).astype(np.int32)
    got = child_coords_from_indices(mx.array(parents), mx.array(ids))
    assert got.dtype == mx.int32 and got.shape == (len(parents), 4)
    want = [ro.child_coord(p, int(k)) for p, k in zip(map(tuple, parents.tolist()), ids, strict=True)]
    np.testing.assert_array_equal(_np(got), to_array(want))


# ---- checks --------------------------------------------------------------------------------


def test_bad_arguments_raise():
    c = make_cloud("line")
    with pytest.raises(ValueError, match=r"\[occupancy_expand\] occupancy must have 25 entries"):
        occupancy_expand(c, np.zeros(3, np.int32))
    with pytest.raises(ValueError, match=r"\[occupancy_expand\] occupancy must be a 1-D integer array"):
        occupancy_expand(c, np.zeros((25, 1), np.int32))
    with pytest.raises(ValueError, match=r"\[child_coords_from_indices\] child_indices must have 25"):
        child_coords_from_indices(c, np.zeros(2, np.int32))
    with pytest.raises(ValueError, match=r"\[occupancy_downsample\] active_rows must have shape"):
        occupancy_downsample(c, mx.array([1, 2], dtype=mx.int32))
    with pytest.raises(TypeError, match=r"\[occupancy_downsample\] active_rows must be an int"):
        occupancy_downsample(c, 2.5)
    with pytest.raises(ValueError, match=r"\[occupancy_downsample\] coords must have shape \(N, 4\)"):
        occupancy_downsample(np.zeros((3, 3), np.int32))


def test_records_check_their_fields():
    coords = mx.zeros((2, 4), mx.int32)
    count = mx.array([1], dtype=mx.int32)
    with pytest.raises(ValueError, match=r"\[SparseOccupancy\] occupancy must be a \(2,\) mlx.core.int32"):
        SparseOccupancy(coords, count, mx.zeros((3,), mx.int32))
    with pytest.raises(ValueError, match=r"\[SparseOccupancy\] active_rows must be a \(1,\) int32"):
        SparseOccupancy(coords, mx.array(1), mx.zeros((2,), mx.int32))
    with pytest.raises(ValueError, match=r"\[OccupancyExpansion\] coords must be an \(N, 4\)"):
        OccupancyExpansion(
            mx.zeros((2, 3), mx.int32), count, mx.zeros((2,), mx.int32), mx.zeros((2,), mx.int32)
        )
    rec = OccupancyExpansion(coords, count, mx.zeros((2,), mx.int32), mx.zeros((2,), mx.int32))
    assert rec.capacity == 2 and int(rec.active_count.item()) == 1
