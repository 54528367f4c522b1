"""Coordinate manager: owns coordinate sets (with their native hash tables) and
caches the relations between them.

A manager is explicit — a key on each tensor — never a hidden global. Tensors
derived from one input share their manager, so a U-Net builds each relation once.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from lattice import _ext
from lattice.core._checks import Triple, coords_array, int_triple
from lattice.core.kernel import KernelSpec
from lattice.core.relation import KernelRelation, RelationEdges, RelationKind, WindowMap

_manager_ids = itertools.count()


@dataclass(frozen=True)
class CoordinateMapKey:
    """Names one coordinate set of one manager. Valid only in the manager that made it."""

    id: int
    stride: Triple
    manager_id: int


@dataclass(frozen=True)
class Downsample:
    """A cached downsample: the coarse set's key, every input row's output row, and the
    window map when the cell volume allows one (see ``CoordinateManager.windows``)."""

    out_key: CoordinateMapKey
    inverse: mx.array
    windows: WindowMap | None


@dataclass(frozen=True)
class RelationCacheKey:
    """(input key, target key or None, kernel spec, kind): what a relation is cached by."""

    in_key: CoordinateMapKey
    target_key: CoordinateMapKey | None
    spec: KernelSpec
    kind: RelationKind


class CoordinateManager:
    """Coordinate sets and the relation cache of a family of tensors."""

    def __init__(self) -> None:
        self.id = next(_manager_ids)
        self._next_id = itertools.count()
        self._tables: dict[int, _ext.CoordTable] = {}
        self._keys: dict[int, CoordinateMapKey] = {}
        self._relations: dict[RelationCacheKey, KernelRelation] = {}
        self._downsampled: dict[tuple[int, Triple], Downsample] = {}
        self._interned: dict[tuple[str, int, Triple], CoordinateMapKey] = {}

    def __repr__(self) -> str:
        return f"CoordinateManager(id={self.id}, sets={len(self._tables)}, relations={len(self._relations)})"

    # ---- coordinate sets ---------------------------------------------------------

    def insert(self, coords, stride=1, *, op: str = "CoordinateManager.insert") -> CoordinateMapKey:
        """Registers a set of unique (batch, x, y, z) rows; returns its key.

        Raises ValueError on duplicate rows or negative batch indices.
        """
        coords = coords_array(coords, op)
        table = _ext.build_table(coords, op)
        return self._register(table, int_triple(stride, "stride", op, minimum=1))

    def adopt(self, table, stride=1) -> CoordinateMapKey:
        """Registers a native table made by lattice's own coordinate functions (quantize,
        union, dedup: unique rows by construction) without hashing its rows again."""
        return self._register(table, int_triple(stride, "stride", "CoordinateManager.adopt", minimum=1))

    def intern(self, coords, stride=1, *, op: str = "CoordinateManager.intern") -> CoordinateMapKey:
        """Like ``insert``, but the same coordinates at the same stride give the same key.

        Used for targets passed as arrays, so repeated calls hit the relation cache
        instead of registering a new set each time. Identity is a 128-bit digest of the
        rows (order matters).
        """
        coords = coords_array(coords, op)
        stride = int_triple(stride, "stride", op, minimum=1)
        data = np.asarray(coords)
        digest = hashlib.blake2b(data.tobytes(), digest_size=16).hexdigest()
        cache = (digest, data.shape[0], stride)
        key = self._interned.get(cache)
        if key is None:
            key = self._register(_ext.build_table(coords, op), stride)
            self._interned[cache] = key
        return key

    def _register(self, table, stride: Triple) -> CoordinateMapKey:
        key = CoordinateMapKey(next(self._next_id), stride, self.id)
        self._tables[key.id] = table
        self._keys[key.id] = key
        return key

    def check_key(self, key: CoordinateMapKey, op: str = "CoordinateManager") -> None:
        if not isinstance(key, CoordinateMapKey):
            raise TypeError(f"[{op}] expected a CoordinateMapKey, got {type(key).__name__}")
        if key.manager_id != self.id or key.id not in self._tables:
            raise ValueError(
                f"[{op}] coordinate key {key.id} (manager {key.manager_id}) does not belong to "
                f"manager {self.id}"
            )

    def table(self, key: CoordinateMapKey):
        self.check_key(key)
        return self._tables[key.id]

    def coords(self, key: CoordinateMapKey) -> mx.array:
        """The (N, 4) int32 coordinates of a set."""
        return self.table(key).coords

    def size(self, key: CoordinateMapKey) -> int:
        return self.table(key).size

    @property
    def keys(self) -> list[CoordinateMapKey]:
        return list(self._keys.values())

    @property
    def relation_count(self) -> int:
        """Number of cached relations."""
        return len(self._relations)

    def downsample(self, key: CoordinateMapKey, stride) -> CoordinateMapKey:
        """Key of ``unique(floor(coords / stride))`` at level ``key.stride * stride`` (cached)."""
        stride = int_triple(stride, "stride", "downsample", minimum=1)
        self.check_key(key, "downsample")
        if stride == (1, 1, 1):
            return key
        return self._downsample(key, stride).out_key

    def _downsample(self, key: CoordinateMapKey, stride: Triple) -> Downsample:
        cache = (key.id, stride)
        hit = self._downsampled.get(cache)
        if hit is None:
            table, inverse, rows, out = _ext.downsample(self._tables[key.id], stride)
            level = tuple(a * b for a, b in zip(key.stride, stride, strict=True))
            out_key = self._register(table, level)
            windows = None if rows is None else WindowMap(key, out_key, rows, out, table.size)
            hit = self._downsampled[cache] = Downsample(out_key, inverse, windows)
        return hit

    def windows(self, key: CoordinateMapKey, spec: KernelSpec) -> WindowMap | None:
        """The rows of ``key`` grouped by the windows of ``spec`` when they are the cells of its
        downsample (``spec.cell_windows``; cached with the downsample), else None. Also None for
        cells of more than 32 lattice points (the native downsample groups rows by an occupancy
        mask of 32 bits per cell)."""
        if not spec.cell_windows:
            return None
        self.check_key(key, "windows")
        if spec.stride == (1, 1, 1):
            rows = mx.arange(self.size(key), dtype=mx.int32)
            return WindowMap(key, key, rows, rows, self.size(key))
        return self._downsample(key, spec.stride).windows

    # ---- relations ---------------------------------------------------------------

    def relation(
        self,
        kind: RelationKind | str,
        in_key: CoordinateMapKey,
        spec: KernelSpec,
        target_key: CoordinateMapKey | None = None,
        *,
        op: str | None = None,
    ) -> KernelRelation:
        """Builds (or returns the cached) relation of ``kind`` from ``in_key``."""
        kind = RelationKind(kind)
        op = op or f"{kind.value}_kernel_relation"
        self.check_key(in_key, op)
        if target_key is not None:
            self.check_key(target_key, op)
        cache = RelationCacheKey(in_key, target_key, spec, kind)
        hit = self._relations.get(cache)
        if hit is None:
            hit = self._build(kind, in_key, spec, target_key, op)
            self._relations[cache] = hit
        return hit

    def _build(self, kind, in_key, spec, target_key, op) -> KernelRelation:
        from lattice.routing.relations import RelationRequest, route_relation

        table = self._tables[in_key.id]
        exclusive = self._exclusive(kind, in_key, spec, target_key)
        route = route_relation(RelationRequest(op, kind.value, table.size, spec.volume, exclusive=exclusive))
        route.require(  # the CPU relation builders of this build
            "cpu.hash_relation_symmetric",
            "cpu.hash_relation_input_driven",
            "cpu.hash_relation_scatter",
            "cpu.hash_relation_exclusive",
        )
        if kind is RelationKind.SUBMANIFOLD:
            arrays, out_key = self._build_submanifold(table, in_key, spec, target_key, op)
        elif kind in (RelationKind.FORWARD, RelationKind.TARGET):
            arrays, out_key = self._build_forward(table, kind, in_key, spec, target_key, op, exclusive)
        else:
            arrays, out_key = self._build_transposed(table, kind, in_key, spec, target_key, op, exclusive)
        in_rows, out_rows, counts = arrays[:3]
        offsets = [0]
        for c in counts.tolist():
            offsets.append(offsets[-1] + c)
        return KernelRelation(
            kind=kind,
            spec=spec,
            in_key=in_key,
            out_key=out_key,
            edges=RelationEdges(in_rows, out_rows, counts),
            out_coords=self._tables[out_key.id].coords,
            kernel_offsets=spec.offsets(),
            edge_offsets_host=tuple(offsets),
            route=route,
        )

    def _exclusive(self, kind, in_key, spec, target_key) -> bool:
        """Non-overlapping windows between a set and its downsample (even kernel == stride,
        no padding or dilation): the downsample's point->row map is the relation."""
        if not spec.cell_windows:
            return False
        if kind is RelationKind.FORWARD:
            return target_key is None
        if kind in (RelationKind.TRANSPOSED, RelationKind.GENERATIVE) and target_key is not None:
            hit = self._downsampled.get((target_key.id, spec.stride))
            return hit is not None and hit.out_key == in_key
        return False

    def _build_submanifold(self, table, in_key, spec, target_key, op):
        if target_key is not None:
            raise ValueError(f"[{op}] a submanifold relation has no explicit target")
        if not spec.is_odd:
            raise ValueError(f"[{op}] submanifold kernels must have odd sizes, got {spec.size}")
        if spec.stride != (1, 1, 1) or spec.padding != (0, 0, 0):
            raise ValueError(
                f"[{op}] submanifold relations take stride 1 and padding 0, got stride "
                f"{spec.stride} padding {spec.padding}"
            )
        return _ext.relation_submanifold(table, spec.size, spec.dilation), in_key

    def _build_forward(self, table, kind, in_key, spec, target_key, op, exclusive):
        level = tuple(a * b for a, b in zip(in_key.stride, spec.stride, strict=True))
        if kind is RelationKind.FORWARD:
            if target_key is not None:
                raise ValueError(f"[{op}] a forward relation generates its output; use target")
            out_key = self.downsample(in_key, spec.stride)
        else:
            if target_key is None:
                raise ValueError(f"[{op}] a target relation needs a target coordinate set")
            self._check_level(target_key, level, op)
            out_key = target_key
        if exclusive:
            if spec.stride == (1, 1, 1):
                inverse = mx.arange(table.size, dtype=mx.int32)
            else:
                inverse = self._downsample(in_key, spec.stride).inverse
            return _ext.relation_exclusive(table, inverse, spec.stride), out_key
        arrays = _ext.relation_forward(
            table, self._tables[out_key.id], spec.size, spec.stride, spec.padding, spec.dilation
        )
        return arrays, out_key

    def _build_transposed(self, table, kind, in_key, spec, target_key, op, exclusive):
        if kind is RelationKind.GENERATIVE and (spec.padding != (0, 0, 0) or spec.dilation != (1, 1, 1)):
            raise ValueError(
                f"[{op}] generative relations take no padding or dilation, got padding "
                f"{spec.padding} dilation {spec.dilation}"
            )
        level = self._transposed_level(in_key.stride, spec.stride, op)
        if target_key is not None:
            self._check_level(target_key, level, op)
        if exclusive:
            # Back onto the set this one was downsampled from: the forward relation of
            # that set, edges reversed (same offsets).
            fwd = self.relation(RelationKind.FORWARD, target_key, spec, op=op)
            return (fwd.edges.out_rows, fwd.edges.in_rows, fwd.counts), target_key
        target_table = None if target_key is None else self._tables[target_key.id]
        arrays = _ext.relation_transposed(
            table, target_table, spec.size, spec.stride, spec.padding, spec.dilation
        )
        out_key = target_key if target_key is not None else self._register(arrays[3], level)
        return arrays, out_key

    @staticmethod
    def _transposed_level(in_stride: Triple, stride: Triple, op: str) -> Triple:
        if any(a % b for a, b in zip(in_stride, stride, strict=True)):
            raise ValueError(
                f"[{op}] tensor stride {in_stride} is not divisible by the transposed stride {stride}"
            )
        return tuple(a // b for a, b in zip(in_stride, stride, strict=True))

    def _check_level(self, key: CoordinateMapKey, level: Triple, op: str) -> None:
        if key.stride != tuple(level):
            raise ValueError(
                f"[{op}] target stride must be {tuple(level)} for this relation, got {key.stride}"
            )
