"""Slow, obviously-correct oracles for every kernel-relation kind, and the checks
that compare a native ``KernelRelation`` against them.

The loop oracles follow DESIGN.md section 3 word for word, over Python dicts of
coordinate tuples:

- forward:     output support ``unique(floor(c / stride))``; for every output ``o``
               and offset ``k``, an edge when ``i = o * stride + k * dilation - padding``
               is an input coordinate;
- target:      the forward edge rule onto an explicit target support;
- submanifold: output support = input support; ``i = o + k * dilation`` (odd kernels);
- transposed:  for every input ``s`` and offset ``k``, ``t = s * stride + k * dilation -
               padding``; the generated support is the set of all such ``t``, or an
               explicit target keeps the edges whose ``t`` it holds;
- generative:  the transposed rule with padding 0 and dilation 1.

A reference relation is a :class:`RefRelation`: the output coordinates and the
edges as ``(kernel id, input row, output row)`` arrays. Generated output rows are
compared as *sets* of coordinates and edges as sets of ``(k, input row, output
coordinate)``, so row numbering never matters.

``*_vectorized`` builders are for a real scan (tens of thousands of rows); they
use ``np.unique`` / ``searchsorted`` lookups and are checked against the loop
oracles on small inputs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import coords as rc


@dataclass
class RefRelation:
    """Reference relation: output coordinates (M, 4) and edges (E,) each."""

    out_coords: np.ndarray
    kernel_ids: np.ndarray
    in_rows: np.ndarray
    out_rows: np.ndarray

    @property
    def edge_count(self) -> int:
        return int(self.kernel_ids.shape[0])

    def counts(self, n_kernels: int) -> np.ndarray:
        return np.bincount(self.kernel_ids, minlength=n_kernels)


def _triple(v) -> tuple[int, int, int]:
    return rc._triple(v)


def kernel_offsets(size, dilation=1) -> list[tuple[int, int, int]]:
    """Offsets of a kernel: odd sizes centred, even from 0, times dilation, z fastest."""
    size, dilation = _triple(size), _triple(dilation)

    def axis(n: int, d: int) -> list[int]:
        start = -(n // 2) if n % 2 == 1 else 0
        return [(start + j) * d for j in range(n)]

    ax, ay, az = (axis(n, d) for n, d in zip(size, dilation, strict=True))
    return [(x, y, z) for x in ax for y in ay for z in az]


def _relation(out_coords, edges) -> RefRelation:
    e = np.array(edges, dtype=np.int64).reshape(-1, 3)
    return RefRelation(rc.to_array(out_coords), e[:, 0], e[:, 1], e[:, 2])


# ---- loop oracles --------------------------------------------------------------------


def forward(coords, size=2, stride=2, padding=0, dilation=1) -> RefRelation:
    """Forward relation onto ``unique(floor(c / stride))``."""
    out = rc.tuples(rc.downsample(coords, stride))
    return target(coords, out, size, stride, padding, dilation)


def target(coords, target_coords, size=3, stride=1, padding=0, dilation=1) -> RefRelation:
    """Forward edge rule onto the given target rows (their order kept)."""
    inputs = rc.row_index(coords)
    offs = kernel_offsets(size, dilation)
    s, p = _triple(stride), _triple(padding)
    out = rc.tuples(target_coords)
    edges = []
    for orow, (b, *o) in enumerate(out):
        for k, off in enumerate(offs):
            i = (b, *(o[a] * s[a] + off[a] - p[a] for a in range(3)))
            if i in inputs:
                edges.append((k, inputs[i], orow))
    return _relation(out, edges)


def submanifold(coords, size=3, dilation=1) -> RefRelation:
    """Output support = input support; edge when ``o + k * dilation`` is an input."""
    assert all(v % 2 == 1 for v in _triple(size)), "submanifold kernels are odd"
    inputs = rc.row_index(coords)
    offs = kernel_offsets(size, dilation)
    edges = []
    for orow, (b, *o) in enumerate(rc.tuples(coords)):
        for k, off in enumerate(offs):
            i = (b, o[0] + off[0], o[1] + off[1], o[2] + off[2])
            if i in inputs:
                edges.append((k, inputs[i], orow))
    return _relation(rc.tuples(coords), edges)


def transposed(coords, size=2, stride=2, padding=0, dilation=1, target_coords=None) -> RefRelation:
    """``t = s * stride + k * dilation - padding`` from every input ``s`` and offset ``k``.

    Without a target the output support is every such ``t`` (first occurrence over
    (input row, offset) pairs); with one, an edge exists when ``t`` is a target row.
    """
    offs = kernel_offsets(size, dilation)
    st, p = _triple(stride), _triple(padding)
    generated = target_coords is None
    out: dict[tuple, int] = {} if generated else rc.row_index(target_coords)
    edges = []
    for srow, (b, *c) in enumerate(rc.tuples(coords)):
        for k, off in enumerate(offs):
            t = (b, *(c[a] * st[a] + off[a] - p[a] for a in range(3)))
            if generated and t not in out:
                out[t] = len(out)
            if t in out:
                edges.append((k, srow, out[t]))
    return _relation(out, edges)


def generative(coords, size=2, stride=2, target_coords=None) -> RefRelation:
    """Every coordinate of each input's kernel footprint (transposed, no padding/dilation)."""
    return transposed(coords, size, stride, 0, 1, target_coords)


