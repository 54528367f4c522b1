"""Names of the documented mlx-lattice 0.6.3 API that lattice now serves (issue 17):
coordinate validators, sparse tensor components, the coordinate manager's documented
methods, quantized weight layouts, voxelizing with a precomputed quantization, and the
documented argument values of softplus, batch_norm and the point / voxel functions.

Each is tested as the documentation states it (and, where lattice computes something new,
against a slow NumPy oracle), through the documented ``mlx_lattice`` paths.
"""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest

import lattice
import lattice.core
import mlx_lattice
from mlx_lattice.core.coords.validation import validate_coord_pair, validate_coords


def _same(a, b) -> None:
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


# ---- validators ---------------------------------------------------------------------------------


def test_validators_are_lattice_s_in_every_documented_module():
    from mlx_lattice.core.coords import validate_coords as from_coords

    assert validate_coords is from_coords is lattice.core.validate_coords
    assert validate_coord_pair is lattice.core.validate_coord_pair


@pytest.mark.parametrize("dtype", [mx.int32, mx.int64])
def test_validate_coords_accepts_int32_and_int64(dtype):
    for n in (0, 1, 7):
        assert validate_coords(mx.zeros((n, 4), dtype)) is None
    assert validate_coord_pair(mx.zeros((3, 4), dtype), mx.zeros((0, 4), dtype)) is None


@pytest.mark.parametrize("shape", [(4,), (3, 3), (2, 5), (1, 4, 1), ()])
def test_validate_coords_shape(shape):
    with pytest.raises(ValueError, match=r"coords must have shape \(N, 4\)\."):
        validate_coords(mx.zeros(shape, mx.int32))
    with pytest.raises(ValueError, match=r"queries must have shape \(N, 4\)\."):
        validate_coords(mx.zeros(shape, mx.int32), name="queries")


@pytest.mark.parametrize("dtype", [mx.float32, mx.int16, mx.uint32, mx.bool_])
def test_validate_coords_dtype(dtype):
    with pytest.raises(ValueError, match=r"coords must be int32 or int64\."):
        validate_coords(mx.zeros((2, 4), dtype))


def test_validate_coords_checks_the_shape_first():
    with pytest.raises(ValueError, match=r"must have shape"):
        validate_coords(mx.zeros((2, 3), mx.float32))


def test_validate_coords_needs_an_mx_array():
    with pytest.raises(TypeError, match=r"\[validate_coords\] coords must be an mx.array, got ndarray"):
        validate_coords(np.zeros((2, 4), np.int32))


def test_validate_coord_pair():
    a, b = mx.zeros((2, 4), mx.int32), mx.zeros((3, 4), mx.int64)
    with pytest.raises(ValueError, match=r"coordinate arrays must have matching dtype\."):
        validate_coord_pair(a, b)
    with pytest.raises(ValueError, match=r"^\[validate_coords\] lhs must have shape"):
        validate_coord_pair(a[:, :3], a)
    with pytest.raises(ValueError, match=r"^\[validate_coords\] target must be int32 or int64"):
        validate_coord_pair(a, a.astype(mx.float32), rhs_name="target")


# ---- sparse tensor components ---------------------------------------------------------------------


def test_components_are_lattice_s_in_every_documented_module():
    from mlx_lattice.core import SparseTensorComponents as from_core
    from mlx_lattice.core.tensor import SparseTensorComponents as from_tensor

    assert (
        mlx_lattice.SparseTensorComponents is from_core is from_tensor is lattice.core.SparseTensorComponents
    )


def _padded_tensor():
    """A tensor whose buffer holds 2 rows past its 5 live ones (batches 0 and 2, batch 1 empty)."""
    coords = np.array(
        [[0, 0, 0, 0], [2, 1, 0, 0], [0, 3, 1, 2], [2, 1, 1, 1], [0, -4, 2, 0], [0, 0, 0, 0], [1, 9, 9, 9]],
        np.int32,
    )
    feats = np.arange(14, dtype=np.float32).reshape(7, 2)
    return mlx_lattice.SparseTensor(mx.array(coords), mx.array(feats), 2, active_rows=mx.array([5], mx.int32))


def test_export_components_keeps_the_buffers_and_the_count():
    x = _padded_tensor()
    c = x.export_components()
    assert isinstance(c, mlx_lattice.SparseTensorComponents)
    assert c.coords.shape == (7, 4) and c.feats.shape == (7, 2)
    assert c.active_rows.dtype == mx.int32 and c.active_rows.shape == (1,) and c.active_rows.tolist() == [5]
    assert c.stride == (2, 2, 2) and c.batch_counts == (3, 0, 2)
    y = mlx_lattice.SparseTensor.from_components(c)
    assert (y.capacity, y.active_count, y.stride) == (7, 5, (2, 2, 2))
    assert y.same_coords(x) and y.coord_manager is not x.coord_manager
    _same(y.feats, x.feats)
    m = lattice.CoordinateManager()
    assert mlx_lattice.SparseTensor.from_components(c, coord_manager=m).coord_manager is m


def test_components_built_by_hand():
    coords = mx.array([[0, 1, 2, 3], [1, 0, 0, 0]], mx.int32)
    c = mlx_lattice.SparseTensorComponents(coords, mx.ones((2, 3)), mx.array([2], mx.int32))
    assert c.stride == (1, 1, 1) and c.batch_counts is None
    x = mlx_lattice.SparseTensor.from_components(c)
    assert x.active_count == 2
    _same(x.batch_counts, [1, 1])


def test_decomposed_coordinates_and_features_of_the_live_rows():
    x = _padded_tensor()
    coords, feats = x.decomposed_coordinates_and_features
    live_c, live_f = np.asarray(x.coords)[:5], np.asarray(x.feats)[:5]
    for b in range(3):  # oracle: the live rows of batch b, in row order
        rows = np.flatnonzero(live_c[:, 0] == b)
        _same(coords[b], live_c[rows, 1:])
        _same(feats[b], live_f[rows])
    assert coords[1].shape == (0, 3) and feats[1].shape == (0, 2)
