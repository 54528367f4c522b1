"""Coordinate sets on the GPU (``cuda/coords.cu``, ``kernels/coords.inc``): a hash table
of row indices keyed by full (b, x, y, z) rows, first-occurrence deduplication, and the
``hash_set_checked`` route (a new set hashed and validated there)."""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from lattice.backends.cuda.launch import (
    THREADS,
    NotRepresentable,
    check_index_range,
    count_params,
    i32,
    int_params,
    launch,
)
from lattice.core.buffers import arange, start
from lattice.core.rows import RowCount, host_read
from lattice.routing import coords as routes
from lattice.routing.registry import implements


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


# Rows per group of table_insert_checked's reduction: LT_CHECK_GROUP in kernels/coords.inc,
# which must be the threadgroup the launches use.
_CHECK_GROUP = 256
assert THREADS == _CHECK_GROUP, "kernels/coords.inc reduces over groups of LT_CHECK_GROUP threads"


def _table_capacity(n: int) -> int:
    """Slots of the table of ``n`` rows (checked to stay within the kernels' 32-bit indices):
    a power of two >= 4n, load factor <= 1/4, so misses (most submanifold probes) stop early."""
    check_index_range("build_table", coordinates=4 * n, table=8 * n)
    cap = 64
    while cap < 4 * n:
        cap *= 2
    return cap


def build_table(coords: mx.array, count: mx.array | None = None) -> GpuTable:
    """The table of ``coords``' rows (the first ``count`` where a lazy count is given)."""
    with mx.stream(mx.gpu):
        coords = i32(coords)
        n = int(coords.shape[0])
        cap = _table_capacity(n)
        if n == 0:
            return GpuTable(coords, mx.full((cap,), -1, dtype=mx.int32))
        (slots,) = launch(
            "coords",
            "table_insert",
            [coords, count_params(count, n, cap - 1)],
            [(cap,)],
            [mx.int32],
            n,
            init=-1,
        )
        return GpuTable(coords, slots)


def _owners(t: GpuTable, count: mx.array | None = None) -> mx.array:
    """For each row, the row the table keeps for its coordinates (itself for first
    occurrences); -1 for rows past a lazy ``count``."""
    n = t.size
    (owner,) = launch(
        "coords",
        "table_owner",
        [t.coords, t.slots, count_params(count, n, t.mask)],
        [(n,)],
        [mx.int32],
        n,
        init=None if count is None else -1,
    )
    return owner


