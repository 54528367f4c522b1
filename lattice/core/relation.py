"""Relation value objects: kernel relations (kernel maps) and neighbour relations."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from functools import cached_property

import mlx.core as mx
import numpy as np

from lattice.core import relation_views as views
from lattice.core.buffers import arange
from lattice.core.kernel import KernelSpec
from lattice.core.relation_views import (
    NeighborEdges,
    RelationCSRView,
    RelationImplicitGemmView,
    RelationSortedImplicitGemmView,
    SparseRelationContract,
)
from lattice.core.rows import host_read


class EdgeCounter:
    """Counts the edges of relations on request: for a map built on the GPU, one host read
    each (then cached by the relation). ``lattice.explain`` takes one (``edge_counter=``) so
    the route it reports names the edges; ops never count what they do not need.
    ``counted``: the relations this counter read."""

    def __init__(self) -> None:
        self.counted = 0

    def __call__(self, relation) -> int:
        if relation.known_edge_count is None:
            self.counted += 1
        return relation.n_edges


def _repeat_index(counts: mx.array) -> mx.array:
    """``[0] * counts[0] + [1] * counts[1] + ...`` as int32 (``mx.repeat`` takes only a scalar count)."""
    c = np.asarray(counts, dtype=np.int64).reshape(-1)
    return mx.array(np.repeat(np.arange(c.size, dtype=np.int32), c))


class RelationKind(StrEnum):
    """The five kernel-relation kinds of the design (DESIGN.md section 3)."""

    FORWARD = "forward"
    SUBMANIFOLD = "submanifold"
    TARGET = "target"
    TRANSPOSED = "transposed"
    GENERATIVE = "generative"


@dataclass(frozen=True)
class RelationEdges:
    """The (input row, output row, kernel offset) triples of a relation.

    Edges are grouped by kernel offset: offset ``k`` owns the slice
    ``[edge_offsets[k], edge_offsets[k + 1])``.
    """

    in_rows: mx.array
    out_rows: mx.array
    counts: mx.array

    @property
    def kernel_ids(self) -> mx.array:
        """Kernel offset index of each edge (int32)."""
        return _repeat_index(self.counts)

    def __len__(self) -> int:
        return int(self.in_rows.shape[0])

    @property
    def capacity(self) -> int:
        """Edges held: lattice's relations hold exactly their live edges."""
        return len(self)


