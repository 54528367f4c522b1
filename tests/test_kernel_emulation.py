"""The GPU row-order kernels (kernels/relations.inc: ``lt_row_keys``, ``lt_key_order``) run
on the CPU, each group of 256 threads as 256 threads meeting at a barrier
(tests/emulation/order_kernels.cpp), against NumPy: the masks, the key counts, the grouped
order. Their sources are the ones the installed package ships to the GPU."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

import lattice
from lattice.backends.cuda.relations import _ORDER_KEYS as KEYS  # LT_ORDER_KEYS (a source test checks)
from lattice.backends.kernels import source_root
from lattice.core.kernel import KernelSpec

HARNESS = Path(__file__).parent / "emulation" / "order_kernels.cpp"


@pytest.fixture(scope="module")
def order_kernels(tmp_path_factory):
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler")
    exe = tmp_path_factory.mktemp("emulation") / "order_kernels"
    build = [cxx, "-std=c++20", "-O1", "-pthread", f"-I{source_root()}", str(HARNESS), "-o", str(exe)]
    done = subprocess.run(build, capture_output=True, text=True)
    if done.returncode != 0 and "barrier" in done.stderr:
        pytest.skip(f"{cxx} has no C++20 <barrier>")
    assert done.returncode == 0, done.stderr
    return exe


def _run(exe, m: np.ndarray, tmp_path: Path):
    n, kv = m.shape
    src, out = tmp_path / "map.bin", tmp_path / "out.bin"
    with open(src, "wb") as f:
        np.array([n, kv], np.int32).tofile(f)
        np.ascontiguousarray(m, np.int32).tofile(f)
    subprocess.run([str(exe), str(src), str(out)], check=True, timeout=300)
    d = np.fromfile(out, np.uint32)
    assert d.size == 2 * n + 2 * KEYS
    return d[:n], d[n : n + KEYS], d[n + KEYS : 2 * n + KEYS].view(np.int32), d[2 * n + KEYS :]


def _check(exe, m: np.ndarray, tmp_path: Path) -> np.ndarray:
    masks, counts, order, taken = _run(exe, m, tmp_path)
    kv = m.shape[1]
    want = np.zeros(len(m), np.uint64)
    for k in range(kv):  # one bit per offset up to 32 offsets, buckets k * 32 // K beyond
        want |= (m[:, k] >= 0).astype(np.uint64) << np.uint64(k * 32 // kv)
    np.testing.assert_array_equal(masks.astype(np.uint64), want)
    np.testing.assert_array_equal(counts, np.bincount((want & (KEYS - 1)).astype(np.int64), minlength=KEYS))
    np.testing.assert_array_equal(taken, counts)  # every position reserved once
    np.testing.assert_array_equal(np.sort(order), np.arange(len(m)))
    assert np.all(np.diff((want[order] & (KEYS - 1)).astype(np.int64)) >= 0)
    return order


@pytest.mark.parametrize("k", [2, 3, 5])
@pytest.mark.parametrize("rows", [0, 1, 700, 4096, 4097, 9001])
def test_grouped_order_of_random_maps(order_kernels, tmp_path, rows, k):
    """Maps of 2^3, 3^3, 5^3 offsets (5^3: masks of bucketed bits), no rows, one, part of a
    group of 4096, one whole, one and a row, several; a fifth of the rows read nothing."""
    rng = np.random.default_rng(rows * 10 + k)
    kv = k**3
    m = np.where(rng.random((rows, kv)) < 0.4, rng.integers(0, max(rows, 1), (rows, kv)), -1)
    m[: rows // 5] = -1
    _check(order_kernels, m.astype(np.int32), tmp_path)


def test_grouped_order_of_a_submanifold_map_with_an_empty_batch_member(order_kernels, tmp_path):
    """A real submanifold map (batches 0 and 2 of random voxels, batch 1 empty): grouped, a
    tile of 64 rows reads fewer offsets than in the rows' own order."""
    rng = np.random.default_rng(7)
    xyz = np.unique(rng.integers(0, 24, (12000, 3)), axis=0)
    b = rng.choice([0, 2], len(xyz))
    coords = np.concatenate([b[:, None], xyz], axis=1).astype(np.int32)
    x = lattice.SparseTensor(coords, np.zeros((len(coords), 1), np.float32))
    rel = x.coord_manager.relation("submanifold", x.coord_key, KernelSpec(3, op="test"), device="cpu")
    m = np.asarray(rel.neighbor_map)
    order = _check(order_kernels, m, tmp_path)

    def offsets_a_tile(rows):
        t = -(-len(rows) // 64)
        used = np.concatenate([m[rows] >= 0, np.zeros((t * 64 - len(rows), 27), bool)])
        return used.reshape(t, 64, 27).any(axis=1).sum(axis=1).mean()

    assert offsets_a_tile(order) < offsets_a_tile(np.arange(len(m)))
