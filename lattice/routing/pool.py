"""Route selection for the pooling family: local pooling (forward and backward),
pool transpose and trilinear upsampling, global pooling.

Local pooling reduces over the forward relation (edges sorted by output row) unless the
kernel windows are exactly the cells of the downsample (kernel == stride, even sizes or 1,
no padding, dilation 1): then the downsample's window map, which groups the rows by output
row as it numbers the outputs, is reduced directly and no relation is built.

The backward route is fixed when the forward op runs (the primitive's VJP walks the
relation the way its route says). Where the kernel windows cannot overlap —
``stride >= (size - 1) * dilation + 1`` on every axis — each input row reaches at
most one output row and the backward pass is a pure gather (no scatter, no atomics);
otherwise it scatter-adds one kernel offset at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from lattice.routing.device import Capability, capability, gpu_kernels, take_kernels
from lattice.routing.registry import RouteTable
from lattice.routing.types import Backend, Route, RouteBuilder, edge_facts, facts_of

POOL_MODES = ("sum", "max", "avg")
FLOAT_DTYPES = ("float32", "float16", "bfloat16")
UPSAMPLE_METHODS = ("transpose", "trilinear")

POOL = RouteTable(
    "pool",
    "impl(feats (N_in, C), edges, mode, *, backward: str, weights: tuple | None) -> (edges.out_count, C): "
    "edges a KernelRelation, or the downsample's WindowMap where reads_windows(route); backward the "
    "algorithm of the backward route",
)
SEGMENT_REDUCE = POOL.route(Backend.CPU, "segment_reduce", "edges counting-sorted by output row, one pass")
WINDOW_REDUCE = POOL.route(Backend.CPU, "window_reduce", "the downsample's window map, one pass, no sort")
MAP_POOL = POOL.kernels("map_pool", "lattice's kernel over the dense neighbour map")

POOL_BACKWARD = RouteTable("pool_backward", "the forward implementation's VJP, on the path the op fixed")
INPUT_EXCLUSIVE_GATHER = POOL_BACKWARD.route(Backend.CPU, "input_exclusive_gather", "a pure gather")
SCATTER_GENERAL = POOL_BACKWARD.route(Backend.CPU, "scatter_general", "per offset, scatter-add into dX")
MAP_POOL_GRAD = POOL_BACKWARD.kernels("map_pool_grad", "MLX ops over the (inverse) neighbour map")

GLOBAL_POOL = RouteTable(
    "global_pool",
    "impl(feats (N, C), batch (N,), batch_size, mode, counts: rows per member) -> (batch_size, C)",
)
BATCH_SEGMENT_REDUCE = GLOBAL_POOL.route(
    Backend.CPU, "batch_segment_reduce", "rows counting-sorted by member"
)
BATCH_ATOMIC_REDUCE = GLOBAL_POOL.kernels(
    "batch_atomic_reduce", "lattice's kernels: runs of 64 rows per thread"
)

Triple = tuple[int, int, int]


@dataclass(frozen=True)
class PoolRequest:
    """Local pooling: metadata only, no arrays. The edges (the forward relation or the
    downsample's window map) are fetched once the route says which it reads."""

    op: str
    mode: str  # sum | max | avg
    dtype: str
    channels: int
    kernel_size: Triple
    stride: Triple
    dilation: Triple
    n_in: int
    device: str = "cpu"
    padding: Triple = (0, 0, 0)
    # the input's downsample groups its rows by these windows (CoordinateManager.has_windows):
    # the windows are the downsample's cells and a cell holds at most 32 lattice points
    windows: bool = False


@dataclass(frozen=True)
class UpsampleRequest:
    """Pool transpose (contributor average) or trilinear upsampling over a transposed relation."""

    op: str
    method: str  # transpose | trilinear
    dtype: str
    channels: int
    kernel_volume: int
    n_in: int
    n_out: int
    edges: int | None  # None: a GPU map not counted (KernelRelation.known_edge_count)
    explicit_target: bool
    device: str = "cpu"


@dataclass(frozen=True)
class GlobalPoolRequest:
    """Global pooling of the rows of each batch member to dense (batch_size, C)."""

    op: str
    mode: str
    dtype: str
    channels: int
    n_in: int
    batch_size: int
    device: str = "cpu"


def windows_exclusive(kernel_size: Triple, stride: Triple, dilation: Triple) -> bool:
    """True when kernel windows never overlap: ``stride >= (size - 1) * dilation + 1`` on every axis."""
    return all(s >= (k - 1) * d + 1 for k, s, d in zip(kernel_size, stride, dilation, strict=True))


def _check(op: str, dtype: str, mode: str | None = None) -> None:
    if dtype not in FLOAT_DTYPES:
        raise ValueError(f"[{op}] features must be one of {FLOAT_DTYPES}, got {dtype}")
    if mode is not None and mode not in POOL_MODES:
        raise ValueError(f"[{op}] mode must be one of {POOL_MODES}, got {mode!r}")


def _pool_facts(req: PoolRequest) -> dict:
    fields = ("mode", "dtype", "channels", "kernel_size", "stride", "padding", "dilation", "n_in", "device")
    return facts_of(req, *fields)


def pool_edge_facts(edges) -> dict:
    """The facts of the edges a local pooling route reduces over (a relation or a window map),
    known only once the route has said which it reads."""
    return {
        "n_out": edges.n_out,
        **edge_facts(edges.known_edge_count, edges.n_out, "average_contributors"),
    }


def reads_windows(route: Route) -> bool:
    """Whether a local pooling route reduces over the downsample's window map
    (``CoordinateManager.windows``) rather than the forward relation."""
    return route.id == WINDOW_REDUCE


def route_pool(req: PoolRequest, cap: Capability | None = None) -> Route:
    """Forward local pooling: the downsample's window map reduced directly when the windows are
    its cells, else the relation's edges sorted by output row; one reduction pass per output row.

    Chosen before the edges are fetched (``reads_windows`` says which the route reads);
    ``pool_edge_facts`` then adds what they hold."""
    cap = cap or capability()
    _check(req.op, req.dtype, req.mode)
    facts = _pool_facts(req) | {"backward": route_pool_backward(req, cap).name}
    rb = RouteBuilder(req.op, facts)
    backend = gpu_kernels(rb, req.device, MAP_POOL.algorithm, cap)
    facts["windows"] = backend is None and req.windows
    if backend is not None:
        return rb.take(
            MAP_POOL[backend],
            f"{req.mode} over the dense neighbour map of the forward relation (built on the GPU): one "
            "thread per (output row, channel) walks the kernel offsets, float32 accumulation, max ties "
            "to the smallest input row",
        )
    if req.windows:
        rb.reject(SEGMENT_REDUCE, "the downsample's window map already groups the rows by output row")
        return rb.take(
            WINDOW_REDUCE,
            f"{req.mode} over the cells of the downsample (kernel == stride, even sizes or 1, no padding, "
            "dilation 1): the downsample grouped the rows by output row while numbering the outputs, so "
            "each output row is reduced in one pass with no relation built and no sort (rows spread over "
            "all cores, float32 accumulation)",
        )
    rb.reject(
        WINDOW_REDUCE,
        f"windows are the downsample's cells (kernel_size == stride, even sizes or 1, padding 0, dilation 1) "
        f"of at most 32 points: kernel_size {req.kernel_size}, stride {req.stride}, padding {req.padding}, "
        f"dilation {req.dilation}",
    )
    return rb.take(
        SEGMENT_REDUCE,
        f"{req.mode} over the forward relation: edges counting-sorted by output row, each output row "
        "reduced in one pass (rows spread over all cores, float32 accumulation)",
    )


def route_pool_backward(req: PoolRequest, cap: Capability | None = None) -> Route:
    """Backward local pooling: pure gather when the windows cannot overlap, else per-offset scatter."""
    cap = cap or capability()
    _check(req.op, req.dtype, req.mode)
    rb = RouteBuilder(req.op + ".backward", _pool_facts(req))
    how = (
        "scatter-add of dY into the argmax rows"
        if req.mode == "max"
        else "gather of dY through the inverse map (no atomics)"
    )
    gpu = take_kernels(rb, req.device, MAP_POOL_GRAD, cap, f"MLX ops on the GPU: {how}")
    if gpu is not None:
        return gpu
    what = "the argmax row of each output row and channel" if req.mode == "max" else "the output row"
    if windows_exclusive(req.kernel_size, req.stride, req.dilation):
        rb.reject(SCATTER_GENERAL, "input-exclusive windows take the pure gather")
        return rb.take(
            INPUT_EXCLUSIVE_GATHER,
            f"stride >= (size - 1) * dilation + 1 on every axis: each input row reaches at most one "
            f"output row, so dX[i] is read from {what} (no scatter)",
        )
    rb.reject(
        INPUT_EXCLUSIVE_GATHER,
        f"stride >= (size - 1) * dilation + 1 on every axis: stride {req.stride}, size "
        f"{req.kernel_size}, dilation {req.dilation}",
    )
    return rb.take(
        SCATTER_GENERAL,
        "overlapping windows: per kernel offset, scatter-add into dX (edges of one offset share no "
        "input row, so no atomics)",
    )


def _upsample_facts(req: UpsampleRequest) -> dict:
    facts = facts_of(req, "method", "dtype", "channels", "kernel_volume", "n_in", "n_out")
    facts |= edge_facts(req.edges, req.n_out, "average_contributors")
    return facts | {
        "support": "explicit target" if req.explicit_target else "generated",
        "device": req.device,
    }


def route_upsample(req: UpsampleRequest, cap: Capability | None = None) -> Route:
    """Pool transpose / trilinear upsampling: a (weighted) contributor average per output row."""
    cap = cap or capability()
    _check(req.op, req.dtype)
    if req.method not in UPSAMPLE_METHODS:
        raise ValueError(f"[{req.op}] method must be one of {UPSAMPLE_METHODS}, got {req.method!r}")
    rb = RouteBuilder(req.op, _upsample_facts(req) | {"backward": route_upsample_backward(req, cap).name})
    backend = gpu_kernels(rb, req.device, MAP_POOL.algorithm, cap)
    if backend is not None:
        weights = "the trilinear weight of each offset" if req.method == "trilinear" else "unit weights"
        return rb.take(
            MAP_POOL[backend],
            f"weighted average over the dense neighbour map of the "
            f"{'generative' if req.method == 'trilinear' else 'transposed'} relation (built on the GPU): one "
            f"thread per (output row, channel) walks the kernel offsets with {weights}, divided by the "
            "weights present; float32 accumulation",
        )
    weights = (
        "separable linear weights 1 - |k| / stride per offset, normalised by their sum over present neighbours"
        if req.method == "trilinear"
        else "unit weights, divided by the number of contributors"
    )
    return rb.take(
        SEGMENT_REDUCE,
        f"{'generative' if req.method == 'trilinear' else 'transposed'} relation sorted by output row, each "
        f"output row averaged in one pass: {weights}",
    )


def route_upsample_backward(req: UpsampleRequest, cap: Capability | None = None) -> Route:
    """Backward of the upsampling average: every coarse row feeds all its kernel offsets."""
    cap = cap or capability()
    _check(req.op, req.dtype)
    rb = RouteBuilder(req.op + ".backward", _upsample_facts(req))
    how = "dY divided by each output row's weight total, gathered through the inverse map and weighted per offset"
    gpu = take_kernels(rb, req.device, MAP_POOL_GRAD, cap, f"MLX ops on the GPU: {how} (no atomics)")
    if gpu is not None:
        return gpu
    if req.kernel_volume == 1:
        rb.reject(SCATTER_GENERAL, "a single kernel offset takes the pure gather")
        return rb.take(
            INPUT_EXCLUSIVE_GATHER,
            "one kernel offset: each input row reaches at most one output row (pure gather)",
        )
    rb.reject(
        INPUT_EXCLUSIVE_GATHER,
        f"kernel_volume == 1 (each input row reaches up to {req.kernel_volume} output rows)",
    )
    return rb.take(
        SCATTER_GENERAL,
        "per kernel offset, scatter-add into dX (edges of one offset share no input row)",
    )


def route_global_pool(req: GlobalPoolRequest, cap: Capability | None = None) -> Route:
    """Global pooling: rows sorted by batch member, fixed runs of rows reduced in parallel."""
    cap = cap or capability()
    _check(req.op, req.dtype, req.mode)
    facts = facts_of(req, "mode", "dtype", "channels", "n_in", "batch_size", "device")
    rb = RouteBuilder(req.op, facts)
    backend = gpu_kernels(rb, req.device, BATCH_ATOMIC_REDUCE.algorithm, cap)
    if backend is not None:
        facts["backward"] = f"{backend}.batch_gather"
        how = (
            "the largest order key per member and channel, then the smallest row holding it (NaN "
            "largest, ties to the smallest row, as the CPU), its value gathered; exact"
            if req.mode == "max"
            else "float32 sums flushed with one atomic add per run and member (the last bits may vary "
            "run to run)" + ("; divided by the member's row count" if req.mode == "avg" else "")
        )
        return rb.take(
            BATCH_ATOMIC_REDUCE[backend],
            f"one thread per run of 64 rows and channel reduces while the batch member stays the same "
            f"(rows need not be sorted): {how}; backward a gather of dY by member (max: into the argmax "
            "rows)",
        )
    facts["backward"] = "cpu.input_exclusive_gather"
    return rb.take(
        BATCH_SEGMENT_REDUCE,
        "rows counting-sorted by batch member, runs of 4096 rows reduced in parallel and combined in "
        "row order; backward is a pure gather (each row belongs to one member)",
    )
