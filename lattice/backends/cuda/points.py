"""Points <-> voxels on the GPU (``cuda/points.cu``, ``kernels/points.inc``): voxelize's
quantisation (the CPU core's voxels, inverse and counts, and the table of the voxels)
and devoxelize's corner lookup, registered as the ``hash_quantize`` and
``corner_lookup`` routes."""

from __future__ import annotations

import struct

import mlx.core as mx
import numpy as np

from lattice.backends.cuda.coords import (
    GpuTable,
    build_table,
    compact,
    first_occurrences,
    gpu_table,
    packs,
    unique_table,
)
from lattice.backends.cuda.launch import NotRepresentable, check_index_range, i32, int_params, launch
from lattice.core.points import PointVoxelMap, QuantizeInputs, SparseQuantization
from lattice.core.rows import host_read
from lattice.routing import points as routes
from lattice.routing.registry import implements


def _wide_params(*head: int, doubles) -> mx.array:
    """``params`` with doubles appended as two int32 words each, high word first
    (kernels/points.inc decodes them with ``lt_wide_from_bits``)."""
    words = []
    for v in doubles:
        lo, hi = struct.unpack("<ii", struct.pack("<d", float(v)))
        words += [hi, lo]
    return int_params(*head, *words)


def _point_inputs(points: mx.array, batch: mx.array | None) -> tuple[mx.array, mx.array]:
    """float32 points (float16 / bfloat16 widen exactly) and int32 batch indices (0 when None)."""
    n = int(points.shape[0])
    pts = points if points.dtype == mx.float32 else points.astype(mx.float32)
    return pts, mx.zeros((n,), dtype=mx.int32) if batch is None else i32(batch.reshape(-1))


def quantize(
    points: mx.array, voxel_size, origin, batch: mx.array | None = None
) -> tuple[mx.array, mx.array, mx.array, GpuTable]:
    """The CPU core's quantisation on the GPU: (voxels (M, 4) int32 ``(batch, floor((p - origin)
    / voxel_size))`` in first-occurrence order, each point's voxel row (N,), points per voxel
    (M,), the GPU table of the voxels). Indices are computed in float64 from the float32
    points, as the CPU core computes them.

    Raises ``NotRepresentable`` where the CPU core raises (a non-finite point, an index past
    int32, a negative batch index, a box that does not pack into its 64-bit key): the caller
    runs the CPU route for the error. One host read: error flag, box and voxel count.
    """
    with mx.stream(mx.gpu):
        n = int(points.shape[0])
        check_index_range("quantize", points=3 * n, coordinates=4 * n)
        if n == 0:
            coords = mx.zeros((0, 4), dtype=mx.int32)
            return coords, mx.zeros((0,), dtype=mx.int32), mx.zeros((0,), dtype=mx.int32), build_table(coords)
        pts, b = _point_inputs(points, batch)
        params = _wide_params(n, doubles=(*voxel_size, *origin))
        rows, bad = launch(
            "points", "quantize_points", [pts, b, params], [(n, 4), (n,)], [mx.int32, mx.int32], n
        )
        table, owner, rank = first_occurrences(rows)
        parts = [mx.max(bad)[None], mx.min(rows, axis=0), mx.max(rows, axis=0), rank[-1:]]
        s = [int(v) for v in host_read(mx.concatenate(parts))]
        if s[0] or not packs(s[1:5], s[5:9]):
            raise NotRepresentable("a point is not finite, its voxel index or batch index is out of range")
        coords, inverse = compact(rows, owner, rank, s[9])
        counts = mx.zeros((s[9],), dtype=mx.int32).at[inverse].add(1)
        return coords, inverse, counts, unique_table(table, rank, coords)


def point_voxel_map(
    points: mx.array, table: GpuTable, voxel_size, origin, batch: mx.array | None, *, linear: bool
) -> tuple[mx.array, mx.array]:
    """(rows, weights) of the voxels of ``table`` that sample each point, as the CPU route
    builds them: ``linear`` (N, 8) — the 8 voxels whose centres surround the point, trilinear
    float32 weights renormalised over the present ones; else (N, 1) — the voxel holding the
    point, weight 1 (-1 and 0 where absent). ``voxel_size`` already times the tensor stride.

    Raises ``NotRepresentable`` where a voxel index leaves int32 or a point is not finite (the
    CPU route decides those). One host read: the error flag.
    """
    with mx.stream(mx.gpu):
        n, k = int(points.shape[0]), 8 if linear else 1
        check_index_range("point_voxel_map", points=3 * n, rows=k * n)
        if n == 0:
            return mx.zeros((0, k), dtype=mx.int32), mx.zeros((0, k), dtype=mx.float32)
        pts, b = _point_inputs(points, batch)
        # no empty kernel inputs: an empty set's slots are all -1, its coords never read
        coords = table.coords if table.size else mx.zeros((1, 4), dtype=mx.int32)
        params = _wide_params(n, table.mask, int(linear), doubles=(*voxel_size, *origin))
        rows, weights, bad = launch(
            "points",
            "point_corners",
            [pts, b, coords, table.slots, params],
            [(n, k), (n, k), (n,)],
            [mx.int32, mx.float32, mx.int32],
            n,
        )
        if host_read(mx.max(bad)):
            raise NotRepresentable("a point is not finite or a voxel index overflows int32")
        return rows, weights


@implements(routes.HASH_QUANTIZE.cuda)
def hash_quantize(inputs: QuantizeInputs, reduce):
    """The voxels quantised and deduplicated on the GPU, then the op's reduction on the GPU
    stream (``NotRepresentable`` where the CPU core would raise: the CPU route words it)."""
    coords, inverse, counts, table = quantize(inputs.points, inputs.voxel_size, inputs.origin, inputs.batch)
    q = SparseQuantization(coords, int(coords.shape[0]), inverse, counts, table)
    with mx.stream(mx.gpu):
        return q, reduce(q, False)


@implements(routes.CORNER_LOOKUP.cuda)
def corner_lookup(points, voxels, voxel_size, origin, batch, linear: bool, given, sample):
    """Each point's voxel corners looked up in the voxels' GPU table (or ``given``), then
    ``sample`` on the GPU stream."""
    if given is None:
        pts = points if isinstance(points, mx.array) else mx.array(np.asarray(points))
        b = batch if batch is None or isinstance(batch, mx.array) else mx.array(batch)
        table = gpu_table(voxels.coord_manager, voxels.coord_key)
        given = PointVoxelMap(*point_voxel_map(pts, table, voxel_size, origin, b, linear=linear))
    with mx.stream(mx.gpu):
        return sample(given)
