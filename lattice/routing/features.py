"""Route selection for the row-wise feature ops (activations, dropout, normalisation) and
for the joins of sparse tensor algebra (which rows of each operand meet).

Row-wise ops are MLX's own ops on the features, on the device the call runs on: the route
says which, and that coordinates, key and manager are kept. The per-channel affine map
with its residual add and ReLU (``lattice.ops.affine``: what an eval-mode BatchNorm and the
adds and activations after it become) has routes of its own: one native pass on the CPU,
one compiled MLX function on a GPU; so has the training-mode BatchNorm with the add and
the ReLU after it (``lattice.ops.batch_norm_act``): native passes on the CPU (statistics,
then the affine pass; two for the backward), MLX ops and the compiled affine map on a GPU.
A join either finds the
operands on one support (same manager and key, or equal rows: no row matching at all) or
matches rows in the native hash table (union / intersection / lookup on the CPU core),
the features then moving through MLX ops (take, where, concatenate), so autodiff works.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from lattice.routing.device import NO_GPU, capability
from lattice.routing.registry import RouteTable
from lattice.routing.types import Backend, Route, RouteBuilder, RouteId, facts_of

ROWWISE = RouteTable(
    "rowwise",
    "impl(fn, feats) -> fn(feats) on the route's device stream: fn an MLX function of the "
    "feature rows (an activation, a normalisation, a dropout mask)",
)
MLX_CPU_OPS = ROWWISE.route(Backend.CPU, "mlx_ops", "MLX's CPU ops over the feature rows")
MLX_GPU_OPS = ROWWISE.route(Backend.GPU, "mlx_ops", "MLX's GPU ops over the feature rows")

AFFINE = RouteTable(
    "affine",
    "impl(feats (N, C), scale (C,), shift (C,), residual (N, C) | None, relu: bool) -> (N, C): "
    "act(feats * scale + shift + residual), float32 arithmetic",
)
NATIVE_AFFINE = AFFINE.route(
    Backend.CPU, "native_pass", "one native pass over the rows: scale, shift, residual and ReLU together"
)
COMPILED_AFFINE = AFFINE.route(
    Backend.GPU, "mlx_compiled", "one mx.compile'd MLX function: MLX fuses it into one GPU kernel"
)
_CPU_MLX_OPS = RouteId(Backend.CPU, "mlx_ops")  # considered and rejected (affine, batch_norm_act)

BATCH_NORM_ACT = RouteTable(
    "batch_norm_act",
    "impl(feats (N, C), weight (C,), bias (C,), residual (N, C) | None, relu: bool, eps: float) -> "
    "(out (N, C), mean (C,), var (C,)): the batch statistics of feats' rows, then "
    "act((feats - mean) * rsqrt(var + eps) * weight + bias + residual)",
)
NATIVE_BATCH_NORM = BATCH_NORM_ACT.route(
    Backend.CPU,
    "native_passes",
    "native passes: the statistics, then the affine pass; the backward in two more",
)
GPU_BATCH_NORM = BATCH_NORM_ACT.route(
    Backend.GPU, "mlx_ops", "MLX's GPU reductions for the statistics, then the compiled affine map"
)

JOINS = RouteTable(
    "joins",
    "impl(tensors, join) -> lattice.backends.cpu.joins.Join: the output coordinates and "
    "each operand's source rows",
)
SAME_SUPPORT = JOINS.route(
    Backend.CPU, "same_support", "operands on one support: their rows are the output rows"
)
HASH_JOIN = JOINS.route(
    Backend.CPU, "hash_join", "native hash tables: union / intersection, then one lookup per operand"
)
_GPU_JOIN = RouteId(Backend.GPU, "hash_join")  # considered and rejected


@dataclass(frozen=True)
class RowwiseRequest:
    op: str
    dtype: str
    channels: int
    device: str = "cpu"


@functools.lru_cache(maxsize=512)
def route_rowwise(req: RowwiseRequest) -> Route:
    """MLX's ops on the call's device (cached: the answer depends only on the request)."""
    rb = RouteBuilder(req.op, facts_of(req, "dtype", "channels", "device"))
    if req.device == "gpu":
        if capability().has_gpu:
            return rb.take(MLX_GPU_OPS, "MLX's GPU ops over the rows; coordinates, key and manager kept")
        rb.reject(MLX_GPU_OPS, NO_GPU)
    return rb.take(MLX_CPU_OPS, "MLX's CPU ops over the rows; coordinates, key and manager kept")


@dataclass(frozen=True)
class AffineRequest:
    op: str
    dtype: str
    channels: int
    residual: bool
    activation: str  # "none" | "relu"
    device: str = "cpu"


@functools.lru_cache(maxsize=512)
def route_affine(req: AffineRequest) -> Route:
    """The one-pass affine map: native on the CPU, compiled MLX on a GPU (cached)."""
    rb = RouteBuilder(req.op, facts_of(req, "dtype", "channels", "residual", "activation", "device"))
    if req.device == "gpu":
        if capability().has_gpu:
            return rb.take(
                COMPILED_AFFINE,
                "one compiled MLX function over the rows (scale, shift, residual, activation fused into "
                "one GPU kernel); coordinates, key and manager kept",
            )
        rb.reject(COMPILED_AFFINE, NO_GPU)
    rb.reject(
        _CPU_MLX_OPS,
        "MLX's CPU ops take one pass over the rows per operation (4 for a BatchNorm, 1 for each add "
        "and ReLU); the native pass reads and writes the rows once",
    )
    return rb.take(
        NATIVE_AFFINE,
        "one native pass over the rows: x * scale + shift (+ residual), then the activation, float32 "
        "arithmetic, rows split over the cores; coordinates, key and manager kept",
    )


@dataclass(frozen=True)
class BatchNormActRequest:
    op: str
    dtype: str
    channels: int
    residual: bool
    activation: str  # "none" | "relu"
    device: str = "cpu"


@functools.lru_cache(maxsize=512)
def route_batch_norm_act(req: BatchNormActRequest) -> Route:
    """Training-mode BatchNorm with its add and activation: native passes on the CPU, MLX
    reductions and the compiled affine map on a GPU (cached)."""
    rb = RouteBuilder(req.op, facts_of(req, "dtype", "channels", "residual", "activation", "device"))
    if req.device == "gpu":
        if capability().has_gpu:
            return rb.take(
                GPU_BATCH_NORM,
                "the batch mean and variance by MLX's GPU reductions (float32), then one compiled MLX "
                "function for the scale, shift, residual and activation; gradients by MLX's autodiff",
            )
        rb.reject(GPU_BATCH_NORM, NO_GPU)
    rb.reject(
        _CPU_MLX_OPS,
        "MLX's CPU ops take a pass over the rows per operation and run on one thread: the batch "
        "statistics, their gradients and the ReLU mask were 1.4 s of a 4.6 s MinkUNet14 training step",
    )
    return rb.take(
        NATIVE_BATCH_NORM,
        "native passes over the rows, split over the cores: the per-channel mean and biased variance "
        "(float64 sums in fixed row blocks), then x * scale + shift (+ residual) and the activation; "
        "the backward in two passes (two per-channel sums, then the input gradient)",
    )


@dataclass(frozen=True)
class JoinRequest:
    op: str
    join: str  # inner | left | right | outer
    operands: int
    rows: tuple[int, ...]
    same_support: bool  # one manager and key, or equal rows
    device: str = "cpu"


def route_join(req: JoinRequest) -> Route:
    rb = RouteBuilder(req.op, facts_of(req, "join", "operands", "rows", "device"))
    if req.same_support:
        return rb.take(
            SAME_SUPPORT,
            "the operands hold the same coordinates (one key, or equal rows): a plain elementwise "
            "op on the rows, the result keeps the key",
        )
    rb.reject(SAME_SUPPORT, "operands on different supports")
    if req.device == "gpu":
        rb.reject(_GPU_JOIN, "joins of different supports match rows in the native CPU tables")
    return rb.take(
        HASH_JOIN,
        f"{req.join} join: the output support from the native hash tables (union or "
        "intersection), each operand's rows by one lookup; features moved by MLX take / where",
    )
