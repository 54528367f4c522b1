"""Route selection for the convolution family (all relation kinds, pointwise)."""

from __future__ import annotations

from dataclasses import dataclass

from lattice.errors import DTypeError
from lattice.routing.device import NO_GPU, ROUNDING_KERNELS, Capability, capability, gpu_kernels
from lattice.routing.registry import RouteTable
from lattice.routing.types import Backend, Route, RouteBuilder, Tier, edge_facts, facts_of

FLOAT_DTYPES = ("float32", "float16", "bfloat16")

CONV = RouteTable(
    "conv",
    "impl(feats (N_in, C_in), weight, rel: KernelRelation) -> (rel.out_count, C_out): weight mapped "
    "(K, C_in, C_out), or a packed QuantizedWeight on the dequant_* routes",
)
CPU, GPU = Backend.CPU, Backend.GPU
POINTWISE_GEMM = CONV.route(CPU, "pointwise_gemm", "1x1x1 on the input support: one BLAS GEMM")
GATHER_GEMM_SCATTER = CONV.route(CPU, "gather_gemm_scatter", "per offset: gather, BLAS GEMM, scatter-add")
TILED_GEMM = CONV.route(
    CPU,
    "tiled_gemm",
    "per offset: lattice's register-tiled GEMM kernel reading the gathered rows, adding into the "
    "scattered ones",
)
POINTWISE_TILED = CONV.route(
    CPU,
    "pointwise_tiled",
    "1x1x1 on the input support, where the CPU GEMM rounds (LATTICE_CPU_GEMM=avx512_bf16 or amx_bf16): "
    "lattice's kernel over all rows as one offset",
)
DEQUANT_POINTWISE_GEMM = CONV.route(
    CPU, "dequant_pointwise_gemm", "packed weight dequantized, then pointwise_gemm"
)
DEQUANT_GATHER_GEMM_SCATTER = CONV.route(
    CPU, "dequant_gather_gemm_scatter", "packed weight dequantized, then gather_gemm_scatter"
)
DEQUANT_TILED_GEMM = CONV.route(CPU, "dequant_tiled_gemm", "packed weight dequantized, then tiled_gemm")
POINTWISE_MATMUL = CONV.route(GPU, "pointwise_matmul", "1x1x1 on the input support: one MLX GPU matmul")
GATHER_MATMUL_SCATTER = CONV.route(
    GPU, "gather_matmul_scatter", "per offset: MLX gather, matmul, scatter-add"
)
DEQUANT_POINTWISE_MATMUL = CONV.route(
    GPU, "dequant_pointwise_matmul", "packed weight dequantized, then pointwise_matmul"
)
DEQUANT_GATHER_MATMUL_SCATTER = CONV.route(
    GPU, "dequant_gather_matmul_scatter", "packed weight dequantized, then gather_matmul_scatter"
)
IMPLICIT_GEMM = CONV.kernels("implicit_gemm", "lattice's implicit GEMM over the dense neighbour map")
DEQUANT_IMPLICIT_GEMM = CONV.kernels("dequant_implicit_gemm", "packed weight dequantized, then implicit_gemm")


@dataclass(frozen=True)
class ConvRequest:
    """Everything the conv route depends on: no arrays, only metadata."""

    op: str
    kind: str  # forward | submanifold | target | transposed | generative
    dtype: str
    c_in: int
    c_out: int
    kernel_volume: int
    identity_relation: bool  # every output row is its own single input (1x1x1 on the same support)
    n_in: int
    n_out: int
    edges: int | None  # None: a GPU map not counted (KernelRelation.known_edge_count)
    weight_layout: str = "dense"  # dense | packed
    normalized: bool = False
    device: str = "cpu"
    # --- packed (quantized) weights: lattice/core/quantized.py ---
    packing: str = ""  # e.g. "int8, group 64, float16 scales" when weight_layout == "packed"
    explicit_target: bool = False  # the caller gave the output support (coordinates=)


IDENTITY = "kernel_volume == 1 and output support == input support"


