"""The CoordinateManager methods under the names mlx-lattice 0.6.3 documents (issue 17).

A mixin of :class:`lattice.core.coordinates.CoordinateManager`: each method is a thin form
of the manager's own ``insert`` / ``relation`` / ``table`` with the documented signature.
The relation builders return the documented form of the manager's cached relation
(:func:`lattice.core.relation_documented.documented`: the same object on every call,
while ``relation`` keeps returning lattice's own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import mlx.core as mx

from lattice import _ext
from lattice.core._checks import int_triple, validate_coords
from lattice.core.buffers import checked_count
from lattice.core.kernel import KernelSpec
from lattice.core.relation_documented import documented

if TYPE_CHECKING:
    from lattice.core.coordinates import CoordinateMapKey
    from lattice.core.relation_documented import KernelRelation


class DocumentedNames:
    """``insert_coords``, ``owns``, ``active_rows``, ``inverse_map`` and the relation builders
    by kind, over the manager's own methods."""

    def insert_coords(self, coords: mx.array, stride=1, active_rows=None) -> CoordinateMapKey:
        """``insert`` of the first ``active_rows`` rows (None: all) of an int32 / int64 ``(N, 4)``
        array; inserting the same array object with the same count and stride again gives
        the same key (as a SparseTensor made on it in this manager has)."""
        validate_coords(coords)
        op = "insert_coords"
        stride = int_triple(stride, "stride", op, minimum=1)
        n = coords.shape[0] if active_rows is None else checked_count(active_rows, coords.shape[0], op)
        return self._insert_array(coords, stride, n, op)

    def _insert_array(self, coords: mx.array, stride, n: int, op: str) -> CoordinateMapKey:
        """The key of the first ``n`` rows of the int32 array ``coords`` at ``stride``: the one
        this array object already has here (same count and stride), else a new ``insert``."""
        hit = self._by_object.get((id(coords), n, stride))
        if hit is not None and hit[0] is coords:
            return hit[1]
        key = self.insert(coords if n == coords.shape[0] else coords[:n], stride, op=op)
        self._by_object[(id(coords), n, stride)] = (coords, key)  # the array is held: its id stays its own
        return key

    def owns(self, key) -> bool:
        """Whether ``key`` names a set of this manager (``check_key`` raises instead)."""
        from lattice.core.coordinates import CoordinateMapKey  # the manager's own module

        return isinstance(key, CoordinateMapKey) and key.manager_id == self.id and key.id in self._tables

    def active_rows(self, key: CoordinateMapKey) -> mx.array:
        """The set's live-row count as an int32 ``(1,)`` array (a lazily counted set's lazy count)."""
        count = self.row_count(key)
        return mx.array([self.size(key)], mx.int32) if count is None else count.array.reshape(1)

    def inverse_map(self, source: CoordinateMapKey, target: CoordinateMapKey) -> mx.array:
        """The row in ``source`` of each row of ``target`` (int32, -1 where it has none)."""
        self.check_key(target, "inverse_map")
        return _ext.lookup(self.table(source), self.live_coords(target))

    def _documented(self, kind, key, size, stride=1, padding=0, dilation=1, target=None, *, op: str):
        spec = KernelSpec(size, stride, padding, dilation, op=op)
        return documented(self.relation(kind, key, spec, target, op=op))

    def kernel_relation(self, key, *, kernel_size=3, stride=1, padding=0, dilation=1) -> KernelRelation:
        """``relation('forward', key, KernelSpec(kernel_size, stride, padding, dilation))``."""
        return self._documented("forward", key, kernel_size, stride, padding, dilation, op="kernel_relation")

    def generative_relation(self, key, *, kernel_size=2, stride=2) -> KernelRelation:
        """``relation('generative', key, KernelSpec(kernel_size, stride))``."""
        return self._documented("generative", key, kernel_size, stride, op="generative_relation")

    def submanifold_kernel_relation(self, key, *, kernel_size=3, dilation=1) -> KernelRelation:
        """``relation('submanifold', key, KernelSpec(kernel_size, 1, 0, dilation))``."""
        op = "submanifold_kernel_relation"
        return self._documented("submanifold", key, kernel_size, 1, 0, dilation, op=op)

    def transposed_kernel_relation(
        self, key, *, kernel_size=2, stride=2, padding=0, dilation=1
    ) -> KernelRelation:
        """``relation('transposed', key, KernelSpec(...))``: onto the generated set at
        ``key.stride / stride``."""
        op = "transposed_kernel_relation"
        return self._documented("transposed", key, kernel_size, stride, padding, dilation, op=op)

    def target_kernel_relation(
        self, key, target_key, *, kernel_size=3, stride=1, padding=0, dilation=1
    ) -> KernelRelation:
        """``relation('target', key, KernelSpec(...), target_key)``: onto the set ``target_key``."""
        op = "target_kernel_relation"
        return self._documented("target", key, kernel_size, stride, padding, dilation, target_key, op=op)

    def target_transposed_view(self, key, target_key, *, kernel_size=2, stride=2, padding=0, dilation=1):
        """The implicit-GEMM view (``RelationImplicitGemmView``) of the transposed relation
        from ``key`` onto the set ``target_key`` (built once: the relation is cached)."""
        op = "target_transposed_view"
        rel = self._documented("transposed", key, kernel_size, stride, padding, dilation, target_key, op=op)
        return rel.require_implicit_gemm()
