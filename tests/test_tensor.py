"""SparseTensor: validation (with the message), sizes, batches, derived tensors."""

from __future__ import annotations

import dataclasses

import mlx.core as mx
import numpy as np
import pytest
from conftest import make_cloud

import lattice
from lattice.core import CoordinateManager, SparseTensor, SparseTensorComponents

C = np.array([[0, 1, 2, 3], [2, 0, 0, 0], [0, 1, 2, 4], [2, -5, 7, -1]], np.int32)


def _feats(n=4, c=3, dtype=np.float32):
    return np.arange(n * c, dtype=dtype).reshape(n, c)


# ---- validation --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "coords,feats,kwargs,exc,message",
    [
        (
            C[:, :3],
            _feats(),
            {},
            ValueError,
            r"^\[SparseTensor\] coords must have shape \(N, 4\) as \(batch, x, y, z\), got \(4, 3\)",
        ),
        (
            C.reshape(-1),
            _feats(),
            {},
            ValueError,
            r"^\[SparseTensor\] coords must have shape \(N, 4\).*got \(16,\)",
        ),
        (C.reshape(1, 4, 4), _feats(), {}, ValueError, r"^\[SparseTensor\] coords must have shape \(N, 4\)"),
        (
            C.astype(np.float32),
            _feats(),
            {},
            TypeError,
            r"^\[SparseTensor\] coords must hold integers, got dtype float32",
        ),
        (
            mx.array(C.astype(np.float32)),
            _feats(),
            {},
            TypeError,
            r"^\[SparseTensor\] coords must be int32, got .*float32",
        ),
        (
            C.astype(np.int64) * 2**33,
            _feats(),
            {},
            ValueError,
            r"^\[SparseTensor\] coords values must fit int32",
        ),
        (
            mx.array(C.astype(np.int64) * 2**33),
            _feats(),
            {},
            ValueError,
            r"^\[SparseTensor\] coords values must fit int32, got -42949672960\.\.60129542144",
        ),
        (
            mx.array(np.array([[0, 3_000_000_000, 0, 0]], np.uint32)),
            _feats(1),
            {},
            ValueError,
            r"^\[SparseTensor\] coords values must fit int32, got 0\.\.3000000000",
        ),
        (
            C,
            _feats().reshape(-1),
            {},
            ValueError,
            r"^\[SparseTensor\] feats must have shape \(N, C\), got \(12,\)",
        ),
        (
            C,
            _feats()[:3],
            {},
            ValueError,
            r"^\[SparseTensor\] feats rows must match coords rows, got 3 and 4",
        ),
        (
            C,
            np.ones((4, 2), bool),
            {},
            TypeError,
            r"^\[SparseTensor\] feats must be a real numeric dtype, got .*bool",
        ),
        (
            np.concatenate([C, C[2:3]]),
            _feats(5),
            {},
            ValueError,
            r"^\[SparseTensor\] duplicate active coordinates: rows 2 and 4 both hold \(0, 1, 2, 4\)",
        ),
        (
            C * np.array([[-1, 1, 1, 1]], np.int32),
            _feats(),
            {},
            ValueError,
            r"^\[SparseTensor\] batch indices must be non-negative, got -2 at row 1",
        ),
        (
            C,
            _feats(),
            {"stride": 0},
            ValueError,
            r"^\[SparseTensor\] stride must be positive, got \(0, 0, 0\)",
        ),
        (
            C,
            _feats(),
            {"stride": (2, -1, 2)},
            ValueError,
            r"^\[SparseTensor\] stride must be positive, got \(2, -1, 2\)",
        ),
        (
            C,
            _feats(),
            {"stride": (2, 2)},
            ValueError,
            r"^\[SparseTensor\] stride must be an int or 3 ints, got \(2, 2\)",
        ),
        (
            C,
            _feats(),
            {"stride": 1.5},
            TypeError,
            r"^\[SparseTensor\] stride must be an int or 3 ints, got 1.5",
        ),
        (
            C,
            _feats(),
            {"stride": True},
            TypeError,
            r"^\[SparseTensor\] stride must be an int or 3 ints, got True",
        ),
        (
            C,
            _feats(),
            {"active_rows": 5},
            ValueError,
            r"^\[SparseTensor\] active_rows must be in \[0, 4\], got 5",
        ),
        (
            C,
            _feats(),
            {"active_rows": -1},
            ValueError,
            r"^\[SparseTensor\] active_rows must be in \[0, 4\], got -1",
        ),
        (
            C,
            _feats(),
            {"batch_counts": [2, 2]},
            ValueError,
            r"^\[SparseTensor\] batch_counts \[2, 2\] do not match the rows per batch \[2, 0, 2\]",
        ),
        (
            C,
            _feats(),
            {"batch_counts": [2, 0, 1, 1]},
            ValueError,
            r"^\[SparseTensor\] batch_counts .* do not match",
        ),
        (
            C,
            _feats(),
            {"batch_counts": [3, -1, 2]},
            ValueError,
            r"^\[SparseTensor\] batch_counts must be non-negative",
        ),
    ],
)
def test_sparse_tensor_rejects_bad_input(coords, feats, kwargs, exc, message):
    with pytest.raises(exc, match=message):
        SparseTensor(coords, feats, **kwargs)


