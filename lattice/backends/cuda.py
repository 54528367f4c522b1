"""lattice's own GPU kernels (``cuda/*.cu`` entry points over the shared bodies in
``kernels/*.inc``) run through ``mx.fast.cuda_kernel`` on MLX's GPU stream: the ``cuda.*``
routes. The same functions serve the ``metal.*`` routes with the Metal entry points
(``metal/*.metal``, ``mx.fast.metal_kernel``) where the routing layer opts into them
(``LATTICE_METAL_KERNELS=1``; never run on Apple hardware): see ``dialect``.

- Coordinate sets: a GPU hash table of row indices keyed by full (b, x, y, z) rows
  (``build_table``), first-occurrence deduplication (``unique_rows``, ``downsample``,
  ``generated_support``). Only set sizes are read back to the host.
- Points <-> voxels: voxelize's quantisation (``quantize``: the CPU core's voxels, inverse
  and counts, and the table of the voxels) and devoxelize's corner lookup
  (``point_voxel_map``).
- Relations: dense out-major neighbour maps (``submanifold_map``, ``probe_map``) and
  their inverse (``invert_map``).
- Convolution: an implicit GEMM over the map (``implicit_gemm``), float32 accumulation,
  no atomics; its VJP runs the same kernel over the inverse map with W transposed per
  offset (input gradient) and a weight-gradient kernel over the map (float32 atomics).
- Pooling: sum / max / avg over the map, and the weighted contributor average of pool
  transpose / trilinear upsampling (``pool``; differentiable: ``map_pool``); global
  pooling per batch member (``global_pool``).

Sizes travel as small int32 ``params`` arrays, never as template arguments (each
template value is a new NVRTC compile); templates carry only dtypes and the tile width.
"""

from __future__ import annotations

import functools
import os
import struct
from dataclasses import dataclass

import mlx.core as mx

from lattice.backends import kernels
from lattice.core.quantized import with_packed_forms
from lattice.core.rows import host_read
from lattice.routing.device import capability

THREADS = 256


def dialect() -> str:
    """The dialect the kernels are built in: 'metal' where the routing layer sends this
    process's GPU routes to lattice's Metal kernels (LATTICE_METAL_KERNELS=1 on Apple
    silicon), else 'cuda'."""
    return "metal" if capability().kernel_backend == "metal" else "cuda"


def _launch(family, name, inputs, shapes, dtypes, threads, *, template=None, init=None, grid_y=1):
    fn = kernels.kernel(dialect(), family, name)
    return fn(
        inputs=inputs,
        output_shapes=shapes,
        output_dtypes=dtypes,
        grid=(max(int(threads), 1), grid_y, 1),
        threadgroup=(THREADS, 1, 1),
        template=template or [],
        init_value=init,
        stream=mx.gpu,
    )


@functools.lru_cache(maxsize=512)
def _param_array(values: tuple[int, ...]) -> mx.array:
    return mx.array(values, dtype=mx.int32)


def _params(*values) -> mx.array:
    """Kernel sizes as a small int32 array (kept per distinct tuple: no upload per call)."""
    return _param_array(tuple(int(v) for v in values))


def _count_params(count: mx.array | None, n: int, *rest) -> mx.array:
    """``_params(n, *rest)`` for a kernel that stops at row ``params[0]``: with ``count`` (a
    lazily counted set's int32 scalar, ``lazy_rows``) that bound is taken on the GPU, so the
    rows past the count are skipped without reading it."""
    if count is None:
        return _params(n, *rest)
    return mx.concatenate([_i32(count).reshape(1), _params(*rest)])


def check_index_range(op: str, **extents: int) -> None:
    """The kernels index with 32-bit ints: every flat extent (rows x columns of an array
    they read or write) must stay below 2^31, else a clear error instead of wrong memory."""
    for name, n in extents.items():
        if n >= 2**31:
            raise ValueError(
                f"[{op}] {name} has {n:,} elements; lattice's CUDA kernels index arrays below 2^31 "
                "elements (split the batch)"
            )


def _i32(a: mx.array) -> mx.array:
    return a if a.dtype == mx.int32 else a.astype(mx.int32)