def route_conv(req: ConvRequest, cap: Capability | None = None) -> Route:
    """Decision order: device -> op family -> relation kind -> weight layout -> shape/dtype -> tier."""
    cap = cap or capability()
    facts = facts_of(req, "kind", "dtype") | {"channels": f"{req.c_in}->{req.c_out}"}
    facts |= facts_of(req, "kernel_volume", "n_in", "n_out") | edge_facts(
        req.edges, req.n_out, "average_neighbors"
    )
    facts |= facts_of(req, "weight_layout", "device")
    rb = RouteBuilder(req.op, facts)
    if req.dtype not in FLOAT_DTYPES:
        raise DTypeError(f"[{req.op}] features must be one of {FLOAT_DTYPES}, got {req.dtype}")
    packed = _check_weight_layout(req)
    if packed:
        facts["packing"] = req.packing
    # 1. device
    if req.device == "gpu":
        tier = (
            Tier.GPU_CUDA if cap.has(Tier.GPU_CUDA) else Tier.GPU_METAL if cap.has(Tier.GPU_METAL) else None
        )
        if tier is None:
            rb.reject(GATHER_MATMUL_SCATTER, NO_GPU)
        else:
            facts["tier"] = tier.value
            return _route_gpu(rb, req, packed, cap)
    # 2-5. CPU routes by relation, weight layout and shape
    if packed:
        return _route_packed(rb, req, cap)
    if req.identity_relation and req.kernel_volume == 1:
        if cap.cpu_gemm in ROUNDING_KERNELS:
            rb.facts["cpu_gemm"] = cap.cpu_gemm
            rb.facts["products"] = ROUNDING_KERNELS[cap.cpu_gemm]
            rb.reject(
                POINTWISE_GEMM, f"the CPU convolutions' products round to bfloat16 ({cap.cpu_gemm_reason})"
            )
            return rb.take(
                POINTWISE_TILED,
                f"1x1x1 kernel on the input support: lattice's {cap.cpu_gemm} kernel over all rows as one "
                "offset (row i to row i), products of operands rounded to bfloat16, coordinates kept",
            )
        rb.reject(POINTWISE_TILED, "the CPU GEMM does not round (LATTICE_CPU_GEMM names no rounding kernel)")
        return rb.take(
            POINTWISE_GEMM, "1x1x1 kernel on the input support: one BLAS GEMM over all rows, coordinates kept"
        )
    rb.reject(POINTWISE_GEMM, IDENTITY)
    return _take_gather_route(rb, cap, TILED_GEMM, GATHER_GEMM_SCATTER, "")


def _take_gather_route(rb: RouteBuilder, cap: Capability, tiled, blas, how: str) -> Route:
    """The CPU route of a relation convolution: lattice's tiled GEMM kernel where the
    capability names one (cap.cpu_gemm), else gather -> BLAS -> scatter."""
    if cap.cpu_gemm != "blas":
        rb.facts["cpu_gemm"] = cap.cpu_gemm
        rounds = cap.cpu_gemm in ROUNDING_KERNELS
        if rounds:
            rb.facts["products"] = ROUNDING_KERNELS[cap.cpu_gemm]
        rb.reject(blas, f"lattice's {cap.cpu_gemm} kernel runs here ({cap.cpu_gemm_reason})")
        if rounds:
            return rb.take(
                tiled,
                f"{how}per kernel offset: W[k] packed once as bfloat16 and the input rounded once, then "
                f"lattice's {cap.cpu_gemm} kernel multiplies the gathered rows' pairs of channels "
                f"({ROUNDING_KERNELS[cap.cpu_gemm]}) and adds them into the scattered output rows (tiles over "
                f"all cores); every product rounds, the submanifold centre's too ({cap.cpu_gemm_reason})",
            )
        return rb.take(
            tiled,
            f"{how}per kernel offset: W[k] packed once, then lattice's {cap.cpu_gemm} register-tiled GEMM "
            "kernel reads the gathered input rows straight into its FMAs and adds the products into the "
            "scattered output rows from registers (tiles over all cores); the submanifold centre offset is "
            "one BLAS GEMM that initialises the output",
        )
    rb.reject(tiled, cap.cpu_gemm_reason or "lattice's GEMM kernels do not run here")
    return rb.take(
        blas,
        f"{how}per kernel offset: gather input rows, BLAS GEMM, scatter-add to output rows (tiled over "
        "all cores)",
    )


