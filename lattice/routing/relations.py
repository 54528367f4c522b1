"""Route selection for relation (kernel-map) building and coordinate functions."""

from __future__ import annotations

from dataclasses import dataclass

from lattice.routing.device import Capability, capability, gpu_kernels
from lattice.routing.types import Route, RouteBuilder


@dataclass(frozen=True)
class RelationRequest:
    op: str
    kind: str
    n_in: int
    kernel_volume: int
    device: str = "cpu"
    # non-overlapping windows (even kernel == stride, no padding/dilation) between a set and
    # its downsample: forward onto the downsample, or transposed back onto the parent set
    exclusive: bool = False


def route_relation(req: RelationRequest, cap: Capability | None = None) -> Route:
    cap = cap or capability()
    rb = RouteBuilder(
        req.op, {"kind": req.kind, "n_in": req.n_in, "kernel_volume": req.kernel_volume, "device": req.device}
    )
    backend = gpu_kernels(rb, req.device, "hash_map", cap)
    if backend is not None:
        if req.kind == "submanifold":
            return rb.take(
                backend,
                "hash_map_submanifold",
                "GPU hash table over the input rows; one thread per (row, offset) probes: dense "
                "(N, K) neighbour map, no host round trip",
            )
        return rb.take(
            backend,
            "hash_map_probe",
            "output set on the GPU (given, or first-occurrence dedup of the downsample / generated "
            "footprint); one thread per (output row, offset) probes the input's GPU hash table",
        )
    if req.kind == "submanifold":
        return rb.take(
            "cpu",
            "hash_relation_symmetric",
            "packed-key hash table; half the offsets probed, each hit gives an edge and its mirror",
        )
    if req.kind == "forward" and req.exclusive:
        return rb.take(
            "cpu",
            "hash_relation_exclusive",
            "non-overlapping windows (even kernel == stride): the downsample's point->row map is "
            "the relation, no probes",
        )
    if req.kind == "forward":
        rb.reject(
            "cpu", "hash_relation_exclusive", "kernel_size == stride (even or 1), padding 0, dilation 1"
        )
    if req.kind in ("transposed", "generative") and req.exclusive:
        return rb.take(
            "cpu",
            "hash_relation_exclusive",
            "back onto the set this one was downsampled from with even kernel == stride: the "
            "forward relation of that set, edges reversed, no probes",
        )
    if req.kind in ("transposed", "generative"):
        return rb.take(
            "cpu",
            "hash_relation_scatter",
            "walk (input, offset) pairs; generated support deduplicated by first occurrence",
        )
    return rb.take(
        "cpu",
        "hash_relation_input_driven",
        "walk inputs; per axis only offsets with (i - k + p) divisible by the stride are probed",
    )


@dataclass(frozen=True)
class CoordinateRequest:
    # insert | downsample_coords | union_coords | intersection_coords | lookup_coords | inverse_map | morton_*
    op: str
    n: int
    device: str = "cpu"


def route_coordinates(req: CoordinateRequest, cap: Capability | None = None) -> Route:
    """Coordinate-set functions: the native hash table (or Morton kernel) on the CPU; a new
    set (``insert``) is hashed by lattice's GPU kernels when the GPU is requested."""
    cap = cap or capability()
    rb = RouteBuilder(req.op, {"n": req.n, "device": req.device})
    if req.op == "insert":
        backend = gpu_kernels(rb, req.device, "hash_set_checked", cap)
        if backend is not None:
            return rb.take(
                backend,
                "hash_set_checked",
                "GPU hash table of the new set, validated there (duplicates, negative batches, a box the "
                "CPU core can pack; one read-back); its CPU table is built only if a CPU route asks",
            )
    elif req.device == "gpu":
        rb.reject("gpu", req.op, "set functions other than insert run on the CPU core")
    if req.op.startswith("morton"):
        return rb.take("cpu", "morton", "21-bit-per-axis interleave, stable sort by (batch, code)")
    return rb.take("cpu", "hash_set", "packed-key hash table, parallel probes / first-occurrence dedup")
