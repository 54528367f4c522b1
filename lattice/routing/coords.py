"""Route selection for coordinate sets: hashing a new set (``insert``, which a coordinate
manager asks through ``build_set``), the set functions of ``lattice.core.coordsets``, and a
network's coarse levels made ahead (``queue_downsamples``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from lattice.routing.device import Capability, capability, requested_device, take_kernels
from lattice.routing.registry import KERNEL_BACKENDS, RouteTable, dispatch, dispatch_or_cpu
from lattice.routing.relations import RelationRequest, route_relation
from lattice.routing.types import Backend, Route, RouteBuilder, RouteId, facts_of

COORDS = RouteTable(
    "coords",
    "impl(coords (N, 4) int32, op) -> the form of the set its functions read: a hash table of the rows "
    "(native CoordTable or GpuTable), or on cpu.morton the rows themselves",
)
HASH_SET = COORDS.route(Backend.CPU, "hash_set", "native packed-key hash table")
MORTON = COORDS.route(Backend.CPU, "morton", "native Morton codes / order over the rows")
HASH_SET_CHECKED = COORDS.kernels("hash_set_checked", "lattice's kernels: GPU hash table, validated there")


_CHECKED = (
    "GPU hash table of the new set, validated there (duplicates, negative batches, a box the CPU core can "
    "pack; one read-back); its CPU table is built only if a CPU route asks"
)


@dataclass(frozen=True)
class CoordinateRequest:
    # insert | downsample_coords | union_coords | intersection_coords | lookup_coords | inverse_map | morton_*
    op: str
    n: int
    device: str = "cpu"
    new_set: bool = False  # hashing a new set of unique rows, for ``insert`` or an op that makes one


def route_coordinates(req: CoordinateRequest, cap: Capability | None = None) -> Route:
    """Coordinate-set functions: the native hash table (or Morton kernel) on the CPU; a new
    set (``insert``) is hashed by lattice's GPU kernels when the GPU is requested."""
    cap = cap or capability()
    rb = RouteBuilder(req.op, facts_of(req, "n", "device"))
    if req.new_set or req.op == "insert":
        gpu = take_kernels(rb, req.device, HASH_SET_CHECKED, cap, _CHECKED)
        if gpu is not None:
            return gpu
    elif req.device == "gpu":
        rb.reject(
            RouteId(Backend.GPU, req.op), "set functions other than a new set's hashing run on the CPU core"
        )
    if req.op.startswith("morton"):
        return rb.take(MORTON, "21-bit-per-axis interleave, stable sort by (batch, code)")
    return rb.take(HASH_SET, "packed-key hash table, parallel probes / first-occurrence dedup")


def build_set(coords, op: str):
    """The hash table of a new set of unique rows, where MLX's default device says (the
    route chosen here; an invalid set is re-checked by the CPU builder, whose error names
    the offending rows)."""
    req = CoordinateRequest(op, int(coords.shape[0]), requested_device(None), new_set=True)
    return dispatch_or_cpu(
        route_coordinates(req), lambda: route_coordinates(replace(req, device="cpu")), coords, op
    )[1]


COARSE_SETS = RouteTable(
    "coarse_sets",
    "impl(manager, key, stride (3,), levels) -> None: the downsamples of a set by stride, stride^2, ... "
    "made or queued ahead of the strided ops that will ask the manager for them",
)
ON_DEMAND = COARSE_SETS.route(
    Backend.CPU,
    "on_demand",
    "nothing ahead: the relation that needs a downsample builds it (no read to save)",
)
QUEUED_CHAIN = COARSE_SETS.kernels(
    "queued_chain", "lattice's kernels: the levels deduplicated one from another, sizes read together once"
)


@dataclass(frozen=True)
class LevelsRequest:
    op: str
    n: int  # rows of the finest set
    levels: int
    device: str = "cpu"
    kernel_volume: int = 8  # of the strided relations the levels serve (kernel == stride)


def route_coarse_sets(req: LevelsRequest, cap: Capability | None = None) -> Route:
    """The levels are queued ahead where the strided relations they serve (forward, kernel ==
    stride onto the downsample: ``route_relation``'s own choice) are built by lattice's GPU
    kernels, which make each new set on the GPU: its size is then a host read, which waits
    for everything queued before it, so one read for all the levels, once their kernels ran,
    replaces one per level between a network's stages. Where the CPU core builds them, a
    downsample costs the same made ahead or when asked: nothing ahead."""
    cap = cap or capability()
    rb = RouteBuilder(req.op, facts_of(req, "n", "levels", "device"))
    strided = route_relation(
        RelationRequest(req.op, "forward", req.n, req.kernel_volume, device=req.device, exclusive=True), cap
    )
    if strided.backend in KERNEL_BACKENDS:
        return rb.take(
            QUEUED_CHAIN[strided.backend],
            f"the strided relations take {strided.name}: each level's first-occurrence dedup of the one "
            "before queued on the GPU with lazy counts; the first level asked for reads all the sizes in one "
            "read and registers every level, exactly sized (a lazy_rows manager: at once, unread)",
        )
    if req.device == "gpu":
        rb.reject(RouteId(Backend.GPU, QUEUED_CHAIN.algorithm), f"the strided relations take {strided.name}")
    return rb.take(ON_DEMAND, "the native core builds each downsample when a relation asks for it")


def queue_downsamples(manager, key, stride, levels: int, device=None) -> Route:
    """Makes or queues ahead the downsamples of ``manager``'s set ``key`` by ``stride``,
    ``stride``², ... (``levels`` of them, each of the one before, as the strided
    convolutions or poolings of a network's encoder ask for them), where the routing layer
    says; returns the route taken. Levels the manager holds already are kept."""
    stride = tuple(stride)
    volume = stride[0] * stride[1] * stride[2]
    req = LevelsRequest("queue_downsamples", manager.capacity(key), levels, requested_device(device), volume)
    route = route_coarse_sets(req)
    dispatch(route, manager, key, stride, levels)
    return route