# ---- coordinate sets -----------------------------------------------------------------------


@dataclass(frozen=True)
class GpuTable:
    """GPU hash table over the rows of ``coords`` (N, 4) int32: ``slots`` holds row indices,
    -1 empty; capacity a power of two >= 4N."""

    coords: mx.array
    slots: mx.array

    @property
    def mask(self) -> int:
        return int(self.slots.shape[0]) - 1

    @property
    def size(self) -> int:
        return int(self.coords.shape[0])


def build_table(coords: mx.array, count: mx.array | None = None) -> GpuTable:
    """The table of ``coords``' rows (the first ``count`` where a lazy count is given)."""
    with mx.stream(mx.gpu):
        coords = _i32(coords)
        n = int(coords.shape[0])
        check_index_range("build_table", coordinates=4 * n, table=8 * n)
        cap = 64
        while cap < 4 * n:  # load factor <= 1/4: misses (most submanifold probes) stop early
            cap *= 2
        if n == 0:
            return GpuTable(coords, mx.full((cap,), -1, dtype=mx.int32))
        (slots,) = _launch(
            "coords", "table_insert", [coords, _count_params(count, n, cap - 1)], [(cap,)], [mx.int32], n,
            init=-1,
        )
        return GpuTable(coords, slots)


class NotRepresentable(ValueError):
    """The GPU route cannot give what the CPU core would (an overflow, or an input the CPU
    core rejects): the caller runs the CPU route, which gives it or raises the precise error."""


def _owners(t: GpuTable, count: mx.array | None = None) -> mx.array:
    """For each row, the row the table keeps for its coordinates (itself for first
    occurrences); -1 for rows past a lazy ``count``."""
    n = t.size
    (owner,) = _launch(
        "coords", "table_owner", [t.coords, t.slots, _count_params(count, n, t.mask)], [(n,)], [mx.int32], n,
        init=None if count is None else -1,
    )
    return owner


def build_checked_table(coords: mx.array) -> tuple[GpuTable, bool]:
    """The table of a set, and whether the set is valid the way the CPU core judges it:
    unique rows, batch indices >= 0, and a box whose extents pack into a 64-bit key (so
    the CPU routes can take the set too). Nine numbers are read back."""
    with mx.stream(mx.gpu):
        t = build_table(coords)
        n = t.size
        if n == 0:
            return t, True
        dups = mx.sum(_owners(t) != mx.arange(n, dtype=mx.int32))
        stats = mx.concatenate([dups[None], mx.min(t.coords, axis=0), mx.max(t.coords, axis=0)])
        s = [int(v) for v in host_read(stats)]
        return t, s[0] == 0 and s[1] >= 0 and _packs(s[1:5], s[5:9])


def _packs(lo, hi) -> bool:
    """Whether the box lo..hi (batch, x, y, z) packs into the CPU core's 64-bit key (the
    product of the four extents below the empty key 2^64 - 1, csrc/core/pack.h)."""
    span = 1
    for a, b in zip(lo, hi, strict=True):
        span *= b - a + 1
    return span < 2**64 - 1


def _first_occurrences(coords: mx.array, count: mx.array | None = None) -> tuple[GpuTable, mx.array, mx.array]:
    """(the table over the rows, each row's owner, the inclusive count of first occurrences
    up to each row); no host read. ``rank[-1]`` is the number of unique rows. Rows past a
    lazy ``count`` take no part (owner -1)."""
    t = build_table(coords, count)
    owner = _owners(t, count)
    rank = mx.cumsum((owner == mx.arange(t.size, dtype=mx.int32)).astype(mx.int32))
    return t, owner, rank


def _compact(
    coords: mx.array, owner: mx.array, rank: mx.array, rows: int, count: mx.array | None = None, *, fill=False
) -> tuple[mx.array, mx.array]:
    """(the first occurrences in a buffer of ``rows`` rows, each row's unique row). Rows past
    a lazy ``count`` map to -1; ``fill``: buffer rows past the unique ones are -1 (batch -1)."""
    n = int(coords.shape[0])
    out, inverse = _launch(
        "coords", "compact", [coords, owner, rank, _count_params(count, n)], [(rows, 4), (n,)],
        [mx.int32, mx.int32], n, init=-1 if fill or count is not None else None,
    )
    return out, inverse


