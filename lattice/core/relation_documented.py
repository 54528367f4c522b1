"""Relations in the forms mlx-lattice 0.6.3 documents (issue 17), over lattice's relations.

``KernelRelation`` and ``NeighborRelation`` here are subclasses of lattice's
(:mod:`lattice.core.relation`): the same fields, so every lattice op and route takes them
and runs as on lattice's own relation, with the documented members on top:

- ``counts`` is int32 ``[edge_count, out_count]`` (a neighbour relation's
  ``[edge_count, query_count]``), ``edge_count`` / ``out_count`` / ``query_count`` int32
  ``(1,)`` arrays, ``kernel_offsets`` a tuple of ``(dx, dy, dz)`` int triples, ``n_kernels``
  / ``n_in_capacity`` / ``n_out_capacity`` / ``out_coords`` the contract's;
- ``edges`` is a ``RelationEdges`` of ``(in_rows, out_rows, kernel_ids)`` sorted by output
  row (kernel offset ascending within a row), ``output_csr`` groups them by output row
  (no ``edge_ids``: they are in that order), ``input_csr`` / ``kernel_csr`` by input row /
  kernel offset (``edge_ids`` index ``edges``, ascending within a row).

lattice's ops read lattice's own spellings (``grouped_edges``, ``n_edges``, ``n_out``,
``offset_counts``, ``offset_table``, ``out_table``, ``spec.volume``), which these classes
do not redefine.

Two ways in: the documented constructors (edge arrays and optional views, validated as
0.6.3 validates them; the lattice form — edges grouped by kernel offset — is made from the
live edges once), and :func:`documented`, the one place a relation lattice built becomes
one of these: a shallow copy (no array is copied) sharing the relation's fields and its
cache of derived forms, itself kept with the relation, so a cached relation keeps its own
class for lattice's callers and the documented view of it is the same object every time.
"""

from __future__ import annotations

from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from lattice.core import relation as _lattice
from lattice.core import relation_views as views
from lattice.core.kernel import KernelSpec
from lattice.core.relation_views import (
    NeighborEdges,
    RelationCSRView,
    RelationImplicitGemmView,
    RelationSortedImplicitGemmView,
    SparseRelationContract,
    _count_array,
    _describe,
    _optional_count,
    _rows_array,
    _same_rows,
)

_DOC = "view.documented."  # the _derived keys of the documented views (dropped with the others)


@dataclass(frozen=True)
class RelationEdges:
    """The edges of a kernel relation as three arrays of one length: edge ``e`` reads input
    row ``in_rows[e]`` into output row ``out_rows[e]`` at kernel offset ``kernel_ids[e]``.
    ``capacity``: the edges held (rows past the relation's ``edge_count`` are padding)."""

    in_rows: mx.array
    out_rows: mx.array
    kernel_ids: mx.array

    def __post_init__(self) -> None:
        op = "RelationEdges"
        for name in ("in_rows", "out_rows", "kernel_ids"):
            _rows_array(getattr(self, name), name, op)
        _same_rows(op, in_rows=self.in_rows, out_rows=self.out_rows, kernel_ids=self.kernel_ids)

    @property
    def capacity(self) -> int:
        return int(self.in_rows.shape[0])


def _row_offsets(value, name: str, op: str) -> None:
    if not isinstance(value, mx.array) or value.ndim != 1 or value.dtype != mx.int32:
        raise ValueError(f"[{op}] {name} must be a 1-D int32 array (rows + 1,), got {_describe(value)}")


def _zeros(n: int) -> mx.array:
    return mx.zeros((n,), dtype=mx.int32)


def _live(counts: mx.array, capacity: int) -> int:
    """The live edges: ``counts[0]`` within ``[0, capacity]`` (one host read)."""
    return min(max(int(counts[0].item()), 0), capacity)


def _host_rows(a: mx.array, n: int, name: str, op: str) -> np.ndarray:
    rows = np.asarray(a[:n], dtype=np.int64)
    if rows.size and rows.min() < 0:
        raise ValueError(f"[{op}] the live {name} must be non-negative, got {int(rows.min())}")
    return rows


def _spec(offsets: tuple, volume: int, stride, padding, op: str) -> KernelSpec:
    """A kernel of ``volume`` offsets: the offsets' extent per axis where it multiplies to
    ``volume`` (a regular kernel), else ``(volume, 1, 1)``; the stride and padding where
    lattice's kernel takes them."""
    size = (volume, 1, 1)
    if offsets:
        extent = tuple(len({o[a] for o in offsets}) for a in range(3))
        if extent[0] * extent[1] * extent[2] == volume:
            size = extent
    try:
        return KernelSpec(size, stride, padding, op=op)
    except ValueError:  # a stride or padding lattice's kernels do not take: the contract keeps it
        return KernelSpec(size, op=op)


