"""Smoke tests: the native module loads, runs an op on a real mx.array, and links an optimised BLAS."""

from __future__ import annotations

import platform

import mlx.core as mx
import numpy as np

import lattice
from lattice import _ext, ops
from lattice.core import lookup_coords


def test_native_module_is_loaded():
    assert lattice._ext is _ext
    assert _ext.__name__ == "lattice._ext"
    assert _ext.num_threads() >= 1


def test_native_op_on_a_real_mx_array():
    c = mx.array(np.array([[0, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 0], [1, 0, 0, 0]], np.int32))
    assert isinstance(c, mx.array)
    rel = ops.submanifold_kernel_relation(c, kernel_size=3)
    assert isinstance(rel.edges.in_rows, mx.array) and rel.edges.in_rows.dtype == mx.int32
    # four centre edges plus 0-1, 0-2 and 1-2 (a diagonal neighbour) both ways
    assert rel.edge_count == 10
    rows = lookup_coords(c, mx.array(np.array([[0, 1, 0, 0], [0, 5, 5, 5], [1, 0, 0, 0]], np.int32)))
    assert isinstance(rows, mx.array)
    assert np.asarray(rows).tolist() == [1, -1, 3]
    # results feed straight back into MLX ops
    assert int(mx.sum(rel.edges.out_rows >= 0).item()) == 10


def test_blas_sgemm_matches_numpy():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal((48, 32)).astype(np.float32)
    c = _ext.blas_sgemm(mx.array(a), mx.array(b))
    assert isinstance(c, mx.array) and c.shape == (64, 32) and c.dtype == mx.float32
    np.testing.assert_allclose(
        np.asarray(c), a.astype(np.float64) @ b.astype(np.float64), rtol=1e-4, atol=1e-4
    )


def test_blas_sgemm_edge_shapes():
    z = _ext.blas_sgemm(mx.zeros((3, 0)), mx.zeros((0, 5)))
    assert z.shape == (3, 5) and not np.asarray(z).any()
    assert _ext.blas_sgemm(mx.zeros((0, 4)), mx.zeros((4, 2))).shape == (0, 2)


def test_blas_vendor_is_optimised():
    vendor = _ext.blas_vendor()
    expected = "Accelerate" if platform.system() == "Darwin" else "OpenBLAS"
    assert expected in vendor
    assert lattice.backend_info().blas == vendor


def test_backend_info():
    info = lattice.backend_info()
    assert info.version == lattice.__version__
    assert info.mlx_version == mx.__version__
    assert "cpu" in info.compiled_backends
    assert info.cpu_threads >= 1
    # lattice's GPU kernels are routed under CUDA, or Metal when opted in; never without a GPU
    assert info.gpu_kernels == lattice.routing.capability().kernel_backend
    assert info.gpu_kernels in (("cuda", "metal") if info.gpu else (None,))
    cap = lattice.routing.capability()
    assert info.cpu_gemm.split(" ")[0] == cap.cpu_gemm and set(info.cpu_kernels) >= {cap.cpu_gemm} - {"blas"}
