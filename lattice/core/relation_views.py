"""The documented relation data model (mlx-lattice 0.6.3) over lattice's relations.

Value types — a relation's contract (counts, capacities, kernel offsets, the coordinates it
was built from), CSR views, the implicit-GEMM map and its sorted form, neighbour edges — and
the functions that derive them from a ``KernelRelation``'s edges or dense neighbour map.
``KernelRelation`` exposes them as properties (``contract``, ``output_csr``, ...), each made
on first access and kept with the relation.

lattice's edges are grouped by kernel offset (``RelationEdges``); every CSR view therefore
carries ``edge_ids``, indices into those edges. For row ``r`` of a view, the edges
``edge_ids[row_offsets[r]:row_offsets[r + 1]]`` are exactly the edges of that row, in
ascending edge id (for the output view: ascending kernel offset, since an output row meets
each offset at most once). Rows past a relation's live ones (a capacity given by the
raw-array builders, ``lattice.ops.build_kernel_relation`` and friends) hold no edges.

lattice's relations are exact: ``edge_capacity`` is the edge count and the output capacity
the output row count, except where a builder was given coordinate buffers with rows past
their ``active_rows`` (then the capacities are the buffers' rows).
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx

from lattice.core._checks import Triple
from lattice.core.buffers import arange

KINDS = ("forward", "submanifold", "target", "transposed", "generative")
_INT = (mx.int32, mx.int64)
_TILE_ROWS = 64  # rows per tile of the sorted view
_TILE_WORDS = 4  # mask words per tile (16 rows each)


def _rows_array(value, name: str, op: str) -> None:
    if not isinstance(value, mx.array) or value.ndim != 1 or value.dtype not in _INT:
        raise ValueError(f"[{op}] {name} must be a 1-D int32 or int64 array (E,), got {_describe(value)}")


def _coords_array(value, name: str, op: str) -> None:
    if not isinstance(value, mx.array) or value.ndim != 2 or value.shape[1] != 4 or value.dtype not in _INT:
        raise ValueError(f"[{op}] {name} must be an (N, 4) int32 or int64 array, got {_describe(value)}")


def _count_array(value, name: str, op: str, shape: tuple[int, ...] = (1,)) -> None:
    if not isinstance(value, mx.array) or value.shape != shape or value.dtype != mx.int32:
        raise ValueError(f"[{op}] {name} must be an int32 array of shape {shape}, got {_describe(value)}")


def _same_rows(op: str, **arrays: mx.array) -> None:
    (first, a), *rest = arrays.items()
    for name, b in rest:
        if b.shape[0] != a.shape[0]:
            raise ValueError(
                f"[{op}] {first} and {name} must have the same row count, got {a.shape[0]} and {b.shape[0]}"
            )


def _optional_count(value, name: str, op: str) -> int | None:
    if value is None:
        return None
    n = int(value)
    if n < 0:
        raise ValueError(f"[{op}] {name} must be non-negative, got {n}")
    return n


def _describe(value) -> str:
    if isinstance(value, mx.array):
        return f"shape {tuple(value.shape)} {value.dtype}"
    return type(value).__name__


# ---- value types -------------------------------------------------------------------------


@dataclass(frozen=True)
class RelationCSRView:
    """Edges grouped by a row (output row, input row or kernel offset): row ``r`` owns the
    edges ``edge_ids[row_offsets[r]:row_offsets[r + 1]]``. ``row_offsets`` is int32
    ``(rows + 1,)``; ``edge_ids`` indexes the relation's edges (None: the edges are already
    in row order)."""

    row_offsets: mx.array
    edge_ids: mx.array | None = None

    def __post_init__(self) -> None:
        op = "RelationCSRView"
        if (
            not isinstance(self.row_offsets, mx.array)
            or self.row_offsets.ndim != 1
            or (self.row_offsets.dtype != mx.int32)
        ):
            raise ValueError(
                f"[{op}] row_offsets must be a 1-D int32 array (rows + 1,), got {_describe(self.row_offsets)}"
            )
        if self.edge_ids is not None:
            _rows_array(self.edge_ids, "edge_ids", op)


RelationView = RelationCSRView


@dataclass(frozen=True)
class RelationImplicitGemmView:
    """The dense map of a relation: ``out_in_map[o, k]`` is the input row offset ``k`` of
    output row ``o`` reads, -1 where none; ``row_masks[o, w]`` has bit ``b`` set where offset
    ``32 * w + b`` is present (``ceil(K / 32)`` int32 words per row)."""

    out_in_map: mx.array
    row_masks: mx.array

    def __post_init__(self) -> None:
        op = "RelationImplicitGemmView"
        for name in ("out_in_map", "row_masks"):
            a = getattr(self, name)
            if not isinstance(a, mx.array) or a.ndim != 2 or a.dtype not in _INT:
                raise ValueError(f"[{op}] {name} must be a 2-D int32 or int64 array, got {_describe(a)}")
        _same_rows(op, out_in_map=self.out_in_map, row_masks=self.row_masks)
        words = (self.out_in_map.shape[1] + 31) // 32
        if self.row_masks.shape[1] != words:
            raise ValueError(
                f"[{op}] row_masks must have ceil(K / 32) = {words} words per output row, "
                f"got {self.row_masks.shape[1]}"
            )


@dataclass(frozen=True)
class RelationSortedImplicitGemmView:
    """The implicit-GEMM map with its rows sorted by occupancy mask: ``reorder_rows`` (the
    output row of each sorted row), ``sorted_out_in_map`` (N_out, K), its K-major transpose
    ``sorted_kv_out_in_map`` (K, N_out), and ``tile_masks``: per tile of 64 sorted rows,
    four words, each the OR of the masks of 16 rows."""

    sorted_out_in_map: mx.array
    sorted_kv_out_in_map: mx.array
    reorder_rows: mx.array
    tile_masks: mx.array

    def __post_init__(self) -> None:
        op = "RelationSortedImplicitGemmView"
        for name in ("sorted_out_in_map", "sorted_kv_out_in_map"):
            a = getattr(self, name)
            if not isinstance(a, mx.array) or a.ndim != 2 or a.dtype not in _INT:
                raise ValueError(f"[{op}] {name} must be a 2-D int32 or int64 array, got {_describe(a)}")
        if tuple(self.sorted_kv_out_in_map.shape) != tuple(self.sorted_out_in_map.shape[::-1]):
            raise ValueError(
                f"[{op}] sorted_kv_out_in_map must be the K-major transpose of sorted_out_in_map "
                f"{tuple(self.sorted_out_in_map.shape)}, got {tuple(self.sorted_kv_out_in_map.shape)}"
            )
        _rows_array(self.reorder_rows, "reorder_rows", op)
        _rows_array(self.tile_masks, "tile_masks", op)
        _same_rows(op, sorted_out_in_map=self.sorted_out_in_map, reorder_rows=self.reorder_rows)


@dataclass(frozen=True)
class SparseRelationContract:
    """What a relation is over: ``counts`` (int32 ``[edge_count, out_count]``), the kernel
    offsets (a tuple of triples), the output coordinates, the capacities, the source / target
    coordinates and live-row counts it was built from (None where not known), stride,
    padding and kind (a ``RelationKind`` value)."""

    counts: mx.array
    kernel_offsets: tuple[Triple, ...]
    out_coords: mx.array | None = None
    n_in_capacity: int | None = None
    n_out_capacity: int | None = None
    n_kernels: int | None = None
    source_coords: mx.array | None = None
    source_active_rows: mx.array | None = None
    target_coords: mx.array | None = None
    target_active_rows: mx.array | None = None
    stride: Triple = (1, 1, 1)
    padding: Triple = (0, 0, 0)
    kind: str = "forward"

    def __post_init__(self) -> None:
        op = "SparseRelationContract"
        _count_array(self.counts, "counts", op, (2,))
        for name in ("out_coords", "source_coords", "target_coords"):
            if getattr(self, name) is not None:
                _coords_array(getattr(self, name), name, op)
        for name in ("source_active_rows", "target_active_rows"):
            if getattr(self, name) is not None:
                _count_array(getattr(self, name), name, op)
        if self.kind not in KINDS:
            raise ValueError(f"[{op}] kind must be one of {KINDS}, got {self.kind!r}")
        offsets = tuple((int(x), int(y), int(z)) for x, y, z in self.kernel_offsets)
        n_in = _optional_count(self.n_in_capacity, "n_in_capacity", op)
        n_out = _optional_count(self.n_out_capacity, "n_out_capacity", op)
        n_kernels = _optional_count(self.n_kernels, "n_kernels", op)
        if offsets:
            if n_kernels is not None and n_kernels != len(offsets):
                raise ValueError(
                    f"[{op}] n_kernels must match kernel_offsets ({len(offsets)}), got {n_kernels}"
                )
            n_kernels = len(offsets)
        if self.out_coords is not None:
            if n_out is not None and n_out != self.out_coords.shape[0]:
                raise ValueError(
                    f"[{op}] n_out_capacity must match out_coords' {self.out_coords.shape[0]} rows, got {n_out}"
                )
            n_out = int(self.out_coords.shape[0])
        set_ = object.__setattr__
        set_(self, "kernel_offsets", offsets)
        set_(self, "stride", tuple(int(v) for v in self.stride))
        set_(self, "padding", tuple(int(v) for v in self.padding))
        set_(self, "n_in_capacity", n_in)
        set_(self, "n_out_capacity", n_out)
        set_(self, "n_kernels", n_kernels)

    @property
    def edge_count(self) -> mx.array:
        """int32 (1,): the live edges."""
        return self.counts[:1]

    @property
    def out_count(self) -> mx.array:
        """int32 (1,): the live output rows."""
        return self.counts[1:2]


@dataclass(frozen=True)
class NeighborEdges:
    """The edges of a neighbour relation: query row, source row, and the neighbour's rank
    among its query's neighbours (0 = nearest)."""

    query_rows: mx.array
    source_rows: mx.array
    neighbor_ids: mx.array

    def __post_init__(self) -> None:
        op = "NeighborEdges"
        for name in ("query_rows", "source_rows", "neighbor_ids"):
            _rows_array(getattr(self, name), name, op)
        _same_rows(
            op, query_rows=self.query_rows, source_rows=self.source_rows, neighbor_ids=self.neighbor_ids
        )

    @property
    def capacity(self) -> int:
        """Edges held (lattice's neighbour relations hold exactly the live ones)."""
        return int(self.query_rows.shape[0])


