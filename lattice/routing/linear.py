"""Route selection for dense feature GEMMs (linear, nn.Linear)."""

from __future__ import annotations

from dataclasses import dataclass

from lattice.routing.device import NO_GPU, Capability, capability
from lattice.routing.registry import RouteTable
from lattice.routing.types import Backend, Route, RouteBuilder, RouteId, facts_of

LINEAR = RouteTable(
    "linear", "impl(a (M, in), weight (out, in) or a packed linear QuantizedWeight) -> a @ weight.T (M, out)"
)
BLAS_GEMM = LINEAR.route(Backend.CPU, "blas_gemm", "one GEMM through the linked BLAS")
DEQUANT_BLAS_GEMM = LINEAR.route(
    Backend.CPU, "dequant_blas_gemm", "packed weight dequantized, then blas_gemm"
)
MLX_MATMUL = LINEAR.route(Backend.GPU, "mlx_matmul", "MLX's GPU matmul")
# considered and rejected, never implemented
_MLX_CPU_MATMUL = RouteId(Backend.CPU, "mlx_matmul")
_MLX_QUANTIZED = {b: RouteId(b, "mlx_quantized_matmul") for b in (Backend.CPU, Backend.GPU)}


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
    facts = facts_of(req, "dtype", "rows") | {"channels": f"{req.c_in}->{req.c_out}"}
    facts |= facts_of(req, "weight_layout", "device")
    rb = RouteBuilder(req.op, facts)
    if req.weight_layout not in ("dense", "packed"):
        raise ValueError(f"[{req.op}] weight_layout must be 'dense' or 'packed', got {req.weight_layout!r}")
    if req.weight_layout == "packed":
        return _route_packed(rb, req, cap)
    if req.device == "gpu":
        if cap.has_gpu:
            return rb.take(MLX_MATMUL, "MLX's GPU matmul (cuBLAS / Metal) on the default GPU stream")
        rb.reject(MLX_MATMUL, NO_GPU)
    rb.reject(_MLX_CPU_MATMUL, "MLX's CPU matmul runs a reference BLAS on Linux (~1 GFLOP/s)")
    return rb.take(BLAS_GEMM, "one GEMM through the linked optimised BLAS")


def _route_packed(rb: RouteBuilder, req: LinearRequest, cap: Capability) -> Route:
    """Packed (quantized) weight: dequantize (out x in, tiny) then the BLAS GEMM."""
    rb.facts["packing"] = req.packing
    if req.device == "gpu":
        rb.reject(_MLX_QUANTIZED[Backend.GPU], "no packed GPU route in this build" if cap.has_gpu else NO_GPU)
    rb.reject(BLAS_GEMM, "weight_layout == dense")
    rb.reject(_MLX_QUANTIZED[Backend.CPU], "MLX's CPU quantized matmul is ~40x slower than dequantize + BLAS")
    return rb.take(DEQUANT_BLAS_GEMM, "dequantize the packed weight, then one GEMM through the linked BLAS")
