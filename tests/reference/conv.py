"""Slow, obviously-correct NumPy oracles for every sparse-convolution kind.

Nothing here uses lattice: no relation, no hash table, no kernel offsets from the
library. The sparse input is densified onto a dense grid and convolved densely,
straight from the edge rules of ``docs/relations.md`` (offsets ``off_k`` already
times the dilation ``d``; stride ``s``; padding ``p``; all per axis, within a batch):

- forward / target / submanifold (gather form)::

      out[o] = sum_k in[o * s + off_k - p] @ W_k

- transposed / generative (scatter form; generative has ``p = 0, d = 1``)::

      out[i * s + off_k - p] += in[i] @ W_k

Kernel offsets per axis: odd sizes centred (``-1, 0, 1`` for 3), even sizes from 0
(``0, 1`` for 2), times dilation, z fastest; kernel id ``k = (ix * Ky + iy) * Kz + iz``.
Mapped weights are ``(K, C_in, C_out)``; MLX's dense layout ``(C_out, Kx, Ky, Kz, C_in)``
converts with :func:`dense_to_mapped`.

The dense grid is built per batch and per *input tile* (a cube of ``tile`` lattice
cells), padded by the kernel reach, so that a real scan fits in memory; every
input belongs to exactly one tile and each tile's dense result is added at the
active output coordinates that it reaches. The result does not depend on ``tile``
(checked by the tests). Everything runs in float64.

Normalised convolution: ``Y = conv(X, W) / sqrt(conv(1, W**2) + eps) + b`` where
``conv(1, W**2)`` convolves a one-channel input of ones (at the active inputs only)
with the weight squared and summed over ``C_in``.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

Triple = tuple[int, int, int]


def round_bf16(a) -> np.ndarray:
    """float32 values rounded to bfloat16 (nearest, ties to even; finite values), in float64:
    the operands of ``LATTICE_CPU_GEMM=avx512_bf16``'s products, from the format's definition
    (the top 16 bits of the float32, rounded on the 17th)."""
    bits = np.ascontiguousarray(a, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def triple(v) -> Triple:
    """An int or three ints as a tuple of three ints."""
    if np.ndim(v) == 0:
        return (int(v),) * 3
    a, b, c = (int(t) for t in v)
    return (a, b, c)


def axis_offsets(size: int, dilation: int) -> np.ndarray:
    """Offsets along one axis: odd sizes centred, even sizes from 0, times dilation."""
    start = -(size // 2) if size % 2 == 1 else 0
    return (np.arange(size) + start) * dilation


def kernel_offsets(size, dilation=1) -> np.ndarray:
    """``(K, 3)`` int64 offsets (dilation applied), z fastest."""
    size, dilation = triple(size), triple(dilation)
    axes = [axis_offsets(n, d) for n, d in zip(size, dilation, strict=True)]
    return np.array(list(itertools.product(*axes)), dtype=np.int64).reshape(-1, 3)


def dense_to_mapped(weight: np.ndarray) -> np.ndarray:
    """MLX dense ``(C_out, Kx, Ky, Kz, C_in)`` -> mapped ``(K, C_in, C_out)``."""
    c_out, kx, ky, kz, c_in = weight.shape
    return np.ascontiguousarray(weight.reshape(c_out, kx * ky * kz, c_in).transpose(1, 2, 0))


def mapped_to_dense(weight: np.ndarray, size) -> np.ndarray:
    """Mapped ``(K, C_in, C_out)`` -> MLX dense ``(C_out, Kx, Ky, Kz, C_in)``."""
    k, c_in, c_out = weight.shape
    return np.ascontiguousarray(weight.transpose(2, 0, 1).reshape(c_out, *triple(size), c_in))


@dataclass(frozen=True)
class Geometry:
    """Kernel size, stride, padding, dilation as triples."""

    size: Triple
    stride: Triple
    padding: Triple
    dilation: Triple

    @classmethod
    def of(cls, size, stride=1, padding=0, dilation=1) -> Geometry:
        return cls(triple(size), triple(stride), triple(padding), triple(dilation))

    @property
    def offsets(self) -> np.ndarray:
        return kernel_offsets(self.size, self.dilation)


# ---- output supports ---------------------------------------------------------------


def _pack(rows: np.ndarray, lo: np.ndarray, span: np.ndarray) -> np.ndarray:
    """Row-major int64 key of ``(N, 4)`` rows inside the box ``[lo, lo + span)``."""
    r = rows - lo
    return ((r[:, 0] * span[1] + r[:, 1]) * span[2] + r[:, 2]) * span[3] + r[:, 3]


def unique_rows(rows: np.ndarray) -> np.ndarray:
    """Sorted unique ``(N, 4)`` int64 rows (lexicographic)."""
    rows = np.asarray(rows, dtype=np.int64).reshape(-1, 4)
    if not len(rows):
        return rows
    lo = rows.min(axis=0)
    span = rows.max(axis=0) - lo + 1
    _, first = np.unique(_pack(rows, lo, span), return_index=True)
    return rows[first]


def forward_support(coords: np.ndarray, stride) -> np.ndarray:
    """``unique(floor(coords / stride))`` per batch (sorted)."""
    c = np.asarray(coords, dtype=np.int64).reshape(-1, 4)
    out = c.copy()
    out[:, 1:] = np.floor_divide(c[:, 1:], np.array(triple(stride)))
    return unique_rows(out)


def transposed_support(coords: np.ndarray, geom: Geometry) -> np.ndarray:
    """``unique(i * s + off_k - p)`` over every input ``i`` and offset ``k`` (sorted)."""
    c = np.asarray(coords, dtype=np.int64).reshape(-1, 4)
    if not len(c):
        return c
    s, p = np.array(geom.stride), np.array(geom.padding)
    xyz = c[:, None, 1:] * s + geom.offsets[None] - p
    b = np.broadcast_to(c[:, None, :1], xyz.shape[:2] + (1,))
    return unique_rows(np.concatenate([b, xyz], axis=2).reshape(-1, 4))


# ---- dense convolution on input tiles ----------------------------------------------


def _tiles(coords: np.ndarray, tile: int):
    """Yields ``(row indices, tile origin (3,))`` grouping inputs by batch and tile."""
    if not len(coords):
        return
    key = np.concatenate([coords[:, :1], np.floor_divide(coords[:, 1:], tile)], axis=1)
    uniq, inv = np.unique(key, axis=0, return_inverse=True)
    inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
    for t in range(len(uniq)):
        yield order[bounds[t] : bounds[t + 1]], uniq[t, 1:] * tile


def _densify(xyz: np.ndarray, feats: np.ndarray, lo: np.ndarray, shape) -> np.ndarray:
    grid = np.zeros((*shape, feats.shape[1]), dtype=np.float64)
    idx = xyz - lo
    grid[idx[:, 0], idx[:, 1], idx[:, 2]] = feats
    return grid


class _Outputs:
    """Active output rows, sorted by (batch, x) so that a tile finds its slab by bisection."""

    def __init__(self, out_coords: np.ndarray) -> None:
        self.coords = out_coords
        self.key = out_coords[:, 0] * (1 << 34) + out_coords[:, 1] + (1 << 33)
        self.order = np.argsort(self.key, kind="stable")
        self.sorted_key = self.key[self.order]

    def add(self, result: np.ndarray, batch: int, grid: np.ndarray, lo: np.ndarray) -> None:
        """``result[r] += grid[o - lo]`` for every active output ``o`` of ``batch`` inside the grid."""
        hi = lo + np.array(grid.shape[:3])
        base = batch * (1 << 34) + (1 << 33)
        a, b = np.searchsorted(self.sorted_key, [base + lo[0], base + hi[0]])
        rows = self.order[a:b]
        o = self.coords[rows, 1:]
        rows = rows[np.all((o >= lo) & (o < hi), axis=1)]
        idx = self.coords[rows, 1:] - lo
        result[rows] += grid[idx[:, 0], idx[:, 1], idx[:, 2]]


def _forward_tile(xyz, feats, w, geom: Geometry, a: np.ndarray, tile: int):
    """Dense gather conv of the inputs in tile ``[a, a + tile)``: (output grid, its origin)."""
    s, p, off = np.array(geom.stride), np.array(geom.padding), geom.offsets
    # Outputs whose footprint o * s + off - p touches the tile.
    o_lo = -np.floor_divide(-(a + p - off.max(0)), s)  # ceil
    o_hi = np.floor_divide(a + tile - 1 + p - off.min(0), s)
    n_o = o_hi - o_lo + 1
    if np.any(n_o <= 0):
        return None, None
    g_lo = o_lo * s + off.min(0) - p
    g_hi = o_hi * s + off.max(0) - p
    # Inputs outside [g_lo, g_hi] are read by no output (e.g. odd x for k=1, s=2).
    keep = np.all((xyz >= g_lo) & (xyz <= g_hi), axis=1)
    grid = _densify(xyz[keep], feats[keep], g_lo, tuple(g_hi - g_lo + 1))
    out = np.zeros((*n_o, w.shape[2]), dtype=np.float64)
    for k in range(len(off)):
        start = o_lo * s + off[k] - p - g_lo
        sl = tuple(slice(start[j], start[j] + s[j] * (n_o[j] - 1) + 1, s[j]) for j in range(3))
        out += grid[sl] @ w[k]
    return out, o_lo


def _transposed_tile(xyz, feats, w, geom: Geometry, a: np.ndarray, tile: int):
    """Dense scatter conv of the inputs in tile ``[a, a + tile)``: (output grid, its origin)."""
    s, p, off = np.array(geom.stride), np.array(geom.padding), geom.offsets
    grid = _densify(xyz, feats, a, (tile, tile, tile))
    o_lo = a * s + off.min(0) - p
    o_hi = (a + tile - 1) * s + off.max(0) - p
    out = np.zeros((*(o_hi - o_lo + 1), w.shape[2]), dtype=np.float64)
    for k in range(len(off)):
        start = a * s + off[k] - p - o_lo
        sl = tuple(slice(start[j], start[j] + s[j] * (tile - 1) + 1, s[j]) for j in range(3))
        out[sl] += grid @ w[k]
    return out, o_lo


def conv(
    coords: np.ndarray,
    feats: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    kind: str,
    kernel_size=3,
    stride=1,
    padding=0,
    dilation=1,
    out_coords: np.ndarray | None = None,
    tile: int = 8,
) -> tuple[np.ndarray, np.ndarray]:
    """Reference sparse convolution: ``(output coords (M, 4) int64, output features (M, C_out) float64)``.

    ``kind`` is ``forward`` (also target mode when ``out_coords`` is given),
    ``submanifold``, ``transposed`` or ``generative``. ``weight`` is mapped
    ``(K, C_in, C_out)`` or dense ``(C_out, Kx, Ky, Kz, C_in)``. Without
    ``out_coords`` the output support is generated (sorted rows): forward
    ``unique(floor(c / s))``, submanifold the input rows in input order,
    transposed / generative ``unique(i * s + off_k - p)``. With ``out_coords``
    the output keeps those rows in that order.
    """
    coords = np.asarray(coords, dtype=np.int64).reshape(-1, 4)
    feats = np.asarray(feats, dtype=np.float64)
    w = np.asarray(weight, dtype=np.float64)
    if w.ndim == 5:
        w = dense_to_mapped(w)
    if kind == "submanifold":
        geom = Geometry.of(kernel_size, 1, 0, dilation)
        if out_coords is None:
            out_coords = coords
    elif kind == "generative":
        geom = Geometry.of(kernel_size, stride, 0, 1)
    elif kind in ("forward", "transposed"):
        geom = Geometry.of(kernel_size, stride, padding, dilation)
    else:
        raise ValueError(f"unknown kind {kind!r}")
    if w.shape[0] != len(geom.offsets) or w.shape[1] != feats.shape[1]:
        raise ValueError(f"weight {w.shape} does not fit kernel {geom.size} and {feats.shape[1]} channels")
    gather = kind in ("forward", "submanifold")
    if out_coords is None:
        out_coords = forward_support(coords, geom.stride) if gather else transposed_support(coords, geom)
    out_coords = np.asarray(out_coords, dtype=np.int64).reshape(-1, 4)
    result = np.zeros((len(out_coords), w.shape[2]), dtype=np.float64)
    tile_fn = _forward_tile if gather else _transposed_tile
    outputs = _Outputs(out_coords)
    for rows, a in _tiles(coords, tile):
        grid, lo = tile_fn(coords[rows, 1:], feats[rows], w, geom, a, tile)
        if grid is not None:
            outputs.add(result, int(coords[rows[0], 0]), grid, lo)
    if bias is not None:
        result += np.asarray(bias, dtype=np.float64)
    return out_coords, result


def normalized_conv(
    coords: np.ndarray,
    feats: np.ndarray,
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    eps: float = 1e-8,
    **kwargs,
) -> tuple[np.ndarray, np.ndarray]:
    """``conv(X, W) / sqrt(conv(1, W**2) + eps) + b`` with the arguments of :func:`conv`."""
    w = np.asarray(weight, dtype=np.float64)
    if w.ndim == 5:
        w = dense_to_mapped(w)
    out, y = conv(coords, feats, w, **kwargs)
    ones = np.ones((len(np.asarray(coords).reshape(-1, 4)), 1))
    w2 = np.sum(w * w, axis=1, keepdims=True)
    kwargs["out_coords"] = out
    _, norm = conv(coords, ones, w2, **kwargs)
    y = y / np.sqrt(norm + eps)
    if bias is not None:
        y = y + np.asarray(bias, dtype=np.float64)
    return out, y


def align(actual_coords: np.ndarray, ref_coords: np.ndarray) -> np.ndarray:
    """Row ``j`` of the result is the reference row holding ``actual_coords[j]``.

    Raises AssertionError unless both hold the same set of unique rows.
    """
    a = np.asarray(actual_coords, dtype=np.int64).reshape(-1, 4)
    r = np.asarray(ref_coords, dtype=np.int64).reshape(-1, 4)
    if len(a) != len(r):
        raise AssertionError(f"output row counts differ: {len(a)} vs reference {len(r)}")
    if not len(a):
        return np.zeros(0, dtype=np.int64)
    both = np.concatenate([a, r])
    lo = both.min(axis=0)
    span = both.max(axis=0) - lo + 1
    ka, kr = _pack(a, lo, span), _pack(r, lo, span)
    order = np.argsort(kr, kind="stable")
    if np.any(np.diff(kr[order]) == 0):
        raise AssertionError("reference output rows are not unique")
    pos = np.minimum(np.searchsorted(kr[order], ka), len(kr) - 1)
    missing = kr[order][pos] != ka
    if np.any(missing):
        raise AssertionError(
            f"output coordinate {a[np.argmax(missing)].tolist()} is not in the reference support"
        )
    return order[pos]


# ---- the GPU kernels' arithmetic over a given dense neighbour map -----------------------
# Oracles of what the implicit-GEMM kernels compute from a map they are handed (the map
# itself is checked against the edge rules elsewhere): ``nmap`` is (N_out, K) int, -1 where
# offset k of an output row has no input. float64.


def map_conv(x: np.ndarray, w: np.ndarray, nmap: np.ndarray) -> np.ndarray:
    """``y[o] = sum_k x[nmap[o, k]] @ w[k]`` (w mapped, (K, C_in, C_out))."""
    x, w, nmap = np.asarray(x, np.float64), np.asarray(w, np.float64), np.asarray(nmap)
    y = np.zeros((nmap.shape[0], w.shape[2]))
    for k in range(nmap.shape[1]):
        hit = nmap[:, k] >= 0
        y[hit] += x[nmap[hit, k]] @ w[k]
    return y


def map_weight_grad(x: np.ndarray, dy: np.ndarray, nmap: np.ndarray, *, absolute: bool = False) -> np.ndarray:
    """``dW[k] = sum_o x[nmap[o, k]]^T dy[o]``, (K, C_in, C_out); ``absolute``: the same sum of
    ``|x|`` and ``|dy|``, the scale a rounding error of each entry is measured against."""
    x, dy, nmap = np.asarray(x, np.float64), np.asarray(dy, np.float64), np.asarray(nmap)
    if absolute:
        x, dy = np.abs(x), np.abs(dy)
    dw = np.zeros((nmap.shape[1], x.shape[1], dy.shape[1]))
    for k in range(nmap.shape[1]):
        hit = nmap[:, k] >= 0
        dw[k] = x[nmap[hit, k]].T @ dy[hit]
    return dw
