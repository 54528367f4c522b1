"""Shared test fixtures: coordinate distributions and the real scan.

Distributions (DESIGN.md section 7, STYLE.md "Habits"): isolated points, a line,
a plane, a dense block, random sparse, a batch with an empty member, empty input
and a single point — all with negative coordinates — plus a real SemanticKITTI
scan from ``../shared/data`` (skipped cleanly when the data is absent).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# On a GPU the suite checks float32 results at float32 precision: MLX's switch (read by
# MLX's matmuls and lattice's CUDA conv) is pinned off before MLX runs anything, as MLX's
# own test harness does. The TF32 paths are tested with their own tolerances in
# test_cuda_routes.py.
if os.environ.get("LATTICE_TEST_DEVICE") == "gpu":
    os.environ.setdefault("MLX_ENABLE_TF32", "0")

import mlx.core as mx  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

# LATTICE_TEST_DEVICE=cpu|gpu runs the suite with that MLX default device (GPU tests use gpu).
if os.environ.get("LATTICE_TEST_DEVICE") in ("cpu", "gpu"):
    mx.set_default_device(getattr(mx, os.environ["LATTICE_TEST_DEVICE"]))


def point_cloud(kind: str, seed: int = 0) -> np.ndarray:
    """(N, 3) float32 points of one distribution (test_quantize, test_cuda_points)."""
    rng = np.random.default_rng(seed + sum(map(ord, kind)))
    if kind == "empty":
        return np.zeros((0, 3), np.float32)
    if kind == "single":
        return np.array([[-0.3, 1.7, -2.2]], np.float32)
    if kind == "random":  # many points per voxel, negative coordinates
        return rng.uniform(-3.0, 3.0, size=(2000, 3)).astype(np.float32)
    if kind == "isolated":
        return (rng.integers(-50, 50, size=(200, 3)) * 7.3).astype(np.float32)
    if kind == "line":
        t = np.linspace(-5, 5, 301)
        return np.stack([t, 0.5 * t - 1, np.full_like(t, 0.25)], axis=1).astype(np.float32)
    if kind == "plane":
        u, v = rng.uniform(-4, 4, size=(2, 1500))
        return np.stack([u, v, 0.1 * u + 0.05], axis=1).astype(np.float32)
    if kind == "on_boundaries":  # exact multiples of the voxel sizes used, positive and negative
        g = np.arange(-4, 5) * 0.5
        x, y, z = np.meshgrid(g, g, g, indexing="ij")
        return np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1).astype(np.float32)
    if kind == "far":  # far from the origin relative to the voxel size: float64 indices matter
        return (rng.uniform(-1, 1, size=(500, 3)) * 1e4 + 3e5).astype(np.float32)
    raise KeyError(kind)


# (kernel_size, stride, padding, dilation) of the forward relations and convolutions the
# oracle tests sweep (test_relations.py, test_conv.py).
FORWARD_GEOMETRIES = [
    (1, 1, 0, 1),
    (1, 2, 0, 1),
    (2, 1, 0, 1),
    (2, 2, 0, 1),
    (3, 1, 1, 1),
    (3, 2, 1, 1),
    (3, 2, 0, 2),
    (3, 3, 2, 1),
    (4, 2, 1, 1),
    (4, 3, 2, 2),
    (5, 1, 2, 1),
    (5, 3, 1, 2),
    ((3, 2, 1), (2, 1, 3), (1, 0, 2), (1, 2, 1)),
]


@pytest.fixture
def cpu_device():
    """MLX's default device is the CPU for this test: for tests of the CPU routes' own
    choices (route names, exclusive relations), which a GPU default would route to the
    GPU kernels (tested in test_cuda_routes.py)."""
    prev = mx.default_device()
    mx.set_default_device(mx.cpu)
    yield
    mx.set_default_device(prev)


CPU_GEMMS = ("blas", "avx2", "avx512")


def cpu_conv_route(packed: bool = False) -> str:
    """The CPU route a relation convolution takes in this process: lattice's tiled GEMM
    kernel where the CPU runs one (and LATTICE_CPU_GEMM does not say blas), else the BLAS."""
    from lattice.routing.device import capability

    tiled = capability().cpu_gemm != "blas"
    name = "tiled_gemm" if tiled else "gather_gemm_scatter"
    return f"cpu.{'dequant_' if packed else ''}{name}"


def using_cpu_gemm(name: str, monkeypatch):
    """Generator of a fixture: the CPU convolutions take GEMM ``name`` (``LATTICE_CPU_GEMM``)
    while it is suspended; a kernel this CPU does not run skips the test."""
    from lattice import _ext
    from lattice.routing.device import capability

    if name != "blas" and name not in _ext.conv_kernels():
        pytest.skip(f"this CPU does not run lattice's {name} kernel")
    monkeypatch.setenv("LATTICE_CPU_GEMM", name)
    capability.cache_clear()
    yield name
    monkeypatch.undo()
    capability.cache_clear()


@pytest.fixture(params=CPU_GEMMS)
def cpu_gemm(request, monkeypatch):
    """The CPU convolutions take this GEMM (``LATTICE_CPU_GEMM``) for the test: the BLAS and
    each of lattice's kernels the CPU runs (the others skip), so every fast route meets the
    same oracle."""
    yield from using_cpu_gemm(request.param, monkeypatch)


TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # `import reference` under any pytest import mode
    sys.path.insert(0, str(TESTS))

REPO = TESTS.parent
DATA = REPO / ".." / "shared" / "data"
KITTI_SCAN = DATA / "semantickitti" / "seq00_000000.bin"


def _coords(xyz, batch=0) -> np.ndarray:
    xyz = np.asarray(xyz, dtype=np.int64).reshape(-1, 3)
    b = np.broadcast_to(np.asarray(batch, dtype=np.int64), (len(xyz),))
    return np.concatenate([b[:, None], xyz], axis=1).astype(np.int32)


def _unique_random(rng, n, lo, hi) -> np.ndarray:
    pts = np.unique(rng.integers(lo, hi + 1, size=(n * 2, 3)), axis=0)
    return pts[rng.permutation(len(pts))[:n]]


def make_cloud(name: str) -> np.ndarray:
    """An (N, 4) int32 (batch, x, y, z) coordinate set of the named distribution."""
    rng = np.random.default_rng(sum(map(ord, name)))  # deterministic per name
    if name == "empty":
        return np.zeros((0, 4), np.int32)
    if name == "single":
        return _coords([[3, -2, 5]])
    if name == "isolated":  # no two points within 8 of each other
        cells = _unique_random(rng, 40, -4, 4)
        return _coords(cells * 9 - 3)
    if name == "line":
        x = np.arange(-12, 13)
        return _coords(np.stack([x, np.full_like(x, -1), np.full_like(x, 2)], axis=1))
    if name == "plane":
        x, y = np.meshgrid(np.arange(-6, 7), np.arange(-5, 6), indexing="ij")
        return _coords(np.stack([x.ravel(), y.ravel(), np.full(x.size, -3)], axis=1))
    if name == "dense_block":  # a full 12^3 grid
        g = np.arange(-6, 6)
        x, y, z = np.meshgrid(g, g, g, indexing="ij")
        pts = np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1)
        return _coords(pts[rng.permutation(len(pts))])
    if name == "random_sparse":
        return _coords(_unique_random(rng, 300, -15, 15))
    if name == "batched":  # batch members 0 and 2; member 1 is empty; xyz overlap across members
        a = _unique_random(rng, 150, -8, 8)
        b = _unique_random(rng, 120, -8, 8)
        c = np.concatenate([_coords(a, 0), _coords(b, 2)])
        return c[rng.permutation(len(c))]
    raise KeyError(name)


CLOUDS = ("empty", "single", "isolated", "line", "plane", "dense_block", "random_sparse", "batched")
SMALL_CLOUDS = ("empty", "single", "isolated", "line", "plane", "random_sparse", "batched")


@pytest.fixture(params=CLOUDS)
def cloud(request) -> np.ndarray:
    """Each coordinate distribution in turn."""
    return make_cloud(request.param)


def load_kitti_points() -> np.ndarray:
    """The SemanticKITTI scan as float32 (N, 4): x, y, z, remission."""
    if not KITTI_SCAN.is_file():
        pytest.skip(f"shared data not found: {KITTI_SCAN}")
    return np.fromfile(KITTI_SCAN, dtype=np.float32).reshape(-1, 4)


@pytest.fixture(scope="session")
def kitti_points() -> np.ndarray:
    return load_kitti_points()


@pytest.fixture(scope="session")
def kitti_coords(kitti_points) -> np.ndarray:
    """The scan voxelised at 0.2 m (batch 0) and at 0.4 m (batch 2); batch 1 is empty.

    Voxels come from NumPy (``np.unique`` of ``floor(p / v)``), independent of the library.
    """
    parts = []
    for batch, voxel in ((0, 0.2), (2, 0.4)):
        vox = np.floor(kitti_points[:, :3].astype(np.float64) / voxel).astype(np.int64)
        parts.append(_coords(np.unique(vox, axis=0), batch))
    c = np.concatenate(parts)
    return c[np.random.default_rng(0).permutation(len(c))]
