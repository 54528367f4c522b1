"""Relations on the GPU (``cuda/relations.cu``, ``kernels/relations.inc``): dense
out-major neighbour maps over the input's GPU hash table and their inverse, registered
as the ``hash_map_submanifold`` / ``hash_map_probe`` relation builders, and the maps of
non-overlapping windows from a downsample's inverse (``cell_map``)."""

from __future__ import annotations

import mlx.core as mx

from lattice.backends.cuda.coords import GpuTable, downsample_set, generated_support, gpu_table
from lattice.backends.cuda.launch import check_index_range, i32, int_params, launch
from lattice.core.coordinates import transposed_level
from lattice.core.relation import RelationKind
from lattice.routing import relations as routes
from lattice.routing.registry import implements


def submanifold_map(table: GpuTable, offsets: mx.array) -> mx.array:
    """(N, K) map of a submanifold relation (offsets dilated, odd sizes: offset K-1-k is
    -offset k, so half of them are probed and each hit also gives its mirror)."""
    with mx.stream(mx.gpu):
        n, kv = table.size, int(offsets.shape[0])
        if n == 0:
            return mx.zeros((0, kv), dtype=mx.int32)
        check_index_range("submanifold_map", neighbor_map=n * kv)
        params = int_params(n, kv, table.mask)
        (m,) = launch(
            "relations",
            "subm_map",
            [table.coords, table.slots, i32(offsets), params],
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
        params = int_params(n, kv, table.mask, int(transposed), *stride, *padding)
        (m,) = launch(
            "relations",
            "target_map",
            [table.coords, table.slots, i32(out_coords), i32(offsets), params],
            [(n, kv)],
            [mx.int32],
            n * kv,
        )
        return m


def cell_map(fine: mx.array, inverse: mx.array, rows: int, stride, *, up: bool) -> mx.array:
    """The (rows, K) map of kernel == stride (K = the stride's volume) between the set
    ``fine`` and its downsample, whose row each fine row is in ``inverse`` (-1: a spare row of
    a lazily counted buffer): forward (``up`` False, ``rows`` the downsample's) coarse row p,
    offset k -> the fine row in p's cell at k; transposed (``rows`` the fine set's) fine row
    o -> its coarse row at its own offset, -1 at the others."""
    with mx.stream(mx.gpu):
        n, kv = int(inverse.shape[0]), stride[0] * stride[1] * stride[2]
        check_index_range("cell_map", neighbor_map=rows * kv)
        if n == 0 or rows == 0:
            return mx.full((rows, kv), -1, dtype=mx.int32)
        (m,) = launch(
            "relations",
            "cell_map_up" if up else "cell_map_down",
            [i32(fine), i32(inverse), int_params(n, kv, *stride)],
            [(rows, kv)],
            [mx.int32],
            n,
            init=-1,
        )
        return m


def invert_map(nmap: mx.array, in_count: int) -> mx.array:
    """(in_count, K) map the other way round."""
    with mx.stream(mx.gpu):
        n, kv = int(nmap.shape[0]), int(nmap.shape[1])
        check_index_range("invert_map", inverse_map=in_count * kv)
        if n == 0 or in_count == 0:
            return mx.full((in_count, kv), -1, dtype=mx.int32)
        (inv,) = launch(
            "relations",
            "invert_map",
            [nmap, int_params(n, kv)],
            [(in_count, kv)],
            [mx.int32],
            n * kv,
            init=-1,
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
    (masks,) = launch("relations", "row_masks", [nmap, int_params(n, kv)], [(n,)], [mx.uint32], n)
    with mx.stream(mx.gpu):
        return mx.argsort(masks).astype(mx.int32)


@implements(routes.HASH_MAP_SUBMANIFOLD.cuda)
def build_submanifold(manager, kind, in_key, spec, target_key, op):
    """(in_key, None, the (N, K) map): the input's GPU table probed, half the offsets."""
    return in_key, None, submanifold_map(gpu_table(manager, in_key), spec.offsets())


@implements(routes.HASH_MAP_PROBE.cuda)
def build_probe(manager, kind, in_key, spec, target_key, op):
    """(out_key, None, the (N_out, K) map): the output set on the GPU — given, or the
    first-occurrence dedup of the downsample / generated footprint — then one probe per
    (output row, offset) of the input's GPU table. No coordinates leave the GPU (two scalar
    reads: set sizes)."""
    offsets = spec.offsets()
    table = gpu_table(manager, in_key)
    transposed = kind in (RelationKind.TRANSPOSED, RelationKind.GENERATIVE)
    if target_key is not None:
        out_key = target_key
    elif transposed:
        level = transposed_level(in_key.stride, spec.stride, "relation")
        coords = generated_support(manager.live_coords(in_key), offsets, spec.stride, spec.padding)
        out_key = manager.add_gpu_set(coords, level)
    else:
        out_key = downsample_set(manager, in_key, spec.stride)
    nmap = probe_map(
        table, manager.coords(out_key), offsets, spec.stride, spec.padding, transposed=transposed
    )
    return out_key, None, nmap


@implements(routes.CELL_MAP.cuda)
def build_cell_map(manager, kind, in_key, spec, target_key, op):
    """(out_key, None, the map) of an exclusive relation (``manager.exclusive``): forward onto
    the input's downsample (made on the GPU), or transposed back onto the set ``in_key`` was
    downsampled from; the map from that downsample's inverse, no table probed."""
    if kind is RelationKind.FORWARD:
        fine_key, out_key = in_key, downsample_set(manager, in_key, spec.stride)
    else:
        fine_key = out_key = target_key
    inverse = manager.cached_downsample(fine_key, spec.stride).inverse
    up = kind is not RelationKind.FORWARD
    nmap = cell_map(manager.coords(fine_key), inverse, manager.capacity(out_key), spec.stride, up=up)
    return out_key, None, nmap