@dataclass(frozen=True)
class KernelRelation:
    """A kernel map between an input and an output coordinate set.

    For each kernel offset it lists the (input row, output row) pairs with
    ``input = output * stride + offset * dilation - padding`` (forward, target,
    submanifold) or ``output = input * stride + offset * dilation - padding``
    (transposed, generative).

    Two representations, each derived from the other on first use and kept:
    ``edges`` — the pairs grouped by offset (what the CPU routes walk), built by the
    CPU core — and ``neighbor_map`` — a dense (out_count, K) int32 array, ``-1`` where
    offset k of an output row has no input (what the GPU kernels read), built by the
    GPU relation kernels. Routes keep what they derive from a relation with ``cached``
    (the CUDA routes: the in-major map, their differentiable functions).
    """

    kind: RelationKind
    spec: KernelSpec
    in_key: object
    out_key: object
    out_coords: mx.array
    kernel_offsets: mx.array
    in_count: int
    built_edges: RelationEdges | None = field(default=None, repr=False)
    built_map: mx.array | None = field(default=None, repr=False)
    route: object = field(default=None, repr=False, compare=False)
    _derived: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.built_edges is None and self.built_map is None:
            raise ValueError("KernelRelation needs its edges or its neighbour map")

    @property
    def mirrored(self) -> bool:
        """True where offset K-1-k's edges are offset k's reversed (map[o, k] = i exactly when
        map[i, K-1-k] = o): a submanifold relation a coordinate manager built. The manager
        makes every one of them on its input set with an odd kernel, stride 1 and no padding,
        whose offsets are symmetric (offset K-1-k is -offset k, ``KernelSpec.offsets`` order).
        A relation holding given edges (mlx-lattice's ``KernelRelation`` constructor: no set
        keys) promises no such symmetry whatever its kind. The input gradient of a convolution
        over a mirrored relation runs over its own edges with W's offsets reversed."""
        return self.kind == RelationKind.SUBMANIFOLD and self.in_key is not None

    # ---- edge-list form (CPU routes) -------------------------------------------------

    @property
    def edges(self) -> RelationEdges:
        """The (input row, output row) pairs grouped by kernel offset (``grouped_edges``)."""
        return self.grouped_edges

    @property
    def grouped_edges(self) -> RelationEdges:
        """The (input row, output row) pairs grouped by kernel offset: what lattice's routes walk."""
        if self.built_edges is not None:
            return self.built_edges
        if "edges" not in self._derived:
            # Host compaction of the dense map: offset-major, output rows ascending.
            m = np.asarray(self.built_map).reshape(self.n_out, self.spec.volume).T
            ks, outs = np.nonzero(m >= 0)
            self._derived["edges"] = RelationEdges(
                mx.array(m[ks, outs].astype(np.int32)),
                mx.array(outs.astype(np.int32)),
                mx.array(np.bincount(ks, minlength=self.spec.volume).astype(np.int32)),
            )
        return self._derived["edges"]

    @property
    def edge_offsets_host(self) -> tuple[int, ...]:
        """Start of each offset's edges (K + 1 host ints)."""
        if "offsets" not in self._derived:
            c = np.asarray(self.grouped_edges.counts, dtype=np.int64)
            self._derived["offsets"] = tuple(int(v) for v in np.concatenate([[0], np.cumsum(c)]))
        return self._derived["offsets"]

    # ---- dense map form (GPU routes) -------------------------------------------------

    @property
    def neighbor_map(self) -> mx.array:
        """(out_count, K) int32: the input row offset k of each output row reads, or -1."""
        if self.built_map is not None:
            return self.built_map
        if "map" not in self._derived:
            e, k = self.grouped_edges, self.spec.volume
            m = mx.full((self.n_out * k,), -1, dtype=mx.int32)
            if len(e):
                m[e.out_rows * k + e.kernel_ids] = e.in_rows
            self._derived["map"] = m.reshape(self.n_out, k)
        return self._derived["map"]

    def cached(self, name: str, make):
        """A value derived from this relation by a route (made once, kept with it)."""
        if name not in self._derived:
            self._derived[name] = make()
        return self._derived[name]

    # ---- sizes -----------------------------------------------------------------------

    @property
    def counts(self) -> mx.array:
        """Edges per kernel offset, int32 (K,)."""
        return self.offset_counts

    @property
    def n_kernels(self) -> int:
        return self.spec.volume

    @property
    def edge_count(self) -> int:
        """Edges (pairs); for a relation built as a dense map on the GPU, one host read."""
        return self.n_edges

    # lattice's own spellings of the sizes, offsets and edges: lattice's ops, routes and views
    # read these, never the names above, which a subclass may present in other forms over the
    # same fields (lattice.core.relation_documented: mlx-lattice 0.6.3's).

    @property
    def offset_counts(self) -> mx.array:
        """Edges per kernel offset, int32 (K,)."""
        return self.grouped_edges.counts

    @property
    def offset_table(self) -> mx.array:
        """The kernel offsets, (K, 3) int32 (the ``kernel_offsets`` field)."""
        return vars(self)["kernel_offsets"]

    @property
    def out_table(self) -> mx.array:
        """The output coordinates, one row per output row (the ``out_coords`` field)."""
        return vars(self)["out_coords"]

    @property
    def n_edges(self) -> int:
        """Edges (pairs); for a relation built as a dense map on the GPU, one host read."""
        if self.built_edges is not None:
            return len(self.built_edges)
        if "edge_count" not in self._derived:
            self._derived["edge_count"] = int(host_read(mx.sum(self.built_map >= 0))) if self.n_out else 0
        return self._derived["edge_count"]

    @property
    def n_out(self) -> int:
        """Output rows."""
        return int(self.out_table.shape[0])

    @property
    def known_edge_count(self) -> int | None:
        """``edge_count`` where it costs no host read (an edge list, or already counted: by an
        op that needed it, or by an ``EdgeCounter``), else None: route requests take this, so
        a relation built on the GPU is never read back just to describe the route."""
        if self.built_edges is not None or "edge_count" in self._derived:
            return self.n_edges
        return None

    @property
    def out_count(self) -> int:
        return self.n_out

    @property
    def edge_offsets(self) -> mx.array:
        """Start of each offset's edges, int32 (K + 1,)."""
        return mx.array(self.edge_offsets_host, dtype=mx.int32)

    def offset_edges(self, k: int) -> tuple[mx.array, mx.array]:
        """(in_rows, out_rows) of kernel offset ``k``."""
        a, b = self.edge_offsets_host[k], self.edge_offsets_host[k + 1]
        e = self.grouped_edges
        return e.in_rows[a:b], e.out_rows[a:b]

    @property
    def average_neighbors(self) -> float:
        """Edges per output row."""
        return self.n_edges / self.n_out if self.n_out else 0.0

    # ---- the documented views (lattice.core.relation_views), made on first use -------

    @property
    def contract(self) -> SparseRelationContract:
        """Counts (int32 ``[edge_count, out_count]``), capacities, kernel offsets and the
        coordinates the relation was built from."""
        return self.cached("view.contract", lambda: views.make_contract(self))

    @property
    def n_in_capacity(self) -> int:
        """Input rows the input CSR view spans (``in_count``, or a builder's buffer rows)."""
        return views.in_span(self)

    @property
    def n_out_capacity(self) -> int:
        """Output rows the output views span (``out_count``, or a builder's buffer rows)."""
        return views.out_span(self)

    @property
    def edge_capacity(self) -> int:
        """Edges held: the live edges (lattice's relations are exact)."""
        return self.n_edges

    @property
    def output_csr(self) -> RelationCSRView:
        """Edges by output row (``n_out_capacity + 1`` offsets); ``edge_ids`` index ``edges``,
        ascending (so by kernel offset) within a row."""
        return self.cached(
            "view.output_csr", lambda: views.grouped_view(self.grouped_edges.out_rows, views.out_span(self))
        )

    @property
    def input_csr(self) -> RelationCSRView:
        """Edges by input row (``n_in_capacity + 1`` offsets), ascending edge id within a row."""
        return self.cached(
            "view.input_csr", lambda: views.grouped_view(self.grouped_edges.in_rows, views.in_span(self))
        )

    @property
    def kernel_csr(self) -> RelationCSRView:
        """Edges by kernel offset: ``edge_offsets`` and the identity (edges are offset-major)."""
        return self.cached("view.kernel_csr", lambda: views.kernel_view(self))

    out_view = output_csr
    in_view = input_csr
    kernel_view = kernel_csr

    @property
    def row_offsets(self) -> mx.array:
        return self.output_csr.row_offsets

    @property
    def in_row_offsets(self) -> mx.array:
        return self.input_csr.row_offsets

    @property
    def in_edge_ids(self) -> mx.array:
        return self.input_csr.edge_ids

    @property
    def kernel_row_offsets(self) -> mx.array:
        return self.kernel_csr.row_offsets

    @property
    def kernel_edge_ids(self) -> mx.array:
        return self.kernel_csr.edge_ids

    @property
    def implicit_gemm(self) -> RelationImplicitGemmView | None:
        """The implicit-GEMM view once made (``require_implicit_gemm``), else None."""
        return self._derived.get("view.implicit_gemm")

    @property
    def sorted_implicit_gemm(self) -> RelationSortedImplicitGemmView | None:
        """The sorted implicit-GEMM view once made (``require_sorted_implicit_gemm``), else None."""
        return self._derived.get("view.sorted_implicit_gemm")

    def require_implicit_gemm(self) -> RelationImplicitGemmView:
        """The implicit-GEMM view (made once from ``neighbor_map``, kept): ``n_out_capacity``
        rows of K input rows (-1: none) and their occupancy masks."""
        return self.cached("view.implicit_gemm", lambda: views.implicit_gemm_view(self, views.out_span(self)))

    def require_sorted_implicit_gemm(self) -> RelationSortedImplicitGemmView:
        """The implicit-GEMM view sorted by row mask, with its tile masks (K <= 32; made once)."""
        return self.cached(
            "view.sorted_implicit_gemm", lambda: views.sorted_implicit_gemm_view(self.require_implicit_gemm())
        )


