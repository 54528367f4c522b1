"""Pooling on the GPU (``cuda/pool.cu``, ``kernels/pool.inc``): sum / max / avg over the
relation's dense map and the weighted contributor average of pool transpose / trilinear
upsampling (``map_pool``), global pooling per batch member (``global_pool``); the
``map_pool``, ``map_pool_grad`` and ``batch_atomic_reduce`` routes."""

from __future__ import annotations

import functools

import mlx.core as mx

from lattice.backends.cuda.launch import check_index_range, i32, int_params, launch
from lattice.backends.cuda.relations import in_major_map
from lattice.core.buffers import arange
from lattice.routing import pool as routes
from lattice.routing.registry import Vjp, implements

_POOL_MODES = {"sum": 0, "max": 1, "avg": 2}


@functools.lru_cache(maxsize=64)
def _offset_weights(weights: tuple[float, ...]) -> mx.array:
    return mx.array(weights, dtype=mx.float32)


def pool(feats: mx.array, nmap: mx.array, mode: str, weights: tuple[float, ...] | None = None):
    """(pooled (n_out, C), argmax input row per output value or -1) of ``feats`` over a dense
    map; ``weights`` (one per kernel offset, default 1) weight sum and avg, avg dividing by
    the weights of the offsets present. Not differentiable: ``map_pool`` is."""
    n_out, kv = int(nmap.shape[0]), int(nmap.shape[1])
    ch = int(feats.shape[1])
    with mx.stream(mx.gpu):
        if n_out == 0 or ch == 0 or int(feats.shape[0]) == 0:
            return mx.zeros((n_out, ch), dtype=feats.dtype), mx.full((n_out, ch), -1, dtype=mx.int32)
        check_index_range(
            "map_pool", features=int(feats.shape[0]) * ch, output=n_out * ch, neighbor_map=n_out * kv
        )
        y, arg = launch(
            "pool",
            "pool_map",
            [
                feats,
                nmap,
                _offset_weights(weights or (1.0,) * kv),
                int_params(n_out, kv, ch, _POOL_MODES[mode]),
            ],
            [(n_out, ch), (n_out, ch)],
            [feats.dtype, mx.int32],
            n_out * ch,
            template=[("T", feats.dtype)],
        )
        return y, arg


def _pool_fn(rel, mode: str, weights: tuple[float, ...] | None):
    """Differentiable pooling over ``rel``'s map (one per relation, mode and weights): returns
    (pooled, argmax rows). VJP in MLX ops: max scatter-adds into the forward pass's argmax
    rows (ties went to the smallest row); sum and avg gather the output gradients through
    the inverse map, weighted per offset (a pure gather, no atomics)."""

    def make():
        @mx.custom_function
        def pool_op(x):
            return pool(x, rel.neighbor_map, mode, weights)

        @pool_op.vjp
        def pool_vjp(primals, cotangents, outputs):
            x = primals  # one primal: MLX passes the array itself
            n_in, ch = int(x.shape[0]), int(x.shape[1])
            n_out = rel.n_out
            dy = cotangents[0].astype(mx.float32)
            if n_in == 0 or n_out == 0 or ch == 0:
                return mx.zeros_like(x)
            if mode == "max":
                arg = mx.stop_gradient(outputs[1])
                flat = mx.where(arg >= 0, arg * ch + arange(ch, dtype=mx.int32), n_in * ch).reshape(-1)
                dx = mx.zeros((n_in * ch + 1,), dtype=mx.float32).at[flat].add(dy.reshape(-1))
                return dx[:-1].reshape(n_in, ch).astype(x.dtype)
            w = None if weights is None else _offset_weights(weights)
            if mode == "avg":
                present = rel.neighbor_map >= 0
                total = (
                    mx.sum(present, axis=1).astype(mx.float32)
                    if w is None
                    else mx.sum(mx.where(present, w, 0.0), axis=1)
                )
                dy = dy / mx.where(total > 0, total, 1.0)[:, None]
            padded = mx.concatenate([dy, mx.zeros((1, ch), dtype=mx.float32)])
            inv = in_major_map(rel)
            parts = mx.take(padded, mx.where(inv < 0, n_out, inv), axis=0)  # (n_in, K, C)
            if w is not None:
                parts = parts * w[None, :, None]
            return parts.sum(axis=1).astype(x.dtype)

        return pool_op

    return rel.cached(f"cuda_pool_{mode}_{weights}", make)


