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
    weight_layout: str = "dense"  # dense | packed
    device: str = "cpu"
    packing: str = ""  # e.g. "int8, group 64, float16 scales" for packed weights


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
    if req.weight_layout not in ("dense", "packed"):
        raise ValueError(f"[{req.op}] weight_layout must be 'dense' or 'packed', got {req.weight_layout!r}")
    if req.weight_layout == "packed":
        return _route_packed(rb, req, cap)
    if req.device == "gpu":
        if cap.has(Tier.GPU_CUDA) or cap.has(Tier.GPU_METAL):
            return rb.take("gpu", "mlx_matmul", "MLX's GPU matmul (cuBLAS / Metal) on the default GPU stream")
        rb.reject("gpu", "mlx_matmul", "no GPU device in this process")
    rb.reject("cpu", "mlx_matmul", "MLX's CPU matmul runs a reference BLAS on Linux (~1 GFLOP/s)")
    return rb.take("cpu", "blas_gemm", "one GEMM through the linked optimised BLAS")


def _route_packed(rb: RouteBuilder, req: LinearRequest, cap: Capability) -> Route:
    """Packed (quantized) weight: dequantize (out x in, tiny) then the BLAS GEMM."""
    rb.facts["packing"] = req.packing
    if req.device == "gpu":
        gpu = cap.has(Tier.GPU_CUDA) or cap.has(Tier.GPU_METAL)
        why = "no packed GPU route in this build" if gpu else "no GPU device in this process"
        rb.reject("gpu", "mlx_quantized_matmul", why)
    rb.reject("cpu", "blas_gemm", "weight_layout == dense")
    rb.reject(
        "cpu", "mlx_quantized_matmul", "MLX's CPU quantized matmul is ~40x slower than dequantize + BLAS"
    )
    return rb.take(
        "cpu", "dequant_blas_gemm", "dequantize the packed weight, then one GEMM through the linked BLAS"
    )