def _route_gpu(rb: RouteBuilder, req: ConvRequest, packed: bool, cap: Capability) -> Route:
    """GPU routes: lattice's kernels where this process runs them (gpu_kernels), MLX's own
    kernels otherwise."""
    how = "dequantize the weight, then " if packed else ""
    pointwise = DEQUANT_POINTWISE_MATMUL if packed else POINTWISE_MATMUL
    if req.identity_relation and req.kernel_volume == 1:
        return rb.take(pointwise, f"1x1x1 kernel on the input support: {how}one GPU matmul, coordinates kept")
    rb.reject(pointwise, IDENTITY)
    implicit = DEQUANT_IMPLICIT_GEMM if packed else IMPLICIT_GEMM
    backend = gpu_kernels(rb, req.device, implicit.algorithm, cap)
    if backend is not None:
        cores = (
            "tensor cores where rows are whole 16-byte chunks" if backend == Backend.CUDA else "float32 FMAs"
        )
        return rb.take(
            implicit[backend],
            f"{how}implicit GEMM over the dense neighbour map: per 64 output rows, gather each offset's "
            f"input rows and W[k] into shared memory, {cores}, float32 accumulate in registers, no atomics",
        )
    return rb.take(
        DEQUANT_GATHER_MATMUL_SCATTER if packed else GATHER_MATMUL_SCATTER,
        f"{how}per kernel offset: MLX gather of its edges' input rows, GPU matmul, float32 scatter-add",
    )


# ---- packed (quantized) weights ---------------------------------------------------------------


def _check_weight_layout(req: ConvRequest) -> bool:
    """True for packed weights; rejects the conv kinds that cannot take them."""
    if req.weight_layout not in ("dense", "packed"):
        raise ValueError(f"[{req.op}] weight_layout must be 'dense' or 'packed', got {req.weight_layout!r}")
    if req.weight_layout == "dense":
        return False
    if req.normalized:
        raise ValueError(
            f"[{req.op}] normalised convolutions do not take packed (quantized) weights: conv(1, W**2) "
            "needs the float weight; pass dequantize_weight(qweight) instead"
        )
    if req.kind == "transposed" and req.explicit_target:
        raise ValueError(
            f"[{req.op}] a transposed convolution onto an explicit target (coordinates=) does not take "
            "packed (quantized) weights; use generated support or pass dequantize_weight(qweight)"
        )
    return True


def _route_packed(rb: RouteBuilder, req: ConvRequest, cap: Capability) -> Route:
    """Packed weights: dequantize (K * C_in * C_out values, tiny) then the dense routes."""
    rb.reject(GATHER_GEMM_SCATTER, "weight_layout == dense")
    if req.identity_relation and req.kernel_volume == 1:
        rb.reject(POINTWISE_GEMM, "weight_layout == dense")
        return rb.take(
            DEQUANT_POINTWISE_GEMM,
            "packed 1x1x1 kernel on the input support: dequantize the weight, one BLAS GEMM over all rows",
        )
    rb.reject(DEQUANT_POINTWISE_GEMM, IDENTITY)
    return _take_gather_route(
        rb,
        cap,
        DEQUANT_TILED_GEMM,
        DEQUANT_GATHER_GEMM_SCATTER,
        "packed weight dequantized to (K, C_in, C_out) in float32, then ",
    )


# ---- a convolution with the affine map after it (BatchNorm, residual add, ReLU) --------------