def table_with_stats(coords: mx.array) -> tuple[GpuTable, bool, list[int], list[int]]:
    """``build_table`` and, in the same kernel, the numbers a new set is judged by: whether
    some row repeats an earlier row's coordinates, and the per-column min and max of
    (b, x, y, z) — nine numbers, read back at once. ``coords`` must hold at least one row."""
    with mx.stream(mx.gpu):
        coords = i32(coords)
        n = int(coords.shape[0])
        cap = _table_capacity(n)
        slots, stats = launch(
            "coords",
            "table_insert_checked",
            [coords, int_params(n, cap - 1)],
            [(cap,), (9,)],
            [mx.int32, mx.uint32],
            -(-n // _CHECK_GROUP) * _CHECK_GROUP,  # whole groups: each reduces in shared memory
            init=-1,  # empty slots; stats start at all ones and keep minima
        )
        s = [int(v) for v in host_read(stats)]
    # lo as c ^ 2^31 (order-preserving unsigned), hi as its complement; stats[0] is 0 on a repeat
    return GpuTable(coords, slots), s[0] == 0, [v - 2**31 for v in s[1:5]], [2**31 - 1 - v for v in s[5:9]]


def build_checked_table(coords: mx.array) -> tuple[GpuTable, bool]:
    """The table of a set, and whether the set is valid the way the CPU core judges it:
    unique rows, batch indices >= 0, and a box whose extents pack into a 64-bit key (so
    the CPU routes can take the set too). One kernel, one host read (``table_with_stats``)."""
    if coords.shape[0] == 0:
        return build_table(coords), True
    t, dup, lo, hi = table_with_stats(coords)
    return t, not dup and lo[0] >= 0 and packs(lo, hi)


def packs(lo, hi) -> bool:
    """Whether the box lo..hi (batch, x, y, z) packs into the CPU core's 64-bit key (the
    product of the four extents below the empty key 2^64 - 1, csrc/core/pack.h)."""
    span = 1
    for a, b in zip(lo, hi, strict=True):
        span *= b - a + 1
    return span < 2**64 - 1


def first_occurrences(coords: mx.array, count: mx.array | None = None) -> tuple[GpuTable, mx.array, mx.array]:
    """(the table over the rows, each row's owner, the inclusive count of first occurrences
    up to each row); no host read. ``rank[-1]`` is the number of unique rows. Rows past a
    lazy ``count`` take no part (owner -1)."""
    t = build_table(coords, count)
    owner = _owners(t, count)
    rank = block_cumsum((owner == arange(t.size, dtype=mx.int32)).astype(mx.int32))
    return t, owner, rank


_SCAN_BLOCK = 1024


def block_cumsum(a: mx.array) -> mx.array:
    """Inclusive prefix sum of a 1-D int32 array, as ``mx.cumsum`` gives it: the rows
    scanned in blocks of 1024 side by side, then the blocks' totals (MLX's CUDA scan of one
    long row runs in a single thread block: 96 us a scan of 484,637 rows on an H100)."""
    n = int(a.shape[0])
    if n <= _SCAN_BLOCK:
        return mx.cumsum(a)
    rows = -(-n // _SCAN_BLOCK)
    inner = mx.cumsum(mx.pad(a, (0, rows * _SCAN_BLOCK - n)).reshape(rows, _SCAN_BLOCK), axis=1)
    totals = inner[:, -1]
    before = mx.cumsum(totals) - totals
    return (inner + before[:, None]).reshape(-1)[:n]


def compact(
    coords: mx.array, owner: mx.array, rank: mx.array, rows: int, count: mx.array | None = None, *, fill=False
) -> tuple[mx.array, mx.array]:
    """(the first occurrences in a buffer of ``rows`` rows, each row's unique row). Rows past
    a lazy ``count`` map to -1; ``fill``: buffer rows past the unique ones are -1 (batch -1)."""
    n = int(coords.shape[0])
    out, inverse = launch(
        "coords",
        "compact",
        [coords, owner, rank, count_params(count, n)],
        [(rows, 4), (n,)],
        [mx.int32, mx.int32],
        n,
        init=-1 if fill or count is not None else None,
    )
    return out, inverse


def unique_table(t: GpuTable, rank: mx.array, unique: mx.array) -> GpuTable:
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
        coords = i32(coords)
        n = int(coords.shape[0])
        if n == 0:
            empty = mx.zeros((0, 4), dtype=mx.int32), mx.zeros((0,), dtype=mx.int32)
            return (*empty, mx.array(0, dtype=mx.int32) if lazy else None)
        _, owner, rank = first_occurrences(coords, count)
        if lazy:
            return (*compact(coords, owner, rank, n, count, fill=True), rank[-1])
        return (*compact(coords, owner, rank, int(host_read(rank[-1])), count), None)


def downsample(
    coords: mx.array, stride, count: mx.array | None = None, *, lazy: bool = False
) -> tuple[mx.array, mx.array, mx.array | None]:
    """``unique(floor(coords / stride))`` in first-occurrence order, each row's output row, and
    the lazy count where ``lazy`` (see ``unique_rows``; ``count``: the input's lazy count)."""
    with mx.stream(mx.gpu):
        n = int(coords.shape[0])
        if n:
            params = count_params(count, n, *stride)
            (coords,) = launch("coords", "downsample", [i32(coords), params], [(n, 4)], [mx.int32], n)
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


def downsample_set(manager, key, stride):
    """Key of ``unique(floor(coords / stride))`` of ``manager``'s set ``key``, deduplicated
    with the GPU hash table and cached by the manager like its own downsamples (the new
    set's CPU table is built only if a CPU route asks; where the manager has ``lazy_rows``
    its count is not read): one level of ``queue_downsamples``, unless it queued this one."""
    stride = tuple(stride)
    if stride == (1, 1, 1):
        return key
    hit = manager.cached_downsample(key, stride)
    if hit is None:
        queue_downsamples(manager, key, stride, 1)
        hit = manager.cached_downsample(key, stride)  # registered: one host read, or none
    return hit.out_key


@implements(routes.QUEUED_CHAIN.cuda)
def queue_downsamples(manager, key, stride, levels: int) -> None:
    """The downsamples of ``manager``'s set ``key`` by ``stride``, ``stride``², ... (``levels``,
    each of the one before, in first-occurrence order: the sets ``downsample_set`` makes one
    at a time), queued on the GPU as upper-bound buffers with lazy counts (``downsample(...,
    lazy=True)``: no read). A ``lazy_rows`` manager registers them so. Otherwise the counts
    are queued (``mx.async_eval``) and the manager notes the chain (``queue_downsample``):
    the first level asked for reads all the counts in one host read — by then their kernels,
    queued before the network's next stages, have run — and registers every level as the
    live prefix of its buffer, copied out. Levels the manager holds already are skipped."""
    stride = tuple(stride)
    if stride == (1, 1, 1):
        return
    while levels > 0 and (hit := manager.cached_downsample(key, stride)) is not None:
        key, levels = hit.out_key, levels - 1
    if levels <= 0:
        return
    count = manager.row_count(key)
    coords, live = manager.coords(key), None if count is None else count.array
    chain, level = [], key.stride
    for _ in range(levels):
        coords, inverse, live = downsample(coords, stride, live, lazy=True)
        level = tuple(a * b for a, b in zip(level, stride, strict=True))
        chain.append((coords, inverse, live, level))
    if manager.lazy_rows:
        parent = key
        for coords, inverse, live, level in chain:
            out_key = manager.add_gpu_set(coords, level, RowCount(live))
            parent = manager.store_downsample(parent, stride, out_key, inverse).out_key
        return
    with mx.stream(mx.gpu):
        counts = mx.stack([live for _, _, live, _ in chain])
    start(counts)  # the read below then waits for these kernels only (in mx.grad: at the read)

    def settle() -> None:
        # the live prefixes copied out (mx.contiguous copies a view of a larger buffer), so
        # the manager does not keep every level's input-sized buffer alive
        parent, rows = key, manager.size(key)
        with mx.stream(mx.gpu):
            for (coords, inverse, _, level), n in zip(chain, host_read(counts), strict=True):
                out_key = manager.add_gpu_set(mx.contiguous(coords[:n]), level)
                manager.store_downsample(parent, stride, out_key, mx.contiguous(inverse[:rows]))
                parent, rows = out_key, n

    manager.queue_downsample(key, stride, settle)


def gpu_table(manager, key) -> GpuTable:
    """The GPU hash table of ``manager``'s set ``key`` (built on first use, kept there)."""
    return manager.gpu_table(key, build_table)


@implements(routes.HASH_SET_CHECKED.cuda)
def hash_set_checked(coords: mx.array, op: str) -> GpuTable:
    """The GPU table of a new set, valid the way the CPU core judges it; else
    ``NotRepresentable`` (the CPU route then names the offending rows)."""
    table, valid = build_checked_table(coords)
    if not valid:
        raise NotRepresentable(f"[{op}] the set is not valid for the CPU core")
    return table
