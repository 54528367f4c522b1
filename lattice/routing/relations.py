"""Route selection for relation (kernel-map) building, and the builder a coordinate
manager asks on a cache miss (``build_relation``: routed here, built by the backends)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from lattice.routing.device import NO_GPU, Capability, capability, gpu_kernels, requested_device
from lattice.routing.registry import RouteTable, dispatch_or_cpu
from lattice.routing.types import Backend, Route, RouteBuilder, RouteId, facts_of


@dataclass(frozen=True)
class RelationRequest:
    """A relation to build: its kind, the input's rows and the kernel volume, no arrays."""

    op: str
    kind: str
    n_in: int
    kernel_volume: int
    device: str = "cpu"
    # non-overlapping windows (even kernel == stride, no padding/dilation) between a set and
    # its downsample: forward onto the downsample, or transposed back onto the parent set
    exclusive: bool = False
    # a kernel_size-1 submanifold relation of a set with exact rows: every row its own input
    identity: bool = False
    # a submanifold relation whose offsets are among those of a larger cached submanifold
    # relation of the same set and dilation (the k=3 maps of a U-Net's input after its k=5 stem)
    covered: bool = False
    # the kernel's dilation along z (the merge builder reads every row of a column's z window)
    z_dilation: int = 1


RELATIONS = RouteTable(
    "relations",
    "impl(manager, kind, in_key, spec, target_key, op) -> (out_key, edges: RelationEdges | None, "
    "neighbour map (N_out, K) | None): one of the two forms (both for the identity)",
)
HASH_RELATION_SYMMETRIC = RELATIONS.route(
    Backend.CPU, "hash_relation_symmetric", "submanifold: half the offsets probed, mirror edges"
)
MERGE_RELATION_SUBMANIFOLD = RELATIONS.route(
    Backend.CPU,
    "merge_relation_submanifold",
    "submanifold: rows sorted once, each shifted (x, y) column merged along z; no probes",
)
HASH_RELATION_INPUT_DRIVEN = RELATIONS.route(
    Backend.CPU, "hash_relation_input_driven", "forward / target: only offsets the stride divides probed"
)
HASH_RELATION_SCATTER = RELATIONS.route(
    Backend.CPU, "hash_relation_scatter", "transposed / generative: (input, offset) pairs walked"
)
HASH_RELATION_EXCLUSIVE = RELATIONS.route(
    Backend.CPU, "hash_relation_exclusive", "even kernel == stride: the downsample's point -> row map"
)
IDENTITY_RELATION = RELATIONS.route(
    Backend.CPU,
    "identity",
    "submanifold, kernel_size 1: each row's one edge is itself (both forms), no table probed; any device",
)
RESTRICTED_RELATION = RELATIONS.route(
    Backend.CPU,
    "restricted",
    "submanifold: a larger cached submanifold relation of the same set, at this kernel's offsets; "
    "no table probed; any device",
)
HASH_MAP_SUBMANIFOLD = RELATIONS.kernels(
    "hash_map_submanifold", "lattice's kernels: dense (N, K) map, GPU hash"
)
HASH_MAP_PROBE = RELATIONS.kernels(
    "hash_map_probe", "lattice's kernels: output set on the GPU, one probe per pair"
)
CELL_MAP = RELATIONS.kernels(
    "cell_map",
    "lattice's kernels: kernel == stride between a set and its downsample, the map from its inverse",
)


# The merge builder takes submanifold kernels of at least MERGE_MIN_VOLUME offsets (on a scan
# most of a big kernel's probes miss: KITTI at 0.05 m, 6.5 neighbours of a 5^3 kernel's 124)
# with a z dilation of at most MERGE_MAX_Z_DILATION (its sweep reads every row of a column's z
# window, of which every dilation-th can be an edge). docs/performance.md has both builders
# side by side.
MERGE_MIN_VOLUME = 27
MERGE_MAX_Z_DILATION = 4