def test_coord_key_checks():
    m1, m2 = CoordinateManager(), CoordinateManager()
    k1 = m1.insert(C)
    k2 = m2.insert(C)
    with pytest.raises(
        ValueError, match=r"^\[SparseTensor\] coord_manager is required when coord_key is set"
    ):
        SparseTensor(C, _feats(), coord_key=k1)
    with pytest.raises(
        ValueError,
        match=rf"^\[SparseTensor\] coord_key {k2.id} \(manager {m2.id}\) "
        rf"does not belong to coord_manager {m1.id}",
    ):
        SparseTensor(C, _feats(), coord_key=k2, coord_manager=m1)
    with pytest.raises(
        ValueError, match=r"^\[SparseTensor\] coord_key stride \(1, 1, 1\) differs from stride \(2, 2, 2\)"
    ):
        SparseTensor(C, _feats(), 2, coord_key=k1, coord_manager=m1)
    with pytest.raises(ValueError, match=r"^\[SparseTensor\] coord_key holds 4 rows, tensor has 3"):
        SparseTensor(C[:3], _feats(3), coord_key=k1, coord_manager=m1)
    x = SparseTensor(C, _feats(), coord_key=k1, coord_manager=m1)
    assert x.coord_key is k1 and x.coord_manager is m1


# ---- sizes and batches ------------------------------------------------------------------------


def test_sizes_and_attributes():
    x = SparseTensor(C, _feats(c=5), (1, 2, 3))
    assert x.stride == (1, 2, 3)
    assert x.coords.dtype == mx.int32
    assert (x.capacity, x.active_count, x.channels, x.shape, len(x)) == (4, 4, 5, (4, 5), 4)
    assert x.dtype == mx.float32
    assert x.coord_key.stride == (1, 2, 3)
    assert x.coord_manager.size(x.coord_key) == 4
    np.testing.assert_array_equal(np.asarray(x.coord_manager.coords(x.coord_key)), C)
    assert "rows=4" in repr(x) and "channels=5" in repr(x)


def test_int64_and_mx_coords_are_accepted():
    for coords in (C.astype(np.int64), mx.array(C), mx.array(C.astype(np.int16)), C.tolist()):
        x = SparseTensor(coords, _feats())
        assert x.coords.dtype == mx.int32
        np.testing.assert_array_equal(np.asarray(x.coords), C)


