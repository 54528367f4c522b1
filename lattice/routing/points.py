"""Route selection for point/voxel operations: voxelize (quantise, then reduce the point
features per voxel) and devoxelize (look up each point's voxels, then a weighted gather).

Under the CUDA tier a GPU request takes lattice's kernels (``cuda/points.cu``): they read
float32 points (float16 / bfloat16 widen exactly) and compute voxel indices in float64 as
the CPU core does, so both routes give the same voxels, rows and order. float64 points
(and integer points of devoxelize, which the CPU route reads as float64) keep their
precision on the CPU route: MLX has no float64 on the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from lattice.routing.device import Capability, capability, gpu_kernels
from lattice.routing.registry import RouteTable
from lattice.routing.types import Backend, Route, RouteBuilder, facts_of

REDUCTIONS = ("mean", "sum", "max", "min", "first", "mode", "count")
GPU_POINT_DTYPES = ("float32", "float16", "bfloat16")

POINTS = RouteTable(
    "points",
    "voxelize: impl(inputs: QuantizeInputs, reduce) -> (SparseQuantization, reduce(quantization, host_sums)); "
    "devoxelize: impl(points, voxels, voxel_size, origin, batch, linear, given, sample) -> sample(the "
    "PointVoxelMap, or given) — the op's own work (reduce, sample) runs on the route's stream",
)
HASH_QUANTIZE_SEGMENT_REDUCE = POINTS.route(
    Backend.CPU, "hash_quantize_segment_reduce", "voxelize: native quantize and first-occurrence dedup"
)
HASH_QUANTIZE = POINTS.kernels("hash_quantize", "voxelize: lattice's kernels, dedup in a GPU hash table")
HASH_CORNER_LOOKUP = POINTS.route(Backend.CPU, "hash_corner_lookup", "devoxelize: native corner lookup")
CORNER_LOOKUP = POINTS.kernels("corner_lookup", "devoxelize: lattice's kernels, GPU hash table lookup")


@dataclass(frozen=True)
class PointsRequest:
    """voxelize / devoxelize: sizes and dtypes of the points and features, no arrays."""

    op: str
    n_points: int
    channels: int
    reduction: str = "mean"
    interpolation: str = "linear"
    device: str = "cpu"
    points_dtype: str = "float32"  # as the op reads them
    dtype: str = "float32"  # features: voxelize's point features, devoxelize's voxel features


def _gpu_blocker(req: PointsRequest) -> str | None:
    """Why the GPU kernels (CUDA or Metal) cannot take this request, or None."""
    if req.points_dtype not in GPU_POINT_DTYPES:
        return (
            f"points are {req.points_dtype}: the kernels read {' / '.join(GPU_POINT_DTYPES)} points and "
            "MLX has no float64 on the GPU; the CPU route computes from float64 points"
        )
    if req.dtype == "float64":
        return "features are float64: MLX has no float64 on the GPU"
    return None


def _gpu_reason(req: PointsRequest, voxelize: bool) -> str:
    if voxelize:
        return (
            "one thread per point: voxel index floor((p - origin) / voxel_size) in float64 (as the CPU "
            "core), hashed into a GPU table that keeps the first occurrence; voxels compacted in point "
            f"order, then a {req.reduction} segment reduction in MLX ops on the GPU stream; one host read "
            "(voxel count, error flag, box)"
        )
    what = (
        "the 8 voxels whose centres surround it (float32 trilinear weights renormalised over the present "
        "ones)"
        if req.interpolation == "linear"
        else "the voxel holding it"
    )
    return (
        f"one thread per point looks up {what} in the voxels' GPU hash table (indices in float64); "
        "features gathered in MLX ops on the GPU stream; one host read (error flag)"
    )


def route_points(req: PointsRequest, cap: Capability | None = None) -> Route:
    cap = cap or capability()
    voxelize = req.op in ("voxelize", "voxelize_features")
    kernels = HASH_QUANTIZE if voxelize else CORNER_LOOKUP
    facts = facts_of(req, "n_points", "channels", "reduction" if voxelize else "interpolation")
    facts |= facts_of(req, "points_dtype", "dtype", "device")
    rb = RouteBuilder(req.op, facts)
    backend = gpu_kernels(rb, req.device, kernels.algorithm, cap)
    if backend is not None:
        blocker = _gpu_blocker(req)
        if blocker is None:
            return rb.take(kernels[backend], _gpu_reason(req, voxelize))
        rb.reject(kernels[backend], blocker)
    if voxelize:
        return rb.take(
            HASH_QUANTIZE_SEGMENT_REDUCE,
            "native parallel quantize (first-occurrence dedup on a packed-key hash table), "
            f"then a {req.reduction} segment reduction",
        )
    return rb.take(HASH_CORNER_LOOKUP, "native lookup of each point's voxel corners, then a weighted gather")