@dataclass(frozen=True)
class RelationSupport:
    """The coordinates a relation was built from, as its contract reports them: the source
    (input) coordinates and live-row count, the target's where the output support was given,
    and — where a builder was given buffers with rows past their live ones — the output
    coordinate buffer and the input capacity (None: the relation's own ``out_coords`` and
    ``in_count``)."""

    source_coords: mx.array | None = None
    source_active_rows: mx.array | None = None
    target_coords: mx.array | None = None
    target_active_rows: mx.array | None = None
    out_coords: mx.array | None = None
    n_in_capacity: int | None = None


SUPPORT = "view.support"  # the relation's _derived key of its RelationSupport


def attach_support(relation, support: RelationSupport):
    """Records where ``relation``'s rows came from (a builder's call) and returns it; views
    already made from it are dropped."""
    for key in [k for k in relation._derived if k.startswith("view.")]:
        del relation._derived[key]
    relation._derived[SUPPORT] = support
    return relation


def support_of(relation) -> RelationSupport:
    return relation._derived.get(SUPPORT) or RelationSupport()


def in_span(relation) -> int:
    """Input rows the input views span: the relation's ``in_count``, or a builder's buffer rows."""
    s = support_of(relation)
    return relation.in_count if s.n_in_capacity is None else s.n_in_capacity


