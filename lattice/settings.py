"""Every environment variable lattice reads, read here and nowhere else.

Nothing else in ``lattice`` (nor the native core in ``csrc/``) calls ``os.environ`` or
``getenv`` for its own settings: the native core's settings are read here and handed to it
once, as it loads (``lattice._ext`` calls ``configure_native`` at the end of its module
init); the Python ones are read by the functions below,
each saying when it is read; ``lattice.settings.current()`` gives each with its value here.

- ``LATTICE_NUM_THREADS``: threads of the CPU core's pool (default: the CPUs this process
  may run on). Read once, at import.
- ``LATTICE_CONV_TILE_FLOATS``: floats of one gathered tile of the CPU convolution (default
  16384, at least 1024: the tile stays in L2). Read once, at import.
- ``LATTICE_CPU_GEMM``: which GEMM kernel the CPU convolutions take: ``auto`` (default: the
  best of lattice's float32 kernels this CPU runs, else the BLAS), ``blas``, ``avx2``,
  ``avx512``, ``avx512_bf16`` — products of operands rounded to bfloat16, sums in float32,
  about twice the multiply-adds per second where the CPU has AVX-512 BF16 — or ``amx_bf16``,
  the same products on AMX tiles (Intel Sapphire Rapids and later, Linux 5.16 and later); the
  two rounding kernels are never chosen by ``auto`` (a kernel this CPU cannot run is an error
  at the first routing decision). Read once, with the device capability.
- ``LATTICE_MALLOC_TUNING``: ``0`` keeps glibc's allocator thresholds as they are (default:
  large buffers stay on the heap, docs/performance.md); glibc's own
  ``MALLOC_MMAP_THRESHOLD_`` / ``MALLOC_TRIM_THRESHOLD_`` win where set. Read once, at import.
- ``LATTICE_METAL_KERNELS``: ``1`` routes the GPU ops to lattice's Metal kernels (never run
  on Apple hardware; docs/backend.md). Read once, with the device tier.
- ``LATTICE_MAX_POINTS``: the most points a reader accepts from a file header (default
  2^31 - 1; docs/io.md, "Hostile input"). Read at every read, so a wrapper or a test can
  lower it.
- ``MLX_ENABLE_TF32``: MLX's own switch (default on; ``0`` off), followed by lattice's CUDA
  convolution kernels so float32 rounds as MLX's matmuls do. Read at every routing decision
  that depends on it.

``worker_threads(workers)`` is the one place that writes the environment: for the worker
processes a batch starts (``lattice.pipeline.executors``), so that they share the CPUs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

NUM_THREADS = "LATTICE_NUM_THREADS"
CONV_TILE_FLOATS = "LATTICE_CONV_TILE_FLOATS"
MALLOC_TUNING = "LATTICE_MALLOC_TUNING"
CPU_GEMM = "LATTICE_CPU_GEMM"
CPU_GEMM_CHOICES = ("auto", "blas", "avx2", "avx512", "avx512_bf16", "amx_bf16")
METAL_KERNELS = "LATTICE_METAL_KERNELS"
MAX_POINTS = "LATTICE_MAX_POINTS"
TF32 = "MLX_ENABLE_TF32"

DEFAULT_CONV_TILE_FLOATS = 1 << 14
DEFAULT_MAX_POINTS = 2**31 - 1


_WORKER_THREAD_VARS = (NUM_THREADS, "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


@contextmanager
def worker_threads(workers: int) -> Iterator[None]:
    """While processes are started in this block, give each ``cpu_count // workers`` threads
    (``LATTICE_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``; any the user set
    are kept); the environment is restored after."""
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    saved = {k: os.environ.get(k) for k in _WORKER_THREAD_VARS}
    for k in _WORKER_THREAD_VARS:
        os.environ.setdefault(k, threads)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _get(name: str) -> str:
    return os.environ.get(name, "").strip()


def num_threads() -> int:
    """``LATTICE_NUM_THREADS`` as a positive count, 0 where unset or not positive (the pool
    then takes the CPUs this process may run on)."""
    try:
        return max(0, int(_get(NUM_THREADS) or 0))
    except ValueError:
        return 0


def conv_tile_floats() -> int:
    """``LATTICE_CONV_TILE_FLOATS``, at least 1024 (default 16384)."""
    try:
        value = int(_get(CONV_TILE_FLOATS) or DEFAULT_CONV_TILE_FLOATS)
    except ValueError:
        value = DEFAULT_CONV_TILE_FLOATS
    return max(1024, value)


def malloc_tuning() -> tuple[bool, bool]:
    """Whether to raise glibc's mmap threshold and its trim threshold: both unless
    ``LATTICE_MALLOC_TUNING=0``, each unless glibc's own variable for it is set."""
    if _get(MALLOC_TUNING) == "0":
        return False, False
    return "MALLOC_MMAP_THRESHOLD_" not in os.environ, "MALLOC_TRIM_THRESHOLD_" not in os.environ


def cpu_gemm() -> str:
    """``LATTICE_CPU_GEMM``: ``auto`` (default), ``blas``, ``avx2``, ``avx512``, ``avx512_bf16``
    or ``amx_bf16``; any other value is a ``ValueError`` naming the variable."""
    value = _get(CPU_GEMM).lower() or "auto"
    if value not in CPU_GEMM_CHOICES:
        raise ValueError(f"{CPU_GEMM} must be one of {', '.join(CPU_GEMM_CHOICES)}, got {value!r}")
    return value


def metal_kernels() -> bool:
    """``LATTICE_METAL_KERNELS=1``: route GPU ops to the (never run) Metal kernels."""
    return _get(METAL_KERNELS) == "1"


def max_points() -> int:
    """``LATTICE_MAX_POINTS`` (underscores allowed: ``1_000_000``), default 2^31 - 1; a value
    that is not a positive integer is a ``ValueError`` naming the variable."""
    raw = _get(MAX_POINTS)
    if not raw:
        return DEFAULT_MAX_POINTS
    try:
        value = int(raw.replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{MAX_POINTS} must be a positive integer, got {raw!r}")
    return value


def tf32_enabled() -> bool:
    """MLX's ``MLX_ENABLE_TF32`` (on unless ``0``)."""
    return os.environ.get(TF32, "1") != "0"


def configure_native(ext) -> None:
    """Hands the native core its settings (called once, by ``lattice._ext`` as it loads,
    before any op runs: the thread pool is sized at its first job)."""
    mmap, trim = malloc_tuning()
    ext.configure(num_threads(), conv_tile_floats(), mmap, trim)


def current() -> dict[str, object]:
    """Each variable with the value lattice takes from it here (``max_points`` as its error
    text where the value is malformed)."""
    try:
        points: object = max_points()
    except ValueError as e:
        points = str(e)
    try:
        gemm: object = cpu_gemm()
    except ValueError as e:
        gemm = str(e)
    mmap, trim = malloc_tuning()
    return {
        NUM_THREADS: num_threads() or "all CPUs",
        CPU_GEMM: gemm,
        CONV_TILE_FLOATS: conv_tile_floats(),
        MALLOC_TUNING: {"mmap_threshold": mmap, "trim_threshold": trim},
        METAL_KERNELS: metal_kernels(),
        MAX_POINTS: points,
        TF32: tf32_enabled(),
    }
