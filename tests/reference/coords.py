"""Slow, obviously-correct NumPy / pure-Python oracles for the coordinate functions.

Every function here is written straight from the rule it checks (a dict or a set
of coordinate tuples, a loop over rows), never from the native algorithm. The
``*_vectorized`` variants are for inputs too large for Python loops (a real
scan); they use ``np.unique`` / sorting, which is still independent of the C++
hash tables, and are themselves checked against the loop oracles on small inputs.
"""

from __future__ import annotations

import math

import numpy as np

MORTON_BITS = 21
MORTON_BIAS = 1 << 20

Coord = tuple[int, int, int, int]


def as_numpy(a) -> np.ndarray:
    """Any array-like (mx.array included) as a NumPy array."""
    return np.asarray(a)


def tuples(coords) -> list[Coord]:
    """Rows of an (N, 4) array as Python int tuples."""
    arr = as_numpy(coords).reshape(-1, 4)
    return [tuple(int(v) for v in row) for row in arr.tolist()]


def to_array(rows) -> np.ndarray:
    """A list of 4-tuples as an (N, 4) int64 array (``(0, 4)`` when empty)."""
    return np.array(list(rows), dtype=np.int64).reshape(-1, 4)


def row_index(coords) -> dict[Coord, int]:
    """``{coordinate: row}`` of a coordinate set (rows are unique)."""
    out: dict[Coord, int] = {}
    for i, c in enumerate(tuples(coords)):
        assert c not in out, f"reference given duplicate coordinate {c}"
        out[c] = i
    return out


# ---- set functions -------------------------------------------------------------