def out_span(relation) -> int:
    """Output rows the output views span: the relation's output rows, or a builder's buffer rows."""
    s = support_of(relation)
    return relation.n_out if s.out_coords is None else int(s.out_coords.shape[0])


# ---- views of a KernelRelation ----------------------------------------------------------------


def make_contract(relation) -> SparseRelationContract:
    """The contract of ``relation``: counts from its edges (or, for a relation built as a
    dense map, a lazy count of the map: no host read), capacities, its support."""
    s = support_of(relation)
    known = relation.known_edge_count
    if known is not None:
        counts = mx.array([known, relation.n_out], dtype=mx.int32)
    else:
        edges = mx.sum(relation.built_map >= 0).astype(mx.int32).reshape(1)
        counts = mx.concatenate([edges, mx.array([relation.n_out], dtype=mx.int32)])
    offsets = tuple(tuple(int(v) for v in row) for row in relation.offset_table.tolist())
    return SparseRelationContract(
        counts=counts,
        kernel_offsets=offsets,
        out_coords=relation.out_table if s.out_coords is None else s.out_coords,
        n_in_capacity=in_span(relation),
        n_kernels=relation.spec.volume,
        source_coords=s.source_coords,
        source_active_rows=s.source_active_rows,
        target_coords=s.target_coords,
        target_active_rows=s.target_active_rows,
        stride=relation.spec.stride,
        padding=relation.spec.padding,
        kind=relation.kind,
    )