class KernelRelation(_lattice.KernelRelation):
    """A kernel relation with mlx-lattice 0.6.3's constructor and members (module docstring).

    ``KernelRelation(in_rows, out_rows, kernel_ids, *, ...)`` holds the given edge arrays
    and views (views not given are zero-filled, as 0.6.3 leaves them); ``counts`` defaults
    to ``[edges held, out_coords rows or 0]``. lattice's form of it spans at least the
    rows, offsets and input rows its live edges name.
    """

    def __init__(
        self,
        in_rows,
        out_rows,
        kernel_ids,
        *,
        row_offsets=None,
        counts=None,
        in_row_offsets=None,
        in_edge_ids=None,
        kernel_row_offsets=None,
        kernel_edge_ids=None,
        kernel_offsets=(),
        out_coords=None,
        n_in_capacity=None,
        n_out_capacity=None,
        n_kernels=None,
        source_coords=None,
        source_active_rows=None,
        target_coords=None,
        target_active_rows=None,
        stride=(1, 1, 1),
        padding=(0, 0, 0),
        kind="forward",
        implicit_gemm=None,
        sorted_implicit_gemm=None,
    ) -> None:
        op = "KernelRelation"
        if counts is None:
            out_rows_given = 0 if out_coords is None else out_coords.shape[0]
            counts = mx.array([in_rows.shape[0], out_rows_given], dtype=mx.int32)
        _count_array(counts, "counts", op, (2,))
        contract = SparseRelationContract(
            counts=counts,
            kernel_offsets=kernel_offsets,
            out_coords=out_coords,
            n_in_capacity=n_in_capacity,
            n_out_capacity=n_out_capacity,
            n_kernels=n_kernels,
            source_coords=source_coords,
            source_active_rows=source_active_rows,
            target_coords=target_coords,
            target_active_rows=target_active_rows,
            stride=stride,
            padding=padding,
            kind=kind,
        )
        n_out = contract.n_out_capacity or 0
        row_offsets = _zeros(n_out + 1) if row_offsets is None else row_offsets
        _row_offsets(row_offsets, "row_offsets", op)
        edges = RelationEdges(in_rows, out_rows, kernel_ids)
        e = edges.capacity
        in_row_offsets = (
            _zeros((contract.n_in_capacity or 0) + 1) if in_row_offsets is None else in_row_offsets
        )
        in_edge_ids = _zeros(e) if in_edge_ids is None else in_edge_ids
        kernel_row_offsets = (
            _zeros((contract.n_kernels or 0) + 1) if kernel_row_offsets is None else kernel_row_offsets
        )
        kernel_edge_ids = _zeros(e) if kernel_edge_ids is None else kernel_edge_ids
        csr = {
            "output_csr": RelationCSRView(row_offsets),
            "input_csr": RelationCSRView(in_row_offsets, in_edge_ids),
            "kernel_csr": RelationCSRView(kernel_row_offsets, kernel_edge_ids),
        }
        if contract.n_out_capacity is not None and row_offsets.shape[0] != contract.n_out_capacity + 1:
            raise ValueError(
                f"[{op}] row_offsets must have length n_out_capacity + 1 = {contract.n_out_capacity + 1}, "
                f"got {row_offsets.shape[0]}"
            )
        for name, view in (("implicit_gemm", implicit_gemm), ("sorted_implicit_gemm", sorted_implicit_gemm)):
            kind_of = RelationImplicitGemmView if name == "implicit_gemm" else RelationSortedImplicitGemmView
            if view is not None and not isinstance(view, kind_of):
                raise TypeError(
                    f"[{op}] {name} must be a {kind_of.__name__} or None, got {type(view).__name__}"
                )
        derived = {"view.contract": contract, _DOC + "edges": edges} | {_DOC + k: v for k, v in csr.items()}
        if implicit_gemm is not None:
            derived["view.implicit_gemm"] = implicit_gemm
        if sorted_implicit_gemm is not None:
            derived["view.sorted_implicit_gemm"] = sorted_implicit_gemm
        form = _lattice_form(edges, contract, op)
        if out_coords is not None and out_coords.shape[0] > form["out_coords"].shape[0]:
            # lattice's views (the implicit-GEMM map) span the given output buffer
            derived[views.SUPPORT] = views.RelationSupport(out_coords=out_coords)
        self.__dict__.update(form, _derived=derived, route=None)

    @classmethod
    def _of(cls, relation: _lattice.KernelRelation) -> KernelRelation:
        """A shallow copy of lattice's ``relation`` as this class (fields and cache shared)."""
        obj = object.__new__(cls)
        obj.__dict__.update(vars(relation))
        return obj

    # ---- the documented members ----------------------------------------------------------

    @property
    def counts(self) -> mx.array:
        """int32 ``[edge_count, out_count]``."""
        return self.contract.counts

    @property
    def edge_count(self) -> mx.array:
        """int32 (1,): the live edges."""
        return self.contract.edge_count

    @property
    def out_count(self) -> mx.array:
        """int32 (1,): the live output rows."""
        return self.contract.out_count

    @property
    def kernel_offsets(self) -> tuple[tuple[int, int, int], ...]:
        return self.contract.kernel_offsets

    @property
    def out_coords(self) -> mx.array | None:
        return self.contract.out_coords

    @property
    def n_in_capacity(self) -> int | None:
        return self.contract.n_in_capacity

    @property
    def n_out_capacity(self) -> int | None:
        return self.contract.n_out_capacity

    @property
    def n_kernels(self) -> int | None:
        return self.contract.n_kernels

    @property
    def edge_capacity(self) -> int:
        return self.edges.capacity

    @property
    def edges(self) -> RelationEdges:
        """The edges by output row, kernel offset ascending within a row."""
        return self.cached(_DOC + "edges", lambda: _edges_by_output(self))

    @property
    def output_csr(self) -> RelationCSRView:
        return self.cached(
            _DOC + "output_csr",
            lambda: RelationCSRView(
                views.grouped_view(self.edges.out_rows, views.out_span(self)).row_offsets
            ),
        )

    @property
    def input_csr(self) -> RelationCSRView:
        return self.cached(
            _DOC + "input_csr", lambda: views.grouped_view(self.edges.in_rows, views.in_span(self))
        )

    @property
    def kernel_csr(self) -> RelationCSRView:
        return self.cached(
            _DOC + "kernel_csr", lambda: views.grouped_view(self.edges.kernel_ids, self.spec.volume)
        )

    out_view = output_csr
    in_view = input_csr
    kernel_view = kernel_csr