def _unique_table(t: GpuTable, rank: mx.array, unique: mx.array) -> GpuTable:
    """The table of the unique rows, from the table over all rows (whose slots hold first
    occurrences): each slot renumbered to its unique row, nothing hashed again."""
    slots = mx.where(t.slots >= 0, mx.take(rank, mx.maximum(t.slots, 0)) - 1, -1)
    return GpuTable(unique, slots)


def unique_rows(
    coords: mx.array, count: mx.array | None = None, *, lazy: bool = False
) -> tuple[mx.array, mx.array, mx.array | None]:
    """(unique rows in first-occurrence order, row -> unique row, None) after one scalar host
    read. Only the rows below a lazy ``count`` take part (the others map to -1). ``lazy``
    (``lazy_rows``): no read — a buffer of as many rows as ``coords``, the unique rows first
    and batch index -1 after them, and their count as a lazy int32 scalar."""
    with mx.stream(mx.gpu):
        coords = _i32(coords)
        n = int(coords.shape[0])
        if n == 0:
            empty = mx.zeros((0, 4), dtype=mx.int32), mx.zeros((0,), dtype=mx.int32)
            return (*empty, mx.array(0, dtype=mx.int32) if lazy else None)
        _, owner, rank = _first_occurrences(coords, count)
        if lazy:
            return (*_compact(coords, owner, rank, n, count, fill=True), rank[-1])
        return (*_compact(coords, owner, rank, int(host_read(rank[-1])), count), None)


def downsample(
    coords: mx.array, stride, count: mx.array | None = None, *, lazy: bool = False
) -> tuple[mx.array, mx.array, mx.array | None]:
    """``unique(floor(coords / stride))`` in first-occurrence order, each row's output row, and
    the lazy count where ``lazy`` (see ``unique_rows``; ``count``: the input's lazy count)."""
    with mx.stream(mx.gpu):
        n = int(coords.shape[0])
        if n:
            params = _count_params(count, n, *stride)
            (coords,) = _launch("coords", "downsample", [_i32(coords), params], [(n, 4)], [mx.int32], n)
        return unique_rows(coords, count, lazy=lazy)


def generated_support(coords: mx.array, offsets: mx.array, stride, padding) -> mx.array:
    """Transposed/generative output support ``unique(in * stride + offset - padding)``, first
    occurrence over (input row, offset) order."""
    with mx.stream(mx.gpu):
        n, kv = int(coords.shape[0]), int(offsets.shape[0])
        if n == 0:
            return mx.zeros((0, 4), dtype=mx.int32)
        parts = [mx.min(coords[:, 1:], axis=0), mx.max(coords[:, 1:], axis=0)]
        parts += [mx.min(offsets, axis=0), mx.max(offsets, axis=0)]
        b = host_read(mx.concatenate(parts))  # one read-back: coordinate box and offset box
        for a in range(3):
            lo = b[a] * stride[a] + b[6 + a] - padding[a]
            hi = b[3 + a] * stride[a] + b[9 + a] - padding[a]
            if lo < -(2**31) or hi >= 2**31:
                raise NotRepresentable("generated support overflows int32")
        s = mx.array(stride, dtype=mx.int32)
        p = mx.array(padding, dtype=mx.int32)
        xyz = coords[:, None, 1:] * s + offsets[None, :, :] - p
        b = mx.broadcast_to(coords[:, None, :1], (n, kv, 1))
        cand = mx.concatenate([b, xyz], axis=2).reshape(n * kv, 4)
        return unique_rows(cand)[0]


# ---- points <-> voxels ---------------------------------------------------------------------


def _wide_params(*head: int, doubles) -> mx.array:
    """``_params`` with doubles appended as two int32 words each, high word first
    (kernels/points.inc decodes them with ``lt_wide_from_bits``)."""
    words = []
    for v in doubles:
        lo, hi = struct.unpack("<ii", struct.pack("<d", float(v)))
        words += [hi, lo]
    return _params(*head, *words)