def route_relation(req: RelationRequest, cap: Capability | None = None) -> Route:
    cap = cap or capability()
    rb = RouteBuilder(req.op, facts_of(req, "kind", "n_in", "kernel_volume", "device"))
    if req.kind == "submanifold" and req.z_dilation != 1:
        rb.facts["z_dilation"] = req.z_dilation
    if req.identity:
        return rb.take(
            IDENTITY_RELATION,
            "kernel_size 1 on the input's own support: row r's only edge is (r, r), as an edge list "
            "and a dense map of the same rows (lazy aranges), no hash table probed, on every device",
        )
    if req.kind == "submanifold" and req.kernel_volume == 1:
        rb.reject(IDENTITY_RELATION, "the set's rows are exact (not a lazily counted buffer)")
    if req.covered:
        return rb.take(
            RESTRICTED_RELATION,
            "a larger submanifold relation of this set and dilation is cached: its edges (or dense "
            "map columns) at this kernel's offsets, no table probed, in the forms it has, on every device",
        )
    if req.kind == "submanifold":
        rb.reject(RESTRICTED_RELATION, "no larger submanifold relation of this set and dilation is cached")
    backend = gpu_kernels(rb, req.device, "hash_map", cap)
    if backend is not None:
        if req.kind == "submanifold":
            return rb.take(
                HASH_MAP_SUBMANIFOLD[backend],
                "GPU hash table over the input rows; one thread per (row, offset) probes: dense "
                "(N, K) neighbour map, no host round trip",
            )
        if req.exclusive:
            return rb.take(
                CELL_MAP[backend],
                "non-overlapping windows (even kernel == stride) between a set and its downsample: one "
                "thread per fine row writes its coarse row (the downsample's inverse) at its offset in the "
                "cell, no table probed",
            )
        rb.reject(
            CELL_MAP[backend],
            "kernel_size == stride (even or 1), padding 0, dilation 1, onto the downsample or back onto "
            "the set it was made from",
        )
        return rb.take(
            HASH_MAP_PROBE[backend],
            "output set on the GPU (given, or first-occurrence dedup of the downsample / generated "
            "footprint); one thread per (output row, offset) probes the input's GPU hash table",
        )
    if req.kind == "submanifold":
        if req.kernel_volume >= MERGE_MIN_VOLUME and req.z_dilation <= MERGE_MAX_Z_DILATION:
            return rb.take(
                MERGE_RELATION_SUBMANIFOLD,
                "rows sorted by (batch, x, y, z) once; per (dx, dy) of the half kernel one sweep with a "
                "forward-only cursor on the shifted column, the z window giving the edges and their mirrors; "
                "no hash probes; the edges in the probing walk's order",
            )
        rb.reject(
            MERGE_RELATION_SUBMANIFOLD,
            f"kernel_volume >= {MERGE_MIN_VOLUME} and z dilation <= {MERGE_MAX_Z_DILATION}",
        )
        return rb.take(
            HASH_RELATION_SYMMETRIC,
            "packed-key hash table; half the offsets probed, each hit gives an edge and its mirror",
        )
    if req.kind == "forward" and req.exclusive:
        return rb.take(
            HASH_RELATION_EXCLUSIVE,
            "non-overlapping windows (even kernel == stride): the downsample's point->row map is "
            "the relation, no probes",
        )
    if req.kind == "forward":
        rb.reject(HASH_RELATION_EXCLUSIVE, "kernel_size == stride (even or 1), padding 0, dilation 1")
    if req.kind in ("transposed", "generative") and req.exclusive:
        return rb.take(
            HASH_RELATION_EXCLUSIVE,
            "back onto the set this one was downsampled from with even kernel == stride: the "
            "forward relation of that set, edges reversed, no probes",
        )
    if req.kind in ("transposed", "generative"):
        return rb.take(
            HASH_RELATION_SCATTER,
            "walk (input, offset) pairs; generated support deduplicated by first occurrence",
        )
    return rb.take(
        HASH_RELATION_INPUT_DRIVEN,
        "walk inputs; per axis only offsets with (i - k + p) divisible by the stride are probed",
    )


def build_relation(manager, kind, in_key, spec, target_key, op: str, device=None):
    """(route, out_key, edges, neighbour map) of a relation ``manager`` does not hold yet:
    the route chosen here, the relation built by its implementation (where a GPU builder
    cannot represent it, by the CPU route, which builds it or raises the precise error)."""
    req = RelationRequest(
        op,
        kind.value,
        manager.capacity(in_key),
        spec.volume,
        device=requested_device(device),
        exclusive=manager.exclusive(kind, in_key, spec, target_key),
        identity=kind.value == "submanifold" and spec.volume == 1 and manager.row_count(in_key) is None,
        covered=kind.value == "submanifold" and manager.covering_relation(in_key, spec) is not None,
        z_dilation=spec.dilation[2],
    )
    route, built = dispatch_or_cpu(
        route_relation(req),
        lambda: route_relation(replace(req, device="cpu")),
        manager,
        kind,
        in_key,
        spec,
        target_key,
        op,
    )
    return (route, *built)


# ---- point neighbourhoods (knn_relation, radius_relation) ------------------------------------

NEIGHBORS = RouteTable(
    "neighbors",
    "impl(source (N, 3) float32, source batch (N,), query (M, 3), query batch (M,), bound) -> "
    "(rows, distances, counts or None): bound = k (knn) or (radius, max neighbours or -1)",
)
GRID_KNN = NEIGHBORS.route(
    Backend.CPU, "grid_knn", "k nearest: hashed grid of cells, rings searched outwards"
)
GRID_RADIUS = NEIGHBORS.route(
    Backend.CPU, "grid_radius", "within a radius: hashed grid of cells at least the radius wide"
)
_GPU_NEIGHBORS = {"knn_relation": "grid_knn", "radius_relation": "grid_radius"}


@dataclass(frozen=True)
class NeighborRequest:
    op: str  # knn_relation | radius_relation
    n_source: int
    n_query: int
    device: str = "cpu"


def route_neighbors(req: NeighborRequest, cap: Capability | None = None) -> Route:
    """Neighbours over points: the native hashed grid (memory proportional to the points,
    never to the bounding box), on the CPU core."""
    cap = cap or capability()
    rb = RouteBuilder(req.op, facts_of(req, "n_source", "n_query", "device"))
    if req.device == "gpu":
        rb.reject(
            RouteId(Backend.CUDA, _GPU_NEIGHBORS[req.op]),
            "no GPU neighbour kernels in this build" if cap.has_gpu else NO_GPU,
        )
    if req.op == "knn_relation":
        return rb.take(GRID_KNN, "hashed grid of cells; per query, rings of cells until k points are certain")
    return rb.take(
        GRID_RADIUS, "hashed grid of cells at least the radius wide; per query, the 27 cells around it"
    )