def _edges_by_output(relation: _lattice.KernelRelation) -> RelationEdges:
    """lattice's offset-grouped edges reordered by (output row, kernel offset): a relation
    has at most one edge per pair, so the order is total."""
    e = relation.grouped_edges
    k = e.kernel_ids
    if len(e) == 0:
        return RelationEdges(e.in_rows, e.out_rows, k)
    order = mx.argsort(e.out_rows.astype(mx.int64) * relation.spec.volume + k.astype(mx.int64))
    return RelationEdges(e.in_rows[order], e.out_rows[order], k[order])


def _lattice_form(edges: RelationEdges, contract: SparseRelationContract, op: str) -> dict:
    """The fields of lattice's relation holding the live edges: grouped by kernel offset
    (output rows ascending within an offset), over at least the rows the edges name."""
    n = _live(contract.counts, edges.capacity)
    ins = _host_rows(edges.in_rows, n, "in_rows", op)
    outs = _host_rows(edges.out_rows, n, "out_rows", op)
    ks = _host_rows(edges.kernel_ids, n, "kernel_ids", op)
    offsets = contract.kernel_offsets
    volume = max(contract.n_kernels or 0, int(ks.max()) + 1 if n else 0, 1)
    n_out = max(int(contract.counts[1].item()), int(outs.max()) + 1 if n else 0)
    n_in = max(contract.n_in_capacity or 0, int(ins.max()) + 1 if n else 0)
    order = np.lexsort((outs, ks))
    grouped = _lattice.RelationEdges(
        mx.array(ins[order].astype(np.int32)),
        mx.array(outs[order].astype(np.int32)),
        mx.array(np.bincount(ks, minlength=volume).astype(np.int32)),
    )
    given = contract.out_coords
    if given is not None and given.shape[0] >= n_out:
        out_table = given[:n_out].astype(mx.int32)
    else:
        head = mx.zeros((0, 4), mx.int32) if given is None else given.astype(mx.int32)
        out_table = mx.concatenate([head, mx.zeros((n_out - head.shape[0], 4), mx.int32)])
    table = np.asarray(offsets, dtype=np.int32).reshape(-1, 3)
    return {
        "kind": _lattice.RelationKind(contract.kind),
        "spec": _spec(offsets, volume, contract.stride, contract.padding, op),
        "in_key": None,
        "out_key": None,
        "out_coords": out_table,
        "kernel_offsets": mx.array(table),
        "in_count": n_in,
        "built_edges": grouped,
        "built_map": None,
    }


