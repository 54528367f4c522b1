"""Index ranges that may be empty: ``lattice.core.buffers.arange`` is the only way lattice
makes them, because MLX 0.32.4's CUDA backend gives an evaluated empty ``mx.arange`` no
buffer and reading it back crashes the process (a segmentation fault on the H200:
``np.asarray(mx.arange(0))``)."""

from __future__ import annotations

import re
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

import lattice
from lattice.core.buffers import arange
from lattice.ops import build_sparse_alignment

ROOT = Path(__file__).resolve().parent.parent
HAS_CUDA = hasattr(mx, "cuda") and mx.cuda.is_available()


def test_no_raw_arange_in_the_library():
    found = []
    for package in ("lattice", "mlx_lattice"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.name == "buffers.py" and path.parent.name == "core":
                continue
            for i, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(r"\bmx\.arange\(", line):
                    found.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not found, "use lattice.core.buffers.arange:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "args", [(0,), (5,), (0, 0), (3, 3), (4, 1), (-1, 4), (0, 7, 2), (7, 0, -2), (2, 9, 3), (5, 5, -1)]
)
@pytest.mark.parametrize("dtype", [mx.int32, mx.int64, mx.uint32])
def test_arange_matches_numpy(args, dtype):
    if dtype == mx.uint32 and min(args) < 0:
        pytest.skip("unsigned range of negative values")
    got = arange(*args, dtype=dtype)
    want = np.arange(*args)
    assert got.dtype == dtype and got.shape == want.shape
    np.testing.assert_array_equal(np.asarray(got), want)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device in this process")
def test_empty_ranges_and_an_empty_join_read_back_on_the_gpu():
    with mx.stream(mx.gpu):
        e = arange(0)
        mx.eval(e)
        assert np.asarray(e).shape == (0,)
    c = np.array([[0, 1, 2, 3], [0, 2, 2, 3]], np.int32)
    with mx.stream(mx.gpu):
        a = build_sparse_alignment(
            mx.array(np.zeros((0, 4), np.int32)), None, mx.array(c), None, join="inner"
        )
        assert np.asarray(a.coords).shape == (0, 4)
        assert np.asarray(a.lhs_rows).shape == (0,) and np.asarray(a.rhs_rows).shape == (0,)


@pytest.mark.parametrize("name", ["relu", "silu", "sigmoid", "tanh", "gelu", "leaky_relu", "softplus"])
def test_activations_of_a_buffer_with_no_live_row(name):
    """An aligned tensor of capacity 1 and no live row (an inner join of disjoint sets):
    each activation gives empty features, readable (on the H200 relu used to end the
    process with SIGFPE: mlx.nn's compiled activations on an empty array)."""
    from lattice import ops

    x = lattice.SparseTensor(np.array([[0, 1, 2, 3]], np.int32), np.ones((1, 2), np.float32))
    y = lattice.SparseTensor(np.array([[0, 5, 5, 5], [0, 6, 6, 6]], np.int32), np.ones((2, 3), np.float32))
    out = ops.sparse_cat_aligned(x, y, join="inner")
    assert out.capacity == 1 and out.active_count == 0
    r = getattr(ops, name)(out)
    assert r.active_count == 0
    assert np.asarray(r.feats)[: r.active_count].shape == (0, 5)