def test_batches_with_an_empty_member():
    x = SparseTensor(C, _feats())
    np.testing.assert_array_equal(np.asarray(x.batch_indices), [0, 2, 0, 2])
    assert x.batch_counts == (2, 0, 2)  # a tuple of ints, inferred from the batch column
    assert x.batch_size == 3
    rows = [np.asarray(r).tolist() for r in x.batch_rows]
    assert rows == [[0, 2], [], [1, 3]]
    coords = x.decomposed_coordinates
    feats = x.decomposed_features
    assert [c.shape for c in coords] == [(2, 3), (0, 3), (2, 3)]
    assert [f.shape for f in feats] == [(2, 3), (0, 3), (2, 3)]
    for b, (c, f) in enumerate(zip(coords, feats, strict=True)):
        sel = C[:, 0] == b
        np.testing.assert_array_equal(np.asarray(c), C[sel, 1:])
        np.testing.assert_array_equal(np.asarray(f), _feats()[sel])


def test_explicit_batch_counts_may_add_trailing_empty_members():
    x = SparseTensor(C, _feats(), batch_counts=[2, 0, 2, 0, 0])
    assert x.batch_counts == (2, 0, 2, 0, 0)
    assert x.batch_size == 5
    assert [len(r) for r in x.batch_rows] == [2, 0, 2, 0, 0]
    assert x.export_components().batch_counts == (2, 0, 2, 0, 0)


def test_empty_and_single_point_tensors():
    e = SparseTensor(make_cloud("empty"), np.zeros((0, 4), np.float32))
    assert (e.capacity, e.active_count, e.shape, e.batch_size) == (0, 0, (0, 4), 0)
    assert e.batch_rows == [] and e.decomposed_coordinates == []
    s = SparseTensor(make_cloud("single"), np.ones((1, 2), np.float32))
    assert s.shape == (1, 2) and s.batch_size == 1


def test_active_rows_ignores_rows_past_the_count():
    coords = np.concatenate([C, C[:2]])  # rows 4, 5 repeat rows 0, 1 but are not active
    x = SparseTensor(coords, _feats(6), active_rows=4)
    assert (x.capacity, x.active_count, x.shape) == (6, 4, (4, 3))
    assert x.coord_manager.size(x.coord_key) == 4
    np.testing.assert_array_equal(np.asarray(x.batch_counts), [2, 0, 2])
    y = SparseTensor(coords, _feats(6), active_rows=mx.array(4, dtype=mx.int32))
    assert y.active_count == 4
    comps = x.export_components()  # the whole buffers and the live-row count
    assert comps.coords.shape == (6, 4) and comps.feats.shape == (6, 3)
    assert comps.active_rows.dtype == mx.int32 and comps.active_rows.tolist() == [4]
    y = SparseTensor.from_components(comps)
    assert (y.capacity, y.active_count) == (6, 4) and y.same_rows(x) and not y.same_coords(x)


# ---- derived tensors --------------------------------------------------------------------------


def test_replace_keeps_the_key_when_coords_are_unchanged():
    x = SparseTensor(C, _feats())
    y = x.replace(feats=_feats() * 2)
    assert y.coord_key == x.coord_key and y.coord_manager is x.coord_manager
    np.testing.assert_array_equal(np.asarray(y.feats), _feats() * 2)
    assert y.same_coords(x)
    z = x.replace(coords=C[::-1].copy(), stride=2)
    assert z.coord_manager is x.coord_manager and z.coord_key != x.coord_key
    assert z.stride == (2, 2, 2) and not z.same_coords(x)
    with pytest.raises(ValueError, match=r"^\[replace\] changing the stride needs new coords"):
        x.replace(stride=2)
    with pytest.raises(ValueError, match=r"^\[SparseTensor\] feats rows must match"):
        x.replace(feats=_feats(3))