def map_pool(feats: mx.array, rel, mode: str, weights: tuple[float, ...] | None = None) -> mx.array:
    """Local sum / max / avg pooling over the relation's dense map, or (``weights`` per
    offset, avg) the contributor average of upsampling (differentiable)."""
    with mx.stream(mx.gpu):
        return _pool_fn(rel, mode, weights)(feats)[0]


_GLOBAL_RUN = 64  # rows per thread of the global pooling kernels


def _global_sum(feats: mx.array, batch: mx.array, batch_size: int) -> mx.array:
    """float32 (batch_size, C) sums of the rows of each member (not differentiable)."""
    n, ch = int(feats.shape[0]), int(feats.shape[1])
    (acc,) = launch(
        "pool",
        "global_sum",
        [feats, batch, int_params(n, ch, _GLOBAL_RUN)],
        [(batch_size, ch)],
        [mx.float32],
        -(-n // _GLOBAL_RUN) * ch,
        template=[("T", feats.dtype)],
        init=0,
    )
    return acc


def _global_argmax(feats: mx.array, batch: mx.array, batch_size: int) -> mx.array:
    """(batch_size, C) row of each member's largest value per channel (NaN largest, ties to
    the smallest row); 0 for a member without rows."""
    n, ch = int(feats.shape[0]), int(feats.shape[1])
    params, threads, template = (
        int_params(n, ch, _GLOBAL_RUN),
        -(-n // _GLOBAL_RUN) * ch,
        [("T", feats.dtype)],
    )
    (key,) = launch(
        "pool",
        "global_max_key",
        [feats, batch, params],
        [(batch_size, ch)],
        [mx.uint32],
        threads,
        template=template,
        init=0,
    )
    (winner,) = launch(
        "pool",
        "global_argmax",
        [feats, batch, key, params],
        [(batch_size, ch)],
        [mx.uint32],
        threads,
        template=template,
        init=0,
    )
    return mx.where(winner > 0, n - winner.astype(mx.int32), 0)


def global_pool(feats: mx.array, batch: mx.array, batch_size: int, mode: str, counts: mx.array) -> mx.array:
    """Dense (batch_size, C) sum / max / avg of the rows of each batch member (differentiable:
    the backward is a gather of dY by batch member, max's a scatter into the argmax rows).
    ``counts``: rows per member (the tensor's ``batch_counts``, which the op has already
    read; avg divides by them). Sums go through float32 atomics (their order, and so the
    last bits, may vary run to run); max is exact. Max needs every member to have rows (the
    op checks)."""
    n, ch = int(feats.shape[0]), int(feats.shape[1])
    with mx.stream(mx.gpu):
        if batch_size == 0 or ch == 0 or n == 0:
            return mx.zeros((batch_size, ch), dtype=feats.dtype)
        check_index_range("global_pool", features=n * ch, output=batch_size * ch)
        batch = i32(batch)
        if mode == "max":
            arg = mx.stop_gradient(_global_argmax(feats, batch, batch_size))
            return mx.take_along_axis(feats, arg, axis=0)  # MLX differentiates the gather
        if mode == "avg":  # members past the last batch index have no rows: divide by 1
            divisor = mx.maximum(counts.astype(mx.float32), 1.0)
            pad = batch_size - int(divisor.shape[0])
            divisor = (mx.concatenate([divisor, mx.ones((pad,))]) if pad else divisor)[:, None]
        else:
            divisor = None

        @mx.custom_function
        def reduce(x):
            acc = _global_sum(x, batch, batch_size)
            return (acc if divisor is None else acc / divisor).astype(x.dtype)

        @reduce.vjp
        def reduce_vjp(primals, cotangent, output):
            dy = cotangent.astype(mx.float32)
            if divisor is not None:
                dy = dy / divisor
            return mx.take(dy, batch, axis=0).astype(primals.dtype)

        return reduce(feats)


@implements(routes.MAP_POOL.cuda)
def map_pool_route(feats: mx.array, rel, mode: str, *, backward: str, weights=None) -> mx.array:
    """The pooling routes' contract over ``map_pool`` (whose VJP is the ``map_pool_grad`` route)."""
    return map_pool(feats, rel, mode, weights)


@implements(routes.BATCH_ATOMIC_REDUCE.cuda)
def batch_atomic_reduce(feats: mx.array, batch: mx.array, batch_size: int, mode: str, counts: mx.array):
    """The global pooling route: ``global_pool``."""
    return global_pool(feats, batch, batch_size, mode, counts)


routes.POOL_BACKWARD.register(
    routes.MAP_POOL_GRAD.cuda, Vjp(f"{__name__}.map_pool", "MLX ops over the (inverse) neighbour map")
)