def _point_inputs(points: mx.array, batch: mx.array | None) -> tuple[mx.array, mx.array]:
    """float32 points (float16 / bfloat16 widen exactly) and int32 batch indices (0 when None)."""
    n = int(points.shape[0])
    pts = points if points.dtype == mx.float32 else points.astype(mx.float32)
    return pts, mx.zeros((n,), dtype=mx.int32) if batch is None else _i32(batch.reshape(-1))


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
        rows, bad = _launch(
            "points", "quantize_points", [pts, b, params], [(n, 4), (n,)], [mx.int32, mx.int32], n
        )
        table, owner, rank = _first_occurrences(rows)
        parts = [mx.max(bad)[None], mx.min(rows, axis=0), mx.max(rows, axis=0), rank[-1:]]
        s = [int(v) for v in host_read(mx.concatenate(parts))]
        if s[0] or not _packs(s[1:5], s[5:9]):
            raise NotRepresentable("a point is not finite, its voxel index or batch index is out of range")
        coords, inverse = _compact(rows, owner, rank, s[9])
        counts = mx.zeros((s[9],), dtype=mx.int32).at[inverse].add(1)
        return coords, inverse, counts, _unique_table(table, rank, coords)


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
        rows, weights, bad = _launch(
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


# ---- relations -----------------------------------------------------------------------------


def submanifold_map(table: GpuTable, offsets: mx.array) -> mx.array:
    """(N, K) map of a submanifold relation (offsets dilated, odd sizes: offset K-1-k is
    -offset k, so half of them are probed and each hit also gives its mirror)."""
    with mx.stream(mx.gpu):
        n, kv = table.size, int(offsets.shape[0])
        if n == 0:
            return mx.zeros((0, kv), dtype=mx.int32)
        check_index_range("submanifold_map", neighbor_map=n * kv)
        params = _params(n, kv, table.mask)
        (m,) = _launch(
            "relations",
            "subm_map",
            [table.coords, table.slots, _i32(offsets), params],
            [(n, kv)],
            [mx.int32],
            n * (kv // 2 + 1),
            init=-1,
        )
        return m


def probe_map(
    table: GpuTable, out_coords: mx.array, offsets: mx.array, stride, padding, *, transposed: bool
) -> mx.array:
    """(N_out, K) map onto a known output set: forward ``in = out * s + k - p`` or
    transposed ``in = (out - k + p) / s`` where divisible."""
    with mx.stream(mx.gpu):
        n, kv = int(out_coords.shape[0]), int(offsets.shape[0])
        check_index_range("probe_map", neighbor_map=n * kv)
        if n == 0 or table.size == 0:
            return mx.full((n, kv), -1, dtype=mx.int32)
        params = _params(n, kv, table.mask, int(transposed), *stride, *padding)
        (m,) = _launch(
            "relations",
            "target_map",
            [table.coords, table.slots, _i32(out_coords), _i32(offsets), params],
            [(n, kv)],
            [mx.int32],
            n * kv,
        )
        return m


def invert_map(nmap: mx.array, in_count: int) -> mx.array:
    """(in_count, K) map the other way round."""
    with mx.stream(mx.gpu):
        n, kv = int(nmap.shape[0]), int(nmap.shape[1])
        check_index_range("invert_map", inverse_map=in_count * kv)
        if n == 0 or in_count == 0:
            return mx.full((in_count, kv), -1, dtype=mx.int32)
        (inv,) = _launch(
            "relations", "invert_map", [nmap, _params(n, kv)], [(in_count, kv)], [mx.int32], n * kv, init=-1
        )
        return inv


def in_major_map(rel) -> mx.array:
    """(in_count, K) map of ``rel`` the other way round (input row -> output row per offset),
    built once per relation, on the first backward pass that needs it."""
    return rel.cached("in_major_map", lambda: invert_map(rel.neighbor_map, rel.in_count))


def row_order(nmap: mx.array) -> mx.array:
    """The rows of a dense map sorted by which offsets they read (a 32-bit mask per row,
    one bit per offset up to 32 offsets), int32: the convolution kernels take their tiles
    of 64 rows in this order, so a tile skips the offsets none of its rows reads (on the
    spconv shape 14.6 of 27 offsets per tile instead of 26.8). Any permutation gives the
    same result, bit for bit."""
    n, kv = int(nmap.shape[0]), int(nmap.shape[1])
    if n == 0:
        return mx.zeros((0,), dtype=mx.int32)
    (masks,) = _launch("relations", "row_masks", [nmap, _params(n, kv)], [(n,)], [mx.uint32], n)
    with mx.stream(mx.gpu):
        return mx.argsort(masks).astype(mx.int32)


# ---- convolution ---------------------------------------------------------------------------

_TM = 64  # output rows per threadgroup (kernels/conv.inc)
_MMA_MAX_OFFSETS = 1024  # LT_CONV_KCAP: the tensor-core kernel's list of used offsets


def _tile_order(rel, key: str, nmap: mx.array) -> mx.array:
    """The row order the convolution kernels take ``nmap``'s rows in: as they are on the
    first convolution over the map, sorted by ``row_order`` (kept with the relation) from
    the second on — the sort (0.27 ms on the spconv shape) pays back from the second use
    (0.1-0.8 ms per forward there), and a one-off convolution does not pay it. The results
    are the same bits either way."""
    state = rel.cached(key, dict)
    if "order" not in state:
        if not state.get("used"):
            state["used"] = True
            return mx.arange(int(nmap.shape[0]), dtype=mx.int32)
        state["order"] = row_order(nmap)
    return state["order"]


def _conv_kernel(x: mx.array, w: mx.array, nmap: mx.array, order: mx.array) -> mx.array:
    """y (n_out, C_out) = sum_k gather(x, nmap[:, k]) @ w[k]; w (K, C_in, C_out); the
    output rows taken in tiles of 64 in ``order`` (``row_order(nmap)``).

    Features whose rows are whole 16-byte chunks (C_in % 8 == 0 for 16-bit, % 4 for
    float32 while TF32 is allowed) take the tensor-core kernel (W cast to the feature
    dtype, read as (C_out, K, C_in); float32 multiplies in TF32, as MLX's own float32
    matmul does on CUDA by default) when there are at most 1024 kernel offsets;
    everything else the float32-FMA kernel."""
    n_out, kv = int(nmap.shape[0]), int(nmap.shape[1])
    c_in, c_out = int(w.shape[1]), int(w.shape[2])
    if n_out == 0 or int(x.shape[0]) == 0 or c_in == 0 or c_out == 0:
        return mx.zeros((n_out, c_out), dtype=x.dtype)
    check_index_range(
        "implicit_gemm",
        features=int(x.shape[0]) * c_in,
        output=n_out * c_out,
        neighbor_map=n_out * kv,
        weight=kv * c_in * c_out,
    )
    tn = 32 if c_out <= 32 else 64
    params = _params(n_out, kv, c_in, c_out)
    threads, tiles_n = -(-n_out // _TM) * THREADS, -(-c_out // tn)
    if kv <= _MMA_MAX_OFFSETS and uses_tensor_cores(x.dtype, c_in):
        # (C_out, K, C_in): a view of MLX's dense conv weight (no copy for those)
        wt = w.astype(x.dtype).transpose(2, 0, 1)
        name, inputs = "conv_implicit_gemm_mma", [x, wt, nmap, order, params]
        template = [("T", x.dtype), ("TN", tn), ("P", _mma_stages(x.dtype.size, tn))]
    else:
        name, inputs = "conv_implicit_gemm", [x, w, nmap, order, params]
        template = [("T", x.dtype), ("TW", w.dtype), ("TN", tn)]
    (y,) = _launch(
        "conv", name, inputs, [(n_out, c_out)], [x.dtype], threads, template=template, grid_y=tiles_n
    )
    return y


def _mma_stages(itemsize: int, tn: int) -> int:
    """Pipeline stages of the tensor-core kernel: as many (64 + TN) x (32 + one 16-byte
    pad) tiles as fit 44 KiB of static shared memory, at most 4 (kernels/conv.inc)."""
    stage = (_TM + tn) * (32 + 16 // itemsize) * itemsize
    return max(2, min(4, 44 * 1024 // stage))


def uses_tensor_cores(dtype, c_in: int) -> bool:
    """Tensor cores (mma.sync) when feature rows are whole 16-byte chunks; float32 only
    while TF32 is allowed — MLX's own switch, ``MLX_ENABLE_TF32`` (default on; ``0``
    keeps float32 convolutions in full float32 on the FMA kernel, as it does MLX's
    matmuls)."""
    if dialect() != "cuda":  # mma.sync: CUDA only
        return False
    if dtype in (mx.float16, mx.bfloat16):
        return c_in % 8 == 0
    return dtype == mx.float32 and c_in % 4 == 0 and tf32_enabled()


def tf32_enabled() -> bool:
    return os.environ.get("MLX_ENABLE_TF32", "1") != "0"


_WGRAD_ROWS = 512  # output rows per threadgroup of the weight-gradient kernel


def _weight_grad(x: mx.array, dy: mx.array, nmap: mx.array, order: mx.array) -> mx.array:
    """dW[k] = gather(x, nmap[:, k])^T @ dy, float32 (K, C_in, C_out): one kernel, each
    threadgroup a run of rows of ``order`` x a 32 x 32 tile (64 x 64 when both channel
    counts exceed 32) of one offset, float32 atomics; 32-row chunks that do not read the
    offset are skipped (about half with sorted rows)."""
    n_in, c_in = int(x.shape[0]), int(x.shape[1])
    n_out, kv = int(nmap.shape[0]), int(nmap.shape[1])
    c_out = int(dy.shape[1])
    if n_out == 0 or n_in == 0 or c_in == 0 or c_out == 0:
        return mx.zeros((kv, c_in, c_out), dtype=mx.float32)
    check_index_range(
        "conv_weight_grad", features=n_in * c_in, output_grad=n_out * c_out, neighbor_map=n_out * kv,
        weight=kv * c_in * c_out,
    )
    tt = 64 if min(c_in, c_out) > 32 else 32
    tiles = -(-c_in // tt) * -(-c_out // tt)
    (dw,) = _launch(
        "conv",
        "conv_weight_grad",
        [x, dy.astype(x.dtype), nmap, order, _params(n_out, kv, c_in, c_out, _WGRAD_ROWS)],
        [(kv, c_in, c_out)],
        [mx.float32],
        -(-n_out // _WGRAD_ROWS) * THREADS,
        template=[("T", x.dtype), ("TT", tt)],
        init=0,
        grid_y=kv * tiles,
    )
    return dw


def _conv_fn(rel, transposed: bool = False):
    """The differentiable convolution over ``rel``'s map (``transposed``: over its inverse
    map, W transposed per offset — the input gradient). One pair per relation, kept on
    it. The VJP of each is the other plus the weight-gradient kernel, whose own VJP is
    the two convolutions again (it is bilinear in x and dY), so second derivatives work;
    the inverse map is built on the first backward pass only."""

    def make():
        def the_map():  # built on first use: the in-major map on the first backward pass
            return in_major_map(rel) if transposed else rel.neighbor_map

        def order():
            return _tile_order(rel, "in_major_row_order" if transposed else "row_order", the_map())

        @mx.custom_function
        def conv(x, w):
            return _conv_kernel(x, w, the_map(), order())

        @mx.custom_function
        def weight_grad(x, dy):
            return _weight_grad(x, dy, the_map(), order())

        @weight_grad.vjp
        def weight_grad_vjp(primals, cotangent, output):
            # dW[k] = sum_o x[map[o, k]]^T dy[o]: bilinear, so its VJP is the convolution of
            # dY over the other map with G^T (for x) and of x with G (for dY)
            x, dy = primals
            dx = _conv_fn(rel, not transposed)(dy, cotangent.swapaxes(1, 2))
            ddy = _conv_fn(rel, transposed)(x, cotangent)
            return dx.astype(x.dtype), ddy.astype(dy.dtype)

        @conv.vjp
        def conv_vjp(primals, cotangent, output):
            x, w = primals
            dy = cotangent.astype(x.dtype)
            dx = _conv_fn(rel, not transposed)(dy, w.swapaxes(1, 2))
            return dx, weight_grad(x, dy).astype(w.dtype)

        return conv

    return rel.cached("cuda_conv_t" if transposed else "cuda_conv", make)


def implicit_gemm(feats: mx.array, weight: mx.array, rel) -> mx.array:
    """Relation convolution with mapped weight (K, C_in, C_out) over the relation's dense
    neighbour map (differentiable, also twice)."""
    with mx.stream(mx.gpu):
        return _conv_fn(rel)(feats, weight)


# the route and its packed-weight form (dequant_implicit_gemm)
CONV = with_packed_forms({"implicit_gemm": implicit_gemm})


# ---- pooling -------------------------------------------------------------------------------

_POOL_MODES = {"sum": 0, "max": 1, "avg": 2}


@functools.lru_cache(maxsize=64)
def _offset_weights(weights: tuple[float, ...]) -> mx.array:
    return mx.array(weights, dtype=mx.float32)


def pool(feats: mx.array, nmap: mx.array, mode: str, weights: tuple[float, ...] | None = None):
    """(pooled (n_out, C), argmax input row per output value or -1) of ``feats`` over a dense
    map; ``weights`` (one per kernel offset, default 1) weight sum and avg, avg dividing by
    the weights of the offsets present. Not differentiable: ``map_pool`` is."""
    n_out, kv = int(nmap.shape[0]), int(nmap.shape[1])
    ch = int(feats.shape[1])
    with mx.stream(mx.gpu):
        if n_out == 0 or ch == 0 or int(feats.shape[0]) == 0:
            return mx.zeros((n_out, ch), dtype=feats.dtype), mx.full((n_out, ch), -1, dtype=mx.int32)
        check_index_range(
            "map_pool", features=int(feats.shape[0]) * ch, output=n_out * ch, neighbor_map=n_out * kv
        )
        y, arg = _launch(
            "pool",
            "pool_map",
            [feats, nmap, _offset_weights(weights or (1.0,) * kv), _params(n_out, kv, ch, _POOL_MODES[mode])],
            [(n_out, ch), (n_out, ch)],
            [feats.dtype, mx.int32],
            n_out * ch,
            template=[("T", feats.dtype)],
        )
        return y, arg


def _pool_fn(rel, mode: str, weights: tuple[float, ...] | None):
    """Differentiable pooling over ``rel``'s map (one per relation, mode and weights): returns
    (pooled, argmax rows). VJP in MLX ops: max scatter-adds into the forward pass's argmax
    rows (ties went to the smallest row); sum and avg gather the output gradients through
    the inverse map, weighted per offset (a pure gather, no atomics)."""

    def make():
        @mx.custom_function
        def pool_op(x):
            return pool(x, rel.neighbor_map, mode, weights)

        @pool_op.vjp
        def pool_vjp(primals, cotangents, outputs):
            x = primals  # one primal: MLX passes the array itself
            n_in, ch = int(x.shape[0]), int(x.shape[1])
            n_out = rel.out_count
            dy = cotangents[0].astype(mx.float32)
            if n_in == 0 or n_out == 0 or ch == 0:
                return mx.zeros_like(x)
            if mode == "max":
                arg = mx.stop_gradient(outputs[1])
                flat = mx.where(arg >= 0, arg * ch + mx.arange(ch, dtype=mx.int32), n_in * ch).reshape(-1)
                dx = mx.zeros((n_in * ch + 1,), dtype=mx.float32).at[flat].add(dy.reshape(-1))
                return dx[:-1].reshape(n_in, ch).astype(x.dtype)
            w = None if weights is None else _offset_weights(weights)
            if mode == "avg":
                present = rel.neighbor_map >= 0
                total = (
                    mx.sum(present, axis=1).astype(mx.float32)
                    if w is None
                    else mx.sum(mx.where(present, w, 0.0), axis=1)
                )
                dy = dy / mx.where(total > 0, total, 1.0)[:, None]
            padded = mx.concatenate([dy, mx.zeros((1, ch), dtype=mx.float32)])
            inv = in_major_map(rel)
            parts = mx.take(padded, mx.where(inv < 0, n_out, inv), axis=0)  # (n_in, K, C)
            if w is not None:
                parts = parts * w[None, :, None]
            return parts.sum(axis=1).astype(x.dtype)

        return pool_op

    return rel.cached(f"cuda_pool_{mode}_{weights}", make)


def map_pool(feats: mx.array, rel, mode: str, weights: tuple[float, ...] | None = None) -> mx.array:
    """Local sum / max / avg pooling over the relation's dense map, or (``weights`` per
    offset, avg) the contributor average of upsampling (differentiable)."""
    with mx.stream(mx.gpu):
        return _pool_fn(rel, mode, weights)(feats)[0]


_GLOBAL_RUN = 64  # rows per thread of the global pooling kernels


def _global_sum(feats: mx.array, batch: mx.array, batch_size: int) -> mx.array:
    """float32 (batch_size, C) sums of the rows of each member (not differentiable)."""
    n, ch = int(feats.shape[0]), int(feats.shape[1])
    (acc,) = _launch(
        "pool",
        "global_sum",
        [feats, batch, _params(n, ch, _GLOBAL_RUN)],
        [(batch_size, ch)],
        [mx.float32],
        -(-n // _GLOBAL_RUN) * ch,
        template=[("T", feats.dtype)],
        init=0,
    )
    return acc


def _global_argmax(feats: mx.array, batch: mx.array, batch_size: int) -> mx.array:
    """(batch_size, C) row of each member's largest value per channel (NaN largest, ties to
    the smallest row); 0 for a member without rows."""
    n, ch = int(feats.shape[0]), int(feats.shape[1])
    params, threads, template = _params(n, ch, _GLOBAL_RUN), -(-n // _GLOBAL_RUN) * ch, [("T", feats.dtype)]
    (key,) = _launch(
        "pool", "global_max_key", [feats, batch, params], [(batch_size, ch)], [mx.uint32], threads,
        template=template, init=0,
    )
    (winner,) = _launch(
        "pool", "global_argmax", [feats, batch, key, params], [(batch_size, ch)], [mx.uint32], threads,
        template=template, init=0,
    )
    return mx.where(winner > 0, n - winner.astype(mx.int32), 0)


def global_pool(feats: mx.array, batch: mx.array, batch_size: int, mode: str, counts: mx.array) -> mx.array:
    """Dense (batch_size, C) sum / max / avg of the rows of each batch member (differentiable:
    the backward is a gather of dY by batch member, max's a scatter into the argmax rows).
    ``counts``: rows per member (the tensor's ``batch_counts``, which the op has already
    read; avg divides by them). Sums go through float32 atomics (their order, and so the
    last bits, may vary run to run); max is exact. Max needs every member to have rows (the
    op checks)."""
    n, ch = int(feats.shape[0]), int(feats.shape[1])
    with mx.stream(mx.gpu):
        if batch_size == 0 or ch == 0 or n == 0:
            return mx.zeros((batch_size, ch), dtype=feats.dtype)
        check_index_range("global_pool", features=n * ch, output=batch_size * ch)
        batch = _i32(batch)
        if mode == "max":
            arg = mx.stop_gradient(_global_argmax(feats, batch, batch_size))
            return mx.take_along_axis(feats, arg, axis=0)  # MLX differentiates the gather
        if mode == "avg":  # members past the last batch index have no rows: divide by 1
            divisor = mx.maximum(counts.astype(mx.float32), 1.0)
            pad = batch_size - int(divisor.shape[0])
            divisor = (mx.concatenate([divisor, mx.ones((pad,))]) if pad else divisor)[:, None]
        else:
            divisor = None

        @mx.custom_function
        def reduce(x):
            acc = _global_sum(x, batch, batch_size)
            return (acc if divisor is None else acc / divisor).astype(x.dtype)

        @reduce.vjp
        def reduce_vjp(primals, cotangent, output):
            dy = cotangent.astype(mx.float32)
            if divisor is not None:
                dy = dy / divisor
            return mx.take(dy, batch, axis=0).astype(primals.dtype)

        return reduce(feats)