class NeighborRelation(_lattice.NeighborRelation):
    """A neighbour relation with mlx-lattice 0.6.3's constructor and members (module docstring).

    ``NeighborRelation(query_rows, source_rows, neighbor_ids, distances, *, ...)`` holds
    the given edges, distances and ``row_offsets`` (zero-filled when not given);
    ``counts`` defaults to ``[edges held, 0]``.
    """

    def __init__(
        self,
        query_rows,
        source_rows,
        neighbor_ids,
        distances,
        *,
        row_offsets=None,
        counts=None,
        n_query_capacity=None,
        n_source_capacity=None,
        max_neighbors=None,
    ) -> None:
        op = "NeighborRelation"
        edges = NeighborEdges(query_rows, source_rows, neighbor_ids)
        floats = (mx.float32, mx.float64)
        if not isinstance(distances, mx.array) or distances.ndim != 1 or distances.dtype not in floats:
            raise ValueError(
                f"[{op}] distances must be a 1-D float32 or float64 array (E,), got {_describe(distances)}"
            )
        _same_rows(op, query_rows=query_rows, distances=distances)
        if counts is None:
            counts = mx.array([query_rows.shape[0], 0], dtype=mx.int32)
        _count_array(counts, "counts", op, (2,))
        if row_offsets is None:
            row_offsets = _zeros((0 if n_query_capacity is None else int(n_query_capacity)) + 1)
        _row_offsets(row_offsets, "row_offsets", op)
        if n_query_capacity is not None and row_offsets.shape[0] != int(n_query_capacity) + 1:
            raise ValueError(
                f"[{op}] row_offsets must have length n_query_capacity + 1 = {int(n_query_capacity) + 1}, "
                f"got {row_offsets.shape[0]}"
            )
        self.__dict__.update(
            offsets=row_offsets,
            source_rows=source_rows,
            distances=distances,
            n_source_capacity=_optional_count(n_source_capacity, "n_source_capacity", op),
            max_neighbors=_optional_count(max_neighbors, "max_neighbors", op),
            active_queries=None,
            edges=edges,  # the cached_property's slot: the given edges
            _documented_counts=counts,
            _documented_query_capacity=_optional_count(n_query_capacity, "n_query_capacity", op),
        )

    @classmethod
    def _of(cls, relation: _lattice.NeighborRelation) -> NeighborRelation:
        """A shallow copy of lattice's ``relation`` as this class."""
        obj = object.__new__(cls)
        obj.__dict__.update({k: v for k, v in vars(relation).items() if k != _KEPT})
        live = relation.n_query_capacity if relation.active_queries is None else relation.active_queries
        obj.__dict__.update(
            _documented_counts=mx.array([relation.n_edges, live], dtype=mx.int32),
            _documented_query_capacity=relation.n_query_capacity,
        )
        return obj

    @property
    def counts(self) -> mx.array:
        """int32 ``[edge_count, query_count]``."""
        return self._documented_counts

    @property
    def edge_count(self) -> mx.array:
        """int32 (1,): the live edges."""
        return self.counts[:1]

    @property
    def query_count(self) -> mx.array:
        """int32 (1,): the live queries."""
        return self.counts[1:2]

    @property
    def n_query_capacity(self) -> int | None:
        return self._documented_query_capacity

    @property
    def row_offsets(self) -> mx.array:
        return self.offsets

    @property
    def edge_capacity(self) -> int:
        return self.edges.capacity


_KEPT = "_documented"  # NeighborRelation's __dict__ key of its documented copy


def documented(relation):
    """``relation`` (lattice's ``KernelRelation`` / ``NeighborRelation``) in the documented
    forms: itself where it is one already, else its documented copy, made once and kept
    with it (the same object on every call; ``relation`` keeps its own class)."""
    if isinstance(relation, (KernelRelation, NeighborRelation)):
        return relation
    if isinstance(relation, _lattice.KernelRelation):
        return relation.cached("documented", lambda: KernelRelation._of(relation))
    if isinstance(relation, _lattice.NeighborRelation):
        kept = vars(relation).get(_KEPT)
        if kept is None:
            kept = relation.__dict__[_KEPT] = NeighborRelation._of(relation)
        return kept
    raise TypeError(
        f"[documented] expected a KernelRelation or NeighborRelation, got {type(relation).__name__}"
    )


__all__ = ["KernelRelation", "NeighborRelation", "RelationEdges", "documented"]
