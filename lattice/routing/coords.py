"""Route selection for coordinate sets: hashing a new set (``insert``, which a coordinate
manager asks through ``build_set``) and the set functions of ``lattice.core.coordsets``."""

from __future__ import annotations

from dataclasses import dataclass, replace

from lattice.routing.device import Capability, capability, requested_device, take_kernels
from lattice.routing.registry import RouteTable, dispatch_or_cpu
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