CONV_AFFINE = RouteTable(
    "conv_affine",
    "impl(plan: lattice.ops.conv.ConvPlan, scale (C_out,), shift (C_out,), residual (n_out, C_out) | None, "
    "relu: bool, concat (n_out, C_c) | None) -> (n_out, C_out [+ C_c]): act(conv * scale + shift + residual), "
    "float32 arithmetic, then concat's columns",
)
FUSED_EPILOGUE = CONV_AFFINE.route(
    CPU,
    "fused_epilogue",
    "the native convolution applies scale, shift, residual and ReLU to its output rows in the same "
    "primitive (per output-row block while the block is in cache, where its kernel runs in blocks) and "
    "writes a concatenated tensor's columns after them",
)
CUDA_FUSED_EPILOGUE = CONV_AFFINE.route(
    Backend.CUDA,
    "fused_epilogue",
    "lattice's implicit-GEMM kernel applies scale, shift, residual and ReLU to its float32 sums before it "
    "stores them and writes a concatenated tensor's columns after them (CUDA only)",
)
CPU_CONV_THEN_AFFINE = CONV_AFFINE.route(
    CPU,
    "conv_then_affine",
    "the convolution's own route, then lattice.ops.affine's native pass (and MLX's concatenation)",
)
GPU_CONV_THEN_AFFINE = CONV_AFFINE.route(
    GPU,
    "conv_then_affine",
    "the convolution's own route, then the affine map as one compiled GPU function (gpu.compiled_affine) "
    "and MLX's concatenation",
)
# The convolution routes whose kernel takes the epilogue: the native SparseConv primitive on the
# CPU, the implicit GEMM on CUDA.
EPILOGUE_CONV_ROUTES = tuple(
    r.name
    for r in (
        TILED_GEMM,
        GATHER_GEMM_SCATTER,
        POINTWISE_TILED,
        DEQUANT_TILED_GEMM,
        DEQUANT_GATHER_GEMM_SCATTER,
    )
)
CUDA_EPILOGUE_CONV_ROUTES = (IMPLICIT_GEMM.cuda.name, DEQUANT_IMPLICIT_GEMM.cuda.name)


@dataclass(frozen=True)
class ConvAffineRequest:
    """What the epilogue's route depends on: the convolution's route and what follows it."""

    op: str
    conv_route: str  # the convolution's route name (lattice.routing.conv)
    dtype: str
    c_out: int
    bias: bool  # the convolution adds a bias
    normalized: bool  # a normalised convolution
    residual: bool
    activation: str  # "none" | "relu"
    concat: int = 0  # channels concatenated after the output's (0: none)


def route_conv_affine(req: ConvAffineRequest) -> Route:
    """Fused into the convolution's kernel where it takes an epilogue (the native CPU
    primitive, CUDA's implicit GEMM; float32, no bias, not normalised), else the convolution
    then the affine pass on the convolution's device."""
    facts = facts_of(req, "conv_route", "dtype", "c_out", "residual", "activation", "concat")
    rb = RouteBuilder(req.op, facts)
    on_cpu = req.conv_route.startswith(f"{CPU}.")
    fused, kernels = (
        (FUSED_EPILOGUE, EPILOGUE_CONV_ROUTES) if on_cpu else (CUDA_FUSED_EPILOGUE, CUDA_EPILOGUE_CONV_ROUTES)
    )
    separate = CPU_CONV_THEN_AFFINE if on_cpu else GPU_CONV_THEN_AFFINE
    if not on_cpu:
        rb.reject(FUSED_EPILOGUE, "the convolution runs on a GPU")
    why_not = (
        f"the convolution's route {req.conv_route} is not one whose kernel takes the epilogue "
        f"({', '.join(kernels)})"
        if req.conv_route not in kernels
        else f"features are {req.dtype}: the epilogue works on the float32 sums before they are stored"
        if req.dtype != "float32"
        else "the convolution adds a bias (the epilogue starts from the sums)"
        if req.bias
        else "a normalised convolution divides its sums first"
        if req.normalized
        else None
    )
    if why_not is not None:
        rb.reject(fused, why_not)
        after = "the affine map's native pass" if on_cpu else "the affine map as one compiled GPU function"
        return rb.take(separate, f"the convolution ({req.conv_route}), then {after}")
    rb.reject(
        separate,
        "a separate pass reads and writes every output row again"
        + (
            "; the fused epilogue works on each block of rows while the convolution still holds it in cache"
            if on_cpu
            else "; the kernel applies the map to the sums it holds in registers"
        ),
    )
    if on_cpu:
        how = (
            "itself: to each block of rows as it finishes it where lattice's kernel runs in output-row blocks "
            "(a large output, edges in row order), else in one pass at its end; the affine pass's own row "
            "function, so the same bits as the two ops"
        )
    else:
        how = "to its float32 sums before it stores them (no second pass over the output; float32 arithmetic)"
    return rb.take(
        fused,
        f"the convolution ({req.conv_route}) applies act(y * scale + shift + residual) "
        + how
        + (
            f"; each row's {req.concat} concatenated channels written after it (no separate concatenation)"
            if req.concat
            else ""
        ),
    )