# ---- vectorised oracles (large inputs) ------------------------------------------------


def submanifold_vectorized(coords, size=3, dilation=1) -> RefRelation:
    c = np.asarray(coords, np.int64).reshape(-1, 4)
    kid, ins, outs = [], [], []
    for k, off in enumerate(kernel_offsets(size, dilation)):
        q = c.copy()
        q[:, 1:] += np.array(off)
        rows = rc.lookup_vectorized(c, q)
        hit = np.nonzero(rows >= 0)[0]
        kid.append(np.full(len(hit), k))
        ins.append(rows[hit])
        outs.append(hit)
    return RefRelation(c, *(_cat(v) for v in (kid, ins, outs)))


def target_vectorized(coords, target_coords, size=3, stride=1, padding=0, dilation=1) -> RefRelation:
    c = np.asarray(coords, np.int64).reshape(-1, 4)
    t = np.asarray(target_coords, np.int64).reshape(-1, 4)
    s, p = np.array(_triple(stride)), np.array(_triple(padding))
    kid, ins, outs = [], [], []
    for k, off in enumerate(kernel_offsets(size, dilation)):
        q = t.copy()
        q[:, 1:] = t[:, 1:] * s + np.array(off) - p
        rows = rc.lookup_vectorized(c, q)
        hit = np.nonzero(rows >= 0)[0]
        kid.append(np.full(len(hit), k))
        ins.append(rows[hit])
        outs.append(hit)
    return RefRelation(t, *(_cat(v) for v in (kid, ins, outs)))


def forward_vectorized(coords, size=2, stride=2, padding=0, dilation=1) -> RefRelation:
    c = np.asarray(coords, np.int64).reshape(-1, 4)
    d = c.copy()
    d[:, 1:] = np.floor_divide(c[:, 1:], np.array(_triple(stride)))
    out, _ = rc.unique_first_vectorized(d)
    return target_vectorized(c, out, size, stride, padding, dilation)


def transposed_vectorized(coords, size=2, stride=2, padding=0, dilation=1, target_coords=None):
    c = np.asarray(coords, np.int64).reshape(-1, 4)
    offs = kernel_offsets(size, dilation)
    s, p = np.array(_triple(stride)), np.array(_triple(padding))
    # candidates[s_row, k] in scan order (input row major, offset minor)
    cand = np.repeat(c[:, None, :], len(offs), axis=1)
    cand[:, :, 1:] = c[:, None, 1:] * s + np.array(offs)[None] - p
    flat = cand.reshape(-1, 4)
    srow = np.repeat(np.arange(len(c)), len(offs))
    kid = np.tile(np.arange(len(offs)), len(c))
    if target_coords is None:
        out, orow = rc.unique_first_vectorized(flat)
        keep = np.ones(len(flat), bool)
    else:
        out = np.asarray(target_coords, np.int64).reshape(-1, 4)
        orow = rc.lookup_vectorized(out, flat)
        keep = orow >= 0
    order = np.argsort(kid[keep], kind="stable")
    return RefRelation(out, kid[keep][order], srow[keep][order], orow[keep][order])