def downsample(coords, stride) -> np.ndarray:
    """``unique(floor(c / stride))`` per batch, in first-occurrence order."""
    sx, sy, sz = _triple(stride)
    seen: dict[Coord, None] = {}
    for b, x, y, z in tuples(coords):
        seen.setdefault((b, x // sx, y // sy, z // sz), None)  # Python // floors
    return to_array(seen)


def union(lhs, rhs) -> np.ndarray:
    """Rows of ``lhs`` in order, then rows of ``rhs`` not yet seen."""
    seen: dict[Coord, None] = {}
    for c in tuples(lhs) + tuples(rhs):
        seen.setdefault(c, None)
    return to_array(seen)


def intersection(lhs, rhs) -> np.ndarray:
    """Rows of ``lhs`` (in order) that also occur in ``rhs``."""
    right = set(tuples(rhs))
    return to_array([c for c in tuples(lhs) if c in right])


def lookup(coords, queries) -> np.ndarray:
    """Row of each query in ``coords``, -1 where absent."""
    rows = row_index(coords)
    return np.array([rows.get(q, -1) for q in tuples(queries)], dtype=np.int64)


def inverse_map(source, target, source_stride=1, target_stride=1) -> np.ndarray:
    """Row of ``target`` covering each ``source`` row: ``floor(c * s_src / s_tgt)``."""
    ss, ts = _triple(source_stride), _triple(target_stride)
    rows = row_index(target)
    out = []
    for b, *xyz in tuples(source):
        q = (b, *((v * s) // t for v, s, t in zip(xyz, ss, ts, strict=True)))
        out.append(rows.get(q, -1))
    return np.array(out, dtype=np.int64)


# ---- Morton order --------------------------------------------------------------


def morton_code(x: int, y: int, z: int) -> int:
    """Bit interleave of biased x, y, z: bit ``j`` of x lands at ``3j + 2``, y at ``3j + 1``, z at ``3j``."""
    vals = []
    for v in (x, y, z):
        u = v + MORTON_BIAS
        if not 0 <= u < (1 << MORTON_BITS):
            raise ValueError(f"coordinate {v} outside [-2^20, 2^20)")
        vals.append(u)
    ux, uy, uz = vals
    code = 0
    for bit in range(MORTON_BITS):
        code |= ((ux >> bit) & 1) << (3 * bit + 2)
        code |= ((uy >> bit) & 1) << (3 * bit + 1)
        code |= ((uz >> bit) & 1) << (3 * bit)
    return code


def morton_codes(coords) -> np.ndarray:
    return np.array([morton_code(x, y, z) for _, x, y, z in tuples(coords)], dtype=np.uint64)


def morton_order(coords) -> np.ndarray:
    """Stable sort of rows by (batch, Morton code)."""
    rows = tuples(coords)
    keys = [(b, morton_code(x, y, z)) for b, x, y, z in rows]
    return np.array(sorted(range(len(rows)), key=lambda i: keys[i]), dtype=np.int64)


# ---- point quantisation ----------------------------------------------------------


def sparse_quantize(points, voxel_size=1.0, batch_indices=None, origin=0.0):
    """``(coords, inverse_rows, counts)``: voxels ``floor((p - origin) / voxel_size)``,
    unique per batch in first-occurrence order, the voxel row of every point and the
    number of points in each voxel. Arithmetic in float64 on the points as given."""
    pts = np.asarray(points).reshape(-1, 3)
    vs, org = _float_triple(voxel_size), _float_triple(origin)
    batch = [0] * len(pts) if batch_indices is None else [int(b) for b in np.asarray(batch_indices)]
    rows: dict[Coord, int] = {}
    inverse, counts = [], []
    for p, b in zip(pts.tolist(), batch, strict=True):
        key = (b, *(math.floor((float(v) - o) / s) for v, o, s in zip(p, org, vs, strict=True)))
        if key not in rows:
            rows[key] = len(rows)
            counts.append(0)
        inverse.append(rows[key])
        counts[rows[key]] += 1
    return to_array(rows), np.array(inverse, dtype=np.int64), np.array(counts, dtype=np.int64)


def sparse_quantize_vectorized(points, voxel_size=1.0, batch_indices=None, origin=0.0):
    """Same result as :func:`sparse_quantize` through ``np.unique`` (for large clouds)."""
    pts = np.asarray(points).reshape(-1, 3).astype(np.float64)
    vs, org = np.array(_float_triple(voxel_size)), np.array(_float_triple(origin))
    vox = np.floor((pts - org) / vs).astype(np.int64)
    b = np.zeros(len(pts), np.int64) if batch_indices is None else np.asarray(batch_indices, np.int64)
    full = np.concatenate([b[:, None], vox], axis=1)
    uniq, first, inv, counts = np.unique(
        full, axis=0, return_index=True, return_inverse=True, return_counts=True
    )
    order = np.argsort(first, kind="stable")  # unique rows by first occurrence
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return uniq[order], rank[inv.reshape(-1)], counts[order]


def _reduce_values(values: list, reduction: str) -> float:
    """One voxel's channel from its points' values, in point order, the obvious way."""
    if reduction == "first":
        return values[0]
    if reduction == "count":
        return float(sum(not math.isnan(v) for v in values))
    if reduction in ("max", "min"):
        best = None
        for v in values:
            better = best is None or (v > best if reduction == "max" else v < best)
            if better or math.isnan(v):  # a NaN in `best` fails both tests and stays
                best = v
        return best
    if reduction == "mode":
        counts: dict = {}
        for v in values:
            if not math.isnan(v):
                counts[v] = counts.get(v, 0) + 1
        if not counts:
            return math.nan
        top = max(counts.values())
        return min(v for v, n in counts.items() if n == top)
    total = 0.0
    for v in values:
        total += float(v)
    return total / len(values) if reduction == "mean" else total


def voxel_reduce(points, feats, voxel_size=1.0, origin=0.0, reduction="mean", dtype=np.float32):
    """``(coords, feats (M, C) dtype, counts)`` of ``lattice voxelize``: the voxels of
    :func:`sparse_quantize` and, per voxel and channel, a loop over its points in order:
    ``sum`` adds Python floats (IEEE float64) from 0.0, ``mean`` is that sum / count,
    ``max``/``min`` keep the extreme value (a NaN, once seen, stays), ``first`` the first
    point's value, ``mode`` the most frequent non-NaN value (ties: the smallest), ``count``
    per channel the non-NaN values. ``reduction`` is one name for every channel or a list
    (one per channel); ``"count"`` alone (or no feats) gives the counts as the one channel."""
    coords, inverse, counts = sparse_quantize(points, voxel_size, origin=origin)
    m = len(coords)
    if reduction == "count" or feats is None:
        return coords, counts.astype(np.float32)[:, None], counts
    f = np.asarray(feats, dtype=np.float64).tolist()
    c = len(f[0]) if f else np.shape(feats)[1]
    per_column = [reduction] * c if isinstance(reduction, str) else list(reduction)
    values: list[list[list[float]]] = [[[] for _ in range(c)] for _ in range(m)]
    for row, point in zip(inverse.tolist(), f, strict=True):
        for k, v in enumerate(point):
            values[row][k].append(v)
    out = [[_reduce_values(values[r][k], per_column[k]) for k in range(c)] for r in range(m)]
    return coords, np.array(out, dtype=np.float64).reshape(m, c).astype(dtype), counts


# ---- neighbours by brute force ----------------------------------------------------


def _dist2_f32(q: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Squared distances in float32, summed x, then y, then z."""
    d = (s.astype(np.float32) - q.astype(np.float32)).astype(np.float32)
    return (d[:, 0] * d[:, 0] + d[:, 1] * d[:, 1]) + d[:, 2] * d[:, 2]


def knn(source, source_batch, query, query_batch, k):
    """For each query, ``[(source_row, distance)]`` of its ``k`` nearest same-batch
    sources, nearest first, ties by row (brute force over every source point)."""
    src = np.asarray(source, np.float32).reshape(-1, 3)
    qry = np.asarray(query, np.float32).reshape(-1, 3)
    sb = np.asarray(source_batch).reshape(-1)
    qb = np.asarray(query_batch).reshape(-1)
    out = []
    for qi in range(len(qry)):
        rows = np.nonzero(sb == qb[qi])[0]
        d2 = _dist2_f32(qry[qi], src[rows])
        ranked = np.lexsort((rows, d2))[:k]  # by distance, then by row
        out.append([(int(rows[j]), math.sqrt(float(d2[j]))) for j in ranked])
    return out


def radius(source, source_batch, query, query_batch, r, max_neighbors=None):
    """For each query, ``[(source_row, distance)]`` of same-batch sources with
    squared distance <= r^2 (float32), nearest first, ties by row, at most
    ``max_neighbors``."""
    src = np.asarray(source, np.float32).reshape(-1, 3)
    qry = np.asarray(query, np.float32).reshape(-1, 3)
    sb = np.asarray(source_batch).reshape(-1)
    qb = np.asarray(query_batch).reshape(-1)
    r2 = np.float32(r * r)
    out = []
    for qi in range(len(qry)):
        rows = np.nonzero(sb == qb[qi])[0]
        d2 = _dist2_f32(qry[qi], src[rows])
        hits = sorted((d, int(s)) for d, s in zip(d2.tolist(), rows.tolist(), strict=True) if d <= r2)
        if max_neighbors is not None:
            hits = hits[:max_neighbors]
        out.append([(s, math.sqrt(d)) for d, s in hits])
    return out


# ---- vectorised lookup (for large inputs) -----------------------------------------


def lookup_vectorized(coords, queries) -> np.ndarray:
    """Row of each query in ``coords`` (-1 where absent), by sorting row keys.

    Rows become one int64 key each (mixed radix over the table's bounding box) when
    the box is small enough, else they are compared whole through ``np.unique``.
    """
    table = np.asarray(coords, np.int64).reshape(-1, 4)
    q = np.asarray(queries, np.int64).reshape(-1, 4)
    if len(table) == 0 or len(q) == 0:
        return np.full(len(q), -1, dtype=np.int64)
    lo, hi = table.min(axis=0), table.max(axis=0)
    ext = [int(v) for v in hi - lo + 1]
    if math.prod(ext) < 2**62:
        inside = np.all((q >= lo) & (q <= hi), axis=1)

        def key(a):
            a = a - lo
            return ((a[:, 0] * ext[1] + a[:, 1]) * ext[2] + a[:, 2]) * ext[3] + a[:, 3]

        tk = key(table)
        order = np.argsort(tk, kind="stable")
        sk = tk[order]
        assert np.all(np.diff(sk) > 0), "vectorised reference: table has duplicate rows"
        qk = key(q[inside])
        pos = np.minimum(np.searchsorted(sk, qk), len(sk) - 1)
        out = np.full(len(q), -1, dtype=np.int64)
        out[inside] = np.where(sk[pos] == qk, order[pos], -1)
        return out
    _, inv = np.unique(np.concatenate([table, q]), axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    tid, qid = inv[: len(table)], inv[len(table) :]
    assert len(np.unique(tid)) == len(table), "vectorised reference: table has duplicate rows"
    row_of = np.full(int(inv.max()) + 1, -1, dtype=np.int64)
    row_of[tid] = np.arange(len(table))
    return row_of[qid]


def unique_first_vectorized(coords) -> tuple[np.ndarray, np.ndarray]:
    """``(unique rows in first-occurrence order, row of each input in that list)``."""
    c = np.asarray(coords, np.int64).reshape(-1, 4)
    if len(c) == 0:
        return c, np.zeros(0, np.int64)
    lo = c.min(axis=0)
    ext = [int(v) for v in c.max(axis=0) - lo + 1]
    if math.prod(ext) < 2**62:  # one int64 key per row: a fast 1-D unique
        a = c - lo
        keys = ((a[:, 0] * ext[1] + a[:, 1]) * ext[2] + a[:, 2]) * ext[3] + a[:, 3]
        _, first, inv = np.unique(keys, return_index=True, return_inverse=True)
    else:
        _, first, inv = np.unique(c, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return c[first[order]], rank[inv.reshape(-1)]


# ---- helpers -------------------------------------------------------------------------


def _triple(v) -> tuple[int, int, int]:
    if isinstance(v, (int, np.integer)):
        return (int(v),) * 3
    t = tuple(int(x) for x in v)
    assert len(t) == 3
    return t  # type: ignore[return-value]


def _float_triple(v) -> tuple[float, float, float]:
    arr = np.asarray(v, dtype=np.float64).reshape(-1)
    if arr.size == 1:
        arr = np.repeat(arr, 3)
    return tuple(float(x) for x in arr)  # type: ignore[return-value]