def grouped_view(groups: mx.array, n_groups: int) -> RelationCSRView:
    """The edges grouped by ``groups`` (each edge's row in ``[0, n_groups)``), ascending
    edge id within a row (a stable order: the sort key is ``row * E + edge id``)."""
    e = int(groups.shape[0])
    counts = mx.zeros((n_groups + 1,), dtype=mx.int32)
    if e:
        counts = counts.at[groups.astype(mx.int32) + 1].add(1)
    offsets = mx.cumsum(counts).astype(mx.int32)
    key = groups.astype(mx.int64) * e + arange(e, dtype=mx.int64)
    return RelationCSRView(offsets, mx.argsort(key).astype(mx.int32))


def kernel_view(relation) -> RelationCSRView:
    """Kernel-offset CSR: lattice's edges are grouped by offset already."""
    return RelationCSRView(relation.edge_offsets, arange(relation.n_edges, dtype=mx.int32))


def implicit_gemm_view(relation, n_out: int) -> RelationImplicitGemmView:
    """The dense neighbour map as the documented view: ``n_out`` rows (rows past the
    relation's output rows are -1), and the occupancy bit masks."""
    m = relation.neighbor_map
    k = relation.spec.volume
    if n_out > m.shape[0]:
        m = mx.concatenate([m, mx.full((n_out - m.shape[0], k), -1, dtype=mx.int32)])
    return RelationImplicitGemmView(m, row_masks(m))


def row_masks(out_in_map: mx.array) -> mx.array:
    """(N, ceil(K / 32)) int32: bit ``k % 32`` of word ``k // 32`` set where offset k is present."""
    n, k = out_in_map.shape
    words = (k + 31) // 32
    bits = (out_in_map >= 0).astype(mx.uint32) << (arange(k, dtype=mx.uint32) % 32)
    if words * 32 != k:
        bits = mx.concatenate([bits, mx.zeros((n, words * 32 - k), dtype=mx.uint32)], axis=1)
    # the bits of one word are distinct: their sum is their OR
    return mx.sum(bits.reshape(n, words, 32), axis=2).astype(mx.uint32).view(mx.int32)


def sorted_implicit_gemm_view(view: RelationImplicitGemmView) -> RelationSortedImplicitGemmView:
    """Rows sorted by occupancy mask (as int32, ties by row), the K-major transpose and the
    tile masks: tile ``t`` word ``w`` is the OR of the masks of sorted rows
    ``64 t + 16 w .. 64 t + 16 w + 15``. Needs K <= 32 (one mask word per row)."""
    n, k = view.out_in_map.shape
    if view.row_masks.shape[1] != 1:
        raise ValueError(
            f"[require_sorted_implicit_gemm] the sorted implicit-GEMM view supports K <= 32 "
            f"kernel offsets, got K = {k}"
        )
    masks = view.row_masks[:, 0]
    order = mx.argsort(masks.astype(mx.int64) * max(n, 1) + arange(n, dtype=mx.int64)).astype(mx.int32)
    sorted_map = view.out_in_map[order]
    tiles = (n + _TILE_ROWS - 1) // _TILE_ROWS
    padded = mx.concatenate([masks[order], mx.zeros((tiles * _TILE_ROWS - n,), dtype=mx.int32)])
    rows = padded.reshape(tiles * _TILE_WORDS, _TILE_ROWS // _TILE_WORDS)
    tile_masks = mx.zeros((tiles * _TILE_WORDS,), dtype=mx.int32)
    for j in range(rows.shape[1]):
        tile_masks = tile_masks | rows[:, j]
    return RelationSortedImplicitGemmView(sorted_map, mx.contiguous(sorted_map.T), order, tile_masks)


__all__ = [
    "NeighborEdges",
    "RelationCSRView",
    "RelationImplicitGemmView",
    "RelationSortedImplicitGemmView",
    "RelationSupport",
    "RelationView",
    "SparseRelationContract",
    "attach_support",
]