def _cat(parts) -> np.ndarray:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


# ---- comparison ----------------------------------------------------------------------


def native_edges(rel) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(kernel ids, input rows, output rows) of the live edges of a native relation."""
    e = rel.edge_count
    return (
        np.asarray(rel.edges.kernel_ids)[:e].astype(np.int64),
        np.asarray(rel.edges.in_rows)[:e].astype(np.int64),
        np.asarray(rel.edges.out_rows)[:e].astype(np.int64),
    )


def _edge_keys(kid, ins, outs, n_in: int, n_out: int) -> np.ndarray:
    return np.sort((kid * max(n_in, 1) + ins) * max(n_out, 1) + outs)


def assert_relation_matches(rel, ref: RefRelation, n_in: int, *, same_out_order: bool = False) -> None:
    """Checks a native KernelRelation against a reference one.

    Output supports must be equal as sets (or row for row with ``same_out_order``,
    for explicit targets and submanifold relations); edges must be equal as sets of
    (kernel id, input row, output coordinate); edges must be grouped by offset with
    ``counts`` per offset; no edge may repeat; every row index must be in range.
    """
    out_native = np.asarray(rel.out_coords)[: rel.out_count].astype(np.int64).reshape(-1, 4)
    assert rel.out_count == len(ref.out_coords), (
        f"output rows: native {rel.out_count}, reference {len(ref.out_coords)}"
    )
    if same_out_order:
        np.testing.assert_array_equal(out_native, ref.out_coords)
        out_map = np.arange(len(out_native))
    else:
        out_map = rc.lookup_vectorized(ref.out_coords, out_native) if len(out_native) else np.zeros(0, int)
        missing = out_native[out_map < 0]
        assert len(missing) == 0, f"native outputs not in the reference support: {missing[:5].tolist()}"
        assert len(np.unique(out_map)) == len(out_map), "native output coordinates repeat"

    kid, ins, outs = native_edges(rel)
    K = rel.n_kernels
    assert kid.shape == ins.shape == outs.shape
    counts = np.asarray(rel.counts).astype(np.int64)
    assert counts.shape == (K,)
    assert int(counts.sum()) == rel.edge_count
    np.testing.assert_array_equal(np.bincount(kid, minlength=K), counts)
    assert np.all(np.diff(kid) >= 0), "edges are not grouped by kernel offset"
    if rel.edge_count:
        assert ins.min() >= 0 and ins.max() < n_in, "input row out of range"
        assert outs.min() >= 0 and outs.max() < rel.out_count, "output row out of range"
    for k in (0, K // 2, K - 1):
        a, b = rel.offset_edges(k)
        np.testing.assert_array_equal(np.asarray(a), ins[kid == k])
        np.testing.assert_array_equal(np.asarray(b), outs[kid == k])
    np.testing.assert_array_equal(counts, ref.counts(K), err_msg="edges per kernel offset")

    n_out = len(ref.out_coords)
    native_keys = _edge_keys(kid, ins, out_map[outs] if len(outs) else outs, n_in, n_out)
    assert len(np.unique(native_keys)) == len(native_keys), "an edge repeats"
    ref_keys = _edge_keys(ref.kernel_ids, ref.in_rows, ref.out_rows, n_in, n_out)
    if not np.array_equal(native_keys, ref_keys):
        extra = np.setdiff1d(native_keys, ref_keys)[:5]
        lost = np.setdiff1d(ref_keys, native_keys)[:5]
        raise AssertionError(
            f"edge sets differ: {len(native_keys)} native, {len(ref_keys)} reference; "
            f"native-only keys {extra.tolist()}, reference-only keys {lost.tolist()}"
        )
