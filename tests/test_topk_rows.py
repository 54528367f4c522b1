"""topk_rows: per-batch top rows by the first feature channel, against the oracle."""

from __future__ import annotations

import mlx.core as mx
import numpy as np
import pytest
from conftest import CLOUDS, make_cloud
from reference import rows as rr

import lattice
import mlx_lattice
from lattice.ops import prune, sparse_collate, topk_rows


def _scores(n: int, kind: str, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "normal":
        return rng.normal(size=n).astype(np.float32)
    if kind == "ties":  # few distinct values: the tie rule decides
        return rng.integers(0, 3, n).astype(np.float32)
    if kind == "constant":
        return np.full(n, 0.5, np.float32)
    return np.arange(n, dtype=np.float32)[::-1].copy()  # descending


def _tensor(coords: np.ndarray, kind: str, channels: int = 3, batch_size: int | None = None):
    scores = _scores(len(coords), kind, len(coords) + channels)
    feats = np.concatenate([scores[:, None], np.ones((len(coords), channels - 1), np.float32)], axis=1)
    counts = None
    if batch_size is not None:
        counts = np.bincount(coords[:, 0], minlength=batch_size)
    return lattice.SparseTensor(coords, feats, batch_counts=counts), scores


def _check(x, scores, counts, rho):
    got = topk_rows(x, counts, rho=rho)
    assert got.dtype == mx.int32 and got.ndim == 1
    want = rr.topk_rows(np.asarray(x.batch_indices), scores, counts, rho)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want, np.int64))
    return got


@pytest.mark.parametrize("kind", ["normal", "ties", "constant", "descending"])
@pytest.mark.parametrize("name", CLOUDS)
def test_topk_rows_matches_reference(name, kind):
    c = make_cloud(name)  # "batched": members 0 and 2, member 1 empty, rows shuffled across members
    x, scores = _tensor(c, kind, batch_size=4 if name == "batched" else None)
    b = x.batch_size
    sizes = np.asarray(x.batch_counts)
    for counts in ([3] * b, (sizes // 2).tolist(), (sizes + 5).tolist(), [0] * b, [-2] * b):
        for rho in (1.0, 0.5, 2.5):
            _check(x, scores, counts, rho)


def test_topk_rows_of_collated_samples():
    rng = np.random.default_rng(4)
    coords = [np.unique(rng.integers(0, 9, (n, 3)), axis=0) for n in (40, 0, 25, 7)]
    feats = [rng.normal(size=(len(c), 2)).astype(np.float32) for c in coords]
    x = sparse_collate(coords, feats)
    scores = np.concatenate([f[:, 0] for f in feats])
    got = _check(x, scores, [10, 3, 30, 1], 0.7)  # k = 7, 0, 21, 0
    assert len(got) == 7 + 21
    kept = prune(x, got)  # the rows select with prune
    np.testing.assert_array_equal(np.asarray(kept.feats[:, 0]), scores[np.asarray(got)])


def test_topk_rows_order_and_ties():
    coords = np.array([[0, i, 0, 0] for i in range(5)] + [[1, i, 0, 0] for i in range(3)], np.int32)
    feats = np.array([[1], [5], [3], [5], [0], [2], [2], [9]], np.float32)
    x = lattice.SparseTensor(coords, feats)
    # member 0: scores 1 5 3 5 0 -> top 3 ascending: 3 (row 2), 5 (row 1), 5 (row 3: later ranks higher)
    np.testing.assert_array_equal(np.asarray(topk_rows(x, [3, 2])), [2, 1, 3, 6, 7])
    np.testing.assert_array_equal(np.asarray(topk_rows(x, [1, 1], rho=1.9)), [3, 7])  # int(1 * 1.9) = 1 each
    np.testing.assert_array_equal(np.asarray(topk_rows(x, [3, 1], rho=0.5)), [3])  # k = 1, 0
    got = topk_rows(x, [0, 0])
    assert got.shape == (0,) and got.dtype == mx.int32


def test_topk_rows_checks_its_arguments():
    x, _ = _tensor(make_cloud("batched"), "normal")
    with pytest.raises(ValueError, match=r"\[topk_rows\] rho must be positive, got 0"):
        topk_rows(x, [1, 1, 1], rho=0)
    with pytest.raises(
        ValueError, match=r"\[topk_rows\] counts must have one entry per batch member \(3\), got 2"
    ):
        topk_rows(x, [1, 1])
    with pytest.raises(TypeError, match=r"\[topk_rows\] rho must be a number"):
        topk_rows(x, [1, 1, 1], rho="1")
    no_channels = lattice.SparseTensor(make_cloud("line"), np.zeros((25, 0), np.float32))
    with pytest.raises(ValueError, match=r"\[topk_rows\] x has no feature channel to score"):
        topk_rows(no_channels, [2])


def test_topk_rows_is_the_documented_one_and_explains():
    assert mlx_lattice.ops.topk_rows is topk_rows and mlx_lattice.ops.tensor.topk_rows is topk_rows
    x, _ = _tensor(make_cloud("plane"), "normal")
    device = "gpu" if mx.default_device() == mx.gpu else "cpu"
    assert lattice.explain(topk_rows, x, [4]).name == f"{device}.mlx_ops"
    assert mx.array_equal(topk_rows(x, mx.array([4])), topk_rows(x, (4,)))
