"""Point-to-voxel quantisation."""

from __future__ import annotations

from dataclasses import dataclass, field

import mlx.core as mx
import numpy as np

from lattice import _ext
from lattice.core._checks import DTypeError, float_triple, host_array
from lattice.core.buffers import CountedRows


@dataclass(frozen=True)
class SparseQuantization(CountedRows):
    """Result of ``sparse_quantize``.

    ``coords`` (M, 4) int32 unique voxels in first-occurrence order, all live (``active_rows``
    the int32 ``(1,)`` count M, ``active_count`` the int);
    ``inverse_rows`` (N,) the voxel row of every point; ``counts`` (M,) points per voxel.
    ``table``: the hash table of ``coords`` — native (an ``_ext.CoordTable``), or a GPU
    table (``lattice.backends.cuda.coords.GpuTable``) where voxelize quantised on the GPU — so a
    caller can register it with ``CoordinateManager.adopt`` instead of hashing the coords again.
    """

    coords: mx.array
    active_rows: mx.array
    inverse_rows: mx.array
    counts: mx.array
    table: object = field(default=None, repr=False, compare=False)
    _count: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._count_rows()


@dataclass(frozen=True)
class PointVoxelMap:
    """For each point, its voxel rows (-1 where absent) and normalised weights: (N, 8) for
    linear interpolation, (N, 1) for nearest."""

    rows: mx.array
    weights: mx.array

    @property
    def point_count(self) -> int:
        """Points the map samples at (its rows)."""
        return int(self.rows.shape[0])


@dataclass(frozen=True)
class QuantizeInputs:
    """Checked arguments of a quantisation: points (N, 3) floating (the active rows only),
    voxel size and origin per axis, batch indices (N,) integers or None."""

    points: mx.array
    voxel_size: tuple[float, float, float]
    origin: tuple[float, float, float]
    batch: mx.array | None


def _points(points, op: str) -> mx.array:
    if not isinstance(points, mx.array):
        arr = np.asarray(points)
        # float64 input keeps its precision (projected coordinates in metres near 5e5).
        wide = arr.dtype == np.float64
        points = host_array(arr, np.float64 if wide else np.float32, mx.float64 if wide else None)
    if points.ndim != 2 or points.shape[1] != 3:
        raise ValueError(f"[{op}] points must have shape (N, 3), got {tuple(points.shape)}")
    if not mx.issubdtype(points.dtype, mx.floating):
        points = points.astype(mx.float32)
    return points


def quantize_inputs(
    points, voxel_size=1.0, *, batch_indices=None, origin=0.0, active_rows=None
) -> QuantizeInputs:
    """The arguments of ``sparse_quantize``, checked and normalised (errors name sparse_quantize)."""
    op = "sparse_quantize"
    points = _points(points, op)
    vs = float_triple(voxel_size, "voxel_size", op, positive=True)
    org = float_triple(origin, "origin", op)
    n = points.shape[0]
    if active_rows is not None:
        n = int(active_rows.item() if isinstance(active_rows, mx.array) else active_rows)
        if not 0 <= n <= points.shape[0]:
            raise ValueError(f"[{op}] active_rows must be in [0, {points.shape[0]}], got {n}")
        points = points[:n]
    batch = None
    if batch_indices is not None:
        batch = batch_indices if isinstance(batch_indices, mx.array) else host_array(batch_indices)
        if batch.ndim != 1 or batch.shape[0] < n:
            raise ValueError(
                f"[{op}] batch_indices must have shape (N,) with N = {n}, got {tuple(batch.shape)}"
            )
        if not mx.issubdtype(batch.dtype, mx.integer):
            raise DTypeError(f"[{op}] batch_indices must be integers, got {batch.dtype}")
        batch = batch[:n]
    return QuantizeInputs(points, vs, org, batch)


def native_quantize(inputs: QuantizeInputs) -> SparseQuantization:
    """``sparse_quantize`` of checked inputs by the native (CPU) quantizer."""
    table, inverse, counts = _ext.sparse_quantize(
        inputs.points, inputs.voxel_size, inputs.origin, inputs.batch
    )
    return SparseQuantization(table.coords, table.size, inverse, counts, table)


def sparse_quantize(
    points, voxel_size=1.0, *, batch_indices=None, origin=0.0, active_rows=None
) -> SparseQuantization:
    """Voxel indices ``floor((p - origin) / voxel_size)`` of points, deduplicated per batch.

    ``voxel_size`` and ``origin`` take a number or one per axis. Non-finite points
    or indices past int32 raise ValueError naming the point.
    """
    return native_quantize(
        quantize_inputs(
            points, voxel_size, batch_indices=batch_indices, origin=origin, active_rows=active_rows
        )
    )
