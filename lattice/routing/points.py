"""Route selection for point/voxel operations."""

from __future__ import annotations

from dataclasses import dataclass

from lattice.routing.device import Capability, capability
from lattice.routing.types import Route, RouteBuilder, Tier

REDUCTIONS = ("mean", "sum", "max", "first", "count")


@dataclass(frozen=True)
class PointsRequest:
    op: str
    n_points: int
    channels: int
    reduction: str = "mean"
    interpolation: str = "linear"
    device: str = "cpu"


def route_points(req: PointsRequest, cap: Capability | None = None) -> Route:
    cap = cap or capability()
    rb = RouteBuilder(
        req.op,
        {
            "n_points": req.n_points,
            "channels": req.channels,
            "reduction": req.reduction,
            "interpolation": req.interpolation,
            "device": req.device,
        },
    )
    if req.device == "gpu":
        tier = "gpu-cuda" if cap.has(Tier.GPU_CUDA) else "gpu-metal" if cap.has(Tier.GPU_METAL) else "gpu"
        rb.reject(tier, "hash_quantize", "no GPU point/voxel kernels in this build")
    if req.op in ("voxelize", "voxelize_features"):
        return rb.take(
            "cpu",
            "hash_quantize_segment_reduce",
            "native parallel quantize (first-occurrence dedup on a packed-key hash table), "
            f"then a {req.reduction} segment reduction",
        )
    return rb.take(
        "cpu", "hash_corner_lookup", "native lookup of each point's voxel corners, then a weighted gather"
    )