def test_reuse_coords_from():
    x = SparseTensor(C, _feats())
    f = x.replace(feats=_feats() + 1)
    y = f.reuse_coords_from(x)
    assert y.coord_key == x.coord_key and y.coord_manager is x.coord_manager and y.coords is x.coords
    np.testing.assert_array_equal(np.asarray(y.feats), _feats() + 1)
    msg = r"^\[reuse_coords_from\] sparse tensor coordinates must match"
    for other in (
        SparseTensor(C.copy(), _feats() + 1),  # equal rows, another manager
        SparseTensor(C, _feats() + 1, coord_manager=x.coord_manager),  # equal rows, another key
        SparseTensor(C[::-1].copy(), _feats() + 1),  # other order
        SparseTensor(C[:3], _feats(3)),
    ):
        with pytest.raises(ValueError, match=msg):
            other.reuse_coords_from(x)


def test_same_coords_is_identity_and_same_rows_compares_rows():
    x = SparseTensor(C, _feats())
    assert x.same_coords(x) and x.same_rows(x)
    y = x.replace(feats=_feats(c=1))  # the same key and manager
    assert y.same_coords(x) and y.same_rows(x)
    for equal in (
        SparseTensor(C.copy(), _feats(c=1)),  # another manager, same rows
        SparseTensor(mx.array(C), _feats()),
        SparseTensor(x.coords, _feats()),  # the same array object, another manager
        SparseTensor(C, _feats(), coord_manager=x.coord_manager),  # same manager, another key
    ):
        assert not x.same_coords(equal) and x.same_rows(equal) and equal.same_rows(x)
    for other in (
        SparseTensor(C[[1, 0, 2, 3]], _feats()),  # same set, other order
        SparseTensor(C, _feats(), 2),
        SparseTensor(C[:3], _feats(3)),
    ):
        assert not x.same_coords(other) and not x.same_rows(other)
    empty = SparseTensor(np.zeros((0, 4), np.int32), np.zeros((0, 2), np.float32))
    assert empty.same_coords(empty) and not empty.same_coords(
        empty.replace(coords=np.zeros((0, 4), np.int32))
    )
    assert empty.same_rows(SparseTensor(np.zeros((0, 4), np.int32), np.zeros((0, 1), np.float32)))


@pytest.mark.parametrize("dtype", [mx.float16, mx.bfloat16, mx.float32, mx.int32])
def test_astype(dtype):
    x = SparseTensor(C, _feats())
    y = x.astype(dtype)
    assert y.dtype == dtype and y.coord_key == x.coord_key
    np.testing.assert_array_equal(np.asarray(y.feats.astype(mx.float32)), _feats())


def test_export_and_from_components_round_trip():
    x = SparseTensor(C, _feats(), (2, 4, 2))
    comps = x.export_components()
    assert isinstance(comps, SparseTensorComponents)
    assert [f.name for f in dataclasses.fields(comps)] == [
        "coords",
        "feats",
        "active_rows",
        "stride",
        "batch_counts",
    ]
    assert comps.stride == (2, 4, 2) and comps.batch_counts == (2, 0, 2)
    assert comps.active_rows.shape == (1,) and comps.active_rows.tolist() == [4]
    with pytest.raises(dataclasses.FrozenInstanceError):
        comps.stride = (1, 1, 1)
    y = SparseTensor.from_components(comps)
    assert y.stride == (2, 4, 2) and y.same_rows(x) and y.coord_manager is not x.coord_manager
    np.testing.assert_array_equal(np.asarray(y.feats), _feats())
    np.testing.assert_array_equal(np.asarray(y.batch_counts), [2, 0, 2])
    # a dict of the same names still works; stride as arrays (as read back from an NPZ file)
    m = CoordinateManager()
    plain = {"coords": C, "feats": _feats(), "batch_counts": [2, 0, 2]}
    for stride in (np.array([2, 4, 2], np.int32), mx.array([2, 4, 2])):
        z = SparseTensor.from_components({**plain, "stride": stride}, coord_manager=m)
        assert z.stride == (2, 4, 2) and z.coord_manager is m
    with pytest.raises(ValueError, match=r"^\[from_components\] missing components: \['feats'\]"):
        SparseTensor.from_components({"coords": C})


