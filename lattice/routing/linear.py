"""Route selection for dense feature GEMMs (linear, nn.Linear)."""

from __future__ import annotations

from dataclasses import dataclass

from lattice.routing.device import Capability, capability
from lattice.routing.types import Route, RouteBuilder, Tier


@dataclass(frozen=True)
class LinearRequest:
    op: str
    dtype: str
    rows: int
    c_in: int
    c_out: int
    weight_layout: str = "dense"
    device: str = "cpu"


def route_linear(req: LinearRequest, cap: Capability | None = None) -> Route:
    cap = cap or capability()
    facts = {
        "dtype": req.dtype,
        "rows": req.rows,
        "channels": f"{req.c_in}->{req.c_out}",
        "weight_layout": req.weight_layout,
        "device": req.device,
    }
    rb = RouteBuilder(req.op, facts)
    if req.weight_layout != "dense":
        raise ValueError(f"[{req.op}] weight layout {req.weight_layout!r} has no route in this build")
    if req.device == "gpu":
        if cap.has(Tier.GPU_CUDA) or cap.has(Tier.GPU_METAL):
            return rb.take("gpu", "mlx_matmul", "MLX's GPU matmul (cuBLAS / Metal) on the default GPU stream")
        rb.reject("gpu", "mlx_matmul", "no GPU device in this process")
    rb.reject("cpu", "mlx_matmul", "MLX's CPU matmul runs a reference BLAS on Linux (~1 GFLOP/s)")
    return rb.take("cpu", "blas_gemm", "one GEMM through the linked optimised BLAS")