@dataclass(frozen=True)
class WindowMap:
    """The rows of a set grouped by the cells of its downsample (``KernelSpec.cell_windows``).

    Every input row lies in exactly one cell. ``in_rows`` lists the input rows cell by cell
    (cells in the output's first-occurrence order, kernel offsets ascending within a cell:
    the order in which the forward relation of the same windows reaches each output row);
    ``out_rows[p]`` is the output row of ``in_rows[p]`` (non-decreasing). Made by the
    downsample itself, so no relation has to be built to reduce over the windows.
    """

    in_key: object
    out_key: object
    in_rows: mx.array
    out_rows: mx.array
    out_count: int

    @property
    def edge_count(self) -> int:
        return int(self.in_rows.shape[0])

    n_edges = edge_count
    n_out = property(lambda self: self.out_count, doc="Output rows (the relation's spelling).")

    @property
    def known_edge_count(self) -> int:
        return self.edge_count


@dataclass(frozen=True)
class NeighborRelation:
    """Point neighbourhoods in CSR form by query row.

    The neighbours of query ``q`` are ``source_rows[offsets[q]:offsets[q + 1]]``,
    sorted by distance (ties by source row); ``query_rows`` repeats ``q`` for
    each of its edges. What the builder knew of its inputs: ``n_source_capacity``
    (source rows), ``max_neighbors`` (the per-query cap: ``k``, or the radius query's;
    None where unbounded) and ``active_queries`` (the live queries where the offsets span
    a query buffer with rows past them, which have no neighbours; None: every query).
    """

    offsets: mx.array  # (Q + 1,) int32: the CSR row starts
    source_rows: mx.array
    distances: mx.array
    n_source_capacity: int | None = field(default=None, kw_only=True)
    max_neighbors: int | None = field(default=None, kw_only=True)
    active_queries: int | None = field(default=None, kw_only=True)

    @property
    def counts(self) -> mx.array:
        """Neighbours of each query (int32 (Q,))."""
        return self.query_counts

    @property
    def query_counts(self) -> mx.array:
        """Neighbours of each query (int32 (Q,)); lattice's spelling of ``counts``, which a
        subclass may present in another form (lattice.core.relation_documented)."""
        return self.offsets[1:] - self.offsets[:-1]

    @property
    def query_rows(self) -> mx.array:
        """The query row of each edge (int32)."""
        return self.edges.query_rows

    @cached_property
    def edges(self) -> NeighborEdges:
        """(query row, source row, rank within the query's neighbours) of each edge."""
        query_rows = _repeat_index(self.query_counts)
        ranks = arange(self.n_edges, dtype=mx.int32) - self.offsets[query_rows]
        return NeighborEdges(query_rows, self.source_rows, ranks.astype(mx.int32))

    @property
    def row_offsets(self) -> mx.array:
        """The CSR row starts (``offsets``)."""
        return self.offsets

    @property
    def n_query_capacity(self) -> int:
        return int(self.offsets.shape[0]) - 1

    @property
    def query_count(self) -> mx.array:
        """int32 (1,): the live queries."""
        n = self.n_query_capacity if self.active_queries is None else self.active_queries
        return mx.array([n], dtype=mx.int32)

    @property
    def edge_count(self) -> int:
        return self.n_edges

    @property
    def n_edges(self) -> int:
        """Edges (lattice's spelling of ``edge_count``)."""
        return int(self.source_rows.shape[0])

    @property
    def edge_capacity(self) -> int:
        """Edges held: the live edges (lattice's relations are exact)."""
        return self.n_edges