def test_components_check_and_normalise_their_fields():
    coords, feats = mx.array(C), mx.array(_feats())
    c = SparseTensorComponents(coords, feats, None, 2, [2, 0, 2])
    assert c.active_rows.tolist() == [4] and c.stride == (2, 2, 2) and c.batch_counts == (2, 0, 2)
    assert SparseTensorComponents(coords, feats, 3).active_rows.tolist() == [3]
    assert SparseTensorComponents(coords, feats, mx.array(3)).active_rows.shape == (1,)
    assert SparseTensorComponents(coords.astype(mx.int64), feats, 4).coords.dtype == mx.int64
    with pytest.raises(ValueError, match=r"coords must have shape \(N, 4\)\."):
        SparseTensorComponents(coords[:, :3], feats, 4)
    with pytest.raises(ValueError, match=r"coords must be int32 or int64\."):
        SparseTensorComponents(coords.astype(mx.float32), feats, 4)
    with pytest.raises(ValueError, match="feats rows must match coords rows, got 3 and 4"):
        SparseTensorComponents(coords, feats[:3], 4)
    with pytest.raises(ValueError, match=r"active_rows must be in \[0, 4\], got 5"):
        SparseTensorComponents(coords, feats, 5)
    with pytest.raises(ValueError, match="batch_counts must be non-negative"):
        SparseTensorComponents(coords, feats, 4, 1, (5, -1))


def test_decomposed_coordinates_and_features():
    coords = np.concatenate([C, C[:1] + [0, 7, 7, 7]])  # a fifth row, past active_rows
    x = SparseTensor(coords, _feats(5), active_rows=4)
    cs, fs = x.decomposed_coordinates_and_features
    assert len(cs) == len(fs) == 3  # batches 0, 1 (empty), 2
    for got, want in zip(cs, x.decomposed_coordinates, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for got, want in zip(fs, x.decomposed_features, strict=True):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert cs[1].shape == (0, 3) and fs[1].shape == (0, 3)
    e = SparseTensor(np.zeros((0, 4), np.int32), np.zeros((0, 2), np.float32))
    assert e.decomposed_coordinates_and_features == ([], [])


def test_top_level_exports():
    assert lattice.SparseTensor is SparseTensor
    assert lattice.core.SparseTensor is SparseTensor


def test_reversed_numpy_views_are_taken():
    """MLX refuses NumPy arrays with a negative stride (a reversed view, even a one-row one
    NumPy calls contiguous): coordinates, features, points, batch indices and voxelize's
    features given so are copied first and give what their copies give."""
    from lattice import ops

    rng = np.random.default_rng(0)
    coords = np.unique(np.c_[rng.integers(0, 2, 40), rng.integers(-5, 5, (40, 3))].astype(np.int32), axis=0)
    feats = rng.normal(size=(len(coords), 3)).astype(np.float32)
    for rows in (slice(None, None, -1), slice(0, 1)):  # every row reversed; one row of a reversed view
        c, f = coords[::-1][rows], feats[::-1][rows]
        x = SparseTensor(c, f)
        np.testing.assert_array_equal(np.asarray(x.coords[: x.active_count]), np.ascontiguousarray(c))
        np.testing.assert_array_equal(np.asarray(x.feats[: x.active_count]), np.ascontiguousarray(f))
    pts = rng.uniform(-1, 1, (50, 3))
    batch = np.repeat(np.arange(2), 25)
    for dtype in (np.float32, np.float64):
        p = pts.astype(dtype)
        got = ops.voxelize(p[::-1], p[::-1], 0.25, batch_indices=batch[::-1])
        want = ops.voxelize(p[::-1].copy(), p[::-1].copy(), 0.25, batch_indices=batch[::-1].copy())
        np.testing.assert_array_equal(np.asarray(got.coords), np.asarray(want.coords))
        np.testing.assert_array_equal(np.asarray(got.feats), np.asarray(want.feats))
