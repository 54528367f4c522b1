"""What the GPU glue of every family shares: kernel launch on MLX's GPU stream, sizes as
small int32 ``params`` arrays, the 32-bit index check."""

from __future__ import annotations

import functools

import mlx.core as mx

from lattice.backends import kernels
from lattice.routing.registry import NotRepresentable

__all__ = ["THREADS", "NotRepresentable", "check_index_range", "count_params", "i32", "int_params", "launch"]

THREADS = 256


def launch(family, name, inputs, shapes, dtypes, threads, *, template=None, init=None, grid_y=1, shared=0):
    """Run kernel ``name`` of ``family``: ``threads`` (rounded up to groups of ``THREADS``) x
    ``grid_y`` groups, ``shared`` bytes of dynamic shared memory (LT_SHARED_DYNAMIC)."""
    fn = kernels.kernel(kernels.dialect(), family, name, shared)
    return fn(
        inputs=inputs,
        output_shapes=shapes,
        output_dtypes=dtypes,
        grid=(max(int(threads), 1), grid_y, 1),
        threadgroup=(THREADS, 1, 1),
        template=template or [],
        init_value=init,
        stream=mx.gpu,
    )


@functools.lru_cache(maxsize=512)
def _param_array(values: tuple[int, ...]) -> mx.array:
    return mx.array(values, dtype=mx.int32)


def int_params(*values) -> mx.array:
    """Kernel sizes as a small int32 array (kept per distinct tuple: no upload per call)."""
    return _param_array(tuple(int(v) for v in values))


def count_params(count: mx.array | None, n: int, *rest) -> mx.array:
    """``int_params(n, *rest)`` for a kernel that stops at row ``params[0]``: with ``count`` (a
    lazily counted set's int32 scalar, ``lazy_rows``) that bound is taken on the GPU, so the
    rows past the count are skipped without reading it."""
    if count is None:
        return int_params(n, *rest)
    return mx.concatenate([i32(count).reshape(1), int_params(*rest)])


def check_index_range(op: str, **extents: int) -> None:
    """The kernels index with 32-bit ints: every flat extent (rows x columns of an array
    they read or write) must stay below 2^31, else a clear error instead of wrong memory."""
    for name, n in extents.items():
        if n >= 2**31:
            raise ValueError(
                f"[{op}] {name} has {n:,} elements; lattice's CUDA kernels index arrays below 2^31 "
                "elements (split the batch)"
            )


def i32(a: mx.array) -> mx.array:
    return a if a.dtype == mx.int32 else a.astype(mx.int32)
