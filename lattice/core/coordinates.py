"""Coordinate manager: a cache of coordinate sets (with their native and GPU hash tables),
their downsamples and the relations between them.

A manager is explicit — a key on each tensor — never a hidden global. Tensors
derived from one input share their manager, so a U-Net builds each relation once.

It chooses no route and holds no builder: a set it does not hash yet, or a relation it
does not hold yet, is built where the routing layer says (``lattice.routing.coords.
build_set``, ``lattice.routing.relations.build_relation``) by the backends' builders,
which register what they make here (``adopt``, ``add_gpu_set``, ``store_downsample``).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass

import mlx.core as mx
import numpy as np

from lattice import _ext
from lattice.core._checks import Triple, coords_array, int_triple
from lattice.core.buffers import arange
from lattice.core.kernel import KernelSpec
from lattice.core.manager_names import DocumentedNames
from lattice.core.relation import KernelRelation, RelationKind, WindowMap
from lattice.core.relation_views import SUPPORT, RelationSupport
from lattice.core.rows import RowCount
from lattice.routing.coords import build_set
from lattice.routing.relations import build_relation

# rows per downsample cell up to which the native downsample groups the rows by cell
# (an occupancy mask of 32 bits per cell: csrc/backend/cpu/coords.h, kMaxWindowVolume)
MAX_WINDOW_VOLUME = 32

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


@dataclass(frozen=True)
class _Pending:
    """A set made by a GPU builder (unique rows): its CPU table is built on first CPU use.
    ``count`` is set where the builder returned an upper-bound buffer (a manager's ``lazy_rows``):
    the first ``count`` rows are the set, the rest hold batch index -1."""

    coords: mx.array
    count: RowCount | None = None


class CoordinateManager(DocumentedNames):
    """Coordinate sets and the relation cache of a family of tensors.

    ``lazy_rows``: where a GPU builder makes a new set for these tensors (the output of a
    strided convolution or pooling), it returns an upper-bound buffer and a lazy count
    instead of reading the count back (``lattice.core.rows``); off by default.
    """

    def __init__(self, *, lazy_rows: bool = False) -> None:
        self.id = next(_manager_ids)
        self.lazy_rows = bool(lazy_rows)
        self._next_id = itertools.count()
        self._tables: dict[int, _ext.CoordTable | _Pending] = {}
        self._cpu_tables: dict[int, _ext.CoordTable] = {}  # of GPU-made sets, built on first CPU use
        self._gpu_tables: dict[
            int, object
        ] = {}  # lattice.backends.cuda.coords.GpuTable, built on first GPU use
        self._keys: dict[int, CoordinateMapKey] = {}
        self._relations: dict[RelationCacheKey, KernelRelation] = {}
        self._downsampled: dict[tuple[int, Triple], Downsample] = {}
        # downsamples a GPU builder queued ahead, their sizes not read yet: (key id, stride) of
        # the first of a chain -> what registers the whole chain (``queue_downsample``)
        self._queued: dict[tuple[int, Triple], Callable[[], None]] = {}
        self._interned: dict[tuple[str, int, Triple], CoordinateMapKey] = {}
        self._by_object: dict[tuple[int, int, Triple], tuple[mx.array, CoordinateMapKey]] = {}
        # the caller's (N, 4) int32 array of a set made by ``insert``: ``coords(key)`` returns
        # that object, so tensors on the set (an op's output on its input's or target's
        # support) share it
        self._arrays: dict[int, mx.array] = {}

    def __repr__(self) -> str:
        lazy = ", lazy_rows=True" if self.lazy_rows else ""
        return (
            f"CoordinateManager(id={self.id}, sets={len(self._tables)}, "
            f"relations={len(self._relations)}{lazy})"
        )

    # ---- coordinate sets ---------------------------------------------------------

    def insert(self, coords, stride=1, *, op: str = "CoordinateManager.insert") -> CoordinateMapKey:
        """Registers a set of unique (batch, x, y, z) rows; returns its key.

        Raises ValueError on duplicate rows or negative batch indices. Where MLX's default
        device is a CUDA GPU the set is hashed and checked there (one host read: valid or
        not) and its CPU table is built only if a CPU route asks; an invalid set is
        re-checked by the CPU builder, whose error names the offending rows.
        """
        coords = coords_array(coords, op)
        stride = int_triple(stride, "stride", op, minimum=1)
        key = self.adopt(build_set(coords, op), stride)
        self._arrays[key.id] = coords
        return key

    def adopt(self, table, stride=1) -> CoordinateMapKey:
        """Registers a table made by lattice's own coordinate functions (quantize, union,
        dedup: unique rows by construction) without hashing its rows again: a native table,
        or a GPU table (``lattice.backends.cuda.coords.GpuTable``) of a set known to be valid,
        whose CPU table is built only if a CPU route asks."""
        stride = int_triple(stride, "stride", "CoordinateManager.adopt", minimum=1)
        if isinstance(table, _ext.CoordTable):
            return self._register(table, stride)
        key = self._register(_Pending(table.coords), stride)
        self._gpu_tables[key.id] = table
        return key

    def add_gpu_set(self, coords: mx.array, stride, count: RowCount | None = None) -> CoordinateMapKey:
        """Registers unique rows made by a GPU builder (no table yet: its CPU table is built on
        first CPU use). ``count``: the lazy count of an upper-bound buffer (``lazy_rows``)."""
        return self._register(_Pending(coords, count), tuple(stride))

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
        """The native (CPU) hash table of a set; sets made on the GPU get theirs on first use."""
        self.check_key(key)
        return self._cpu_table(key.id)

    def _cpu_table(self, key_id: int):
        t = self._tables[key_id]
        if not isinstance(t, _Pending):
            return t
        hit = self._cpu_tables.get(key_id)
        if hit is None:
            # Unique by construction (a GPU dedup made them): no duplicate check needed, but the
            # native builder checks anyway and the cost is paid once. The set keeps its GPU
            # buffer (a lazily counted one: routes index its rows); its count is read here.
            coords = t.coords if t.count is None else t.coords[: t.count.value()]
            hit = self._cpu_tables[key_id] = _ext.build_table(coords, "CoordinateManager")
        return hit

    def gpu_table(self, key: CoordinateMapKey, build):
        """The GPU hash table of a set, made by ``build(coords, count)`` on first use and kept
        (``lattice.backends.cuda.coords.gpu_table`` passes the GPU table builder)."""
        self.check_key(key)
        hit = self._gpu_tables.get(key.id)
        if hit is None:
            count = self.row_count(key)
            hit = self._gpu_tables[key.id] = build(self.coords(key), None if count is None else count.array)
        return hit

    def coords(self, key: CoordinateMapKey) -> mx.array:
        """The (N, 4) int32 coordinates of a set (a lazily counted set's whole buffer); for a
        set made by ``insert``, the very array object it was given."""
        self.check_key(key)
        own = self._arrays.get(key.id)
        return self._tables[key.id].coords if own is None else own

    def size(self, key: CoordinateMapKey) -> int:
        """Rows in the set (a lazily counted set's count is read once)."""
        self.check_key(key)
        t = self._tables[key.id]
        if isinstance(t, _Pending):
            return int(t.coords.shape[0]) if t.count is None else t.count.value()
        return t.size

    def capacity(self, key: CoordinateMapKey) -> int:
        """Rows of the set's buffer: its size, or a lazily counted set's upper bound (no read)."""
        self.check_key(key)
        return int(self._tables[key.id].coords.shape[0])

    def row_count(self, key: CoordinateMapKey) -> RowCount | None:
        """The lazy count of a set a GPU builder made as an upper-bound buffer (``lazy_rows``),
        else None."""
        self.check_key(key)
        t = self._tables[key.id]
        return t.count if isinstance(t, _Pending) else None

    def live_coords(self, key: CoordinateMapKey) -> mx.array:
        """The set's rows without a lazily counted set's spare rows (reads its count)."""
        coords = self.coords(key)
        return coords if self.row_count(key) is None else coords[: self.size(key)]

    @property
    def keys(self) -> list[CoordinateMapKey]:
        return list(self._keys.values())

    @property
    def relation_count(self) -> int:
        """Number of cached relations."""
        return len(self._relations)

    def downsample(self, key: CoordinateMapKey, stride) -> CoordinateMapKey:
        """Key of ``unique(floor(coords / stride))`` at level ``key.stride * stride`` (cached;
        rows in first-occurrence order). Made by the native core unless a GPU builder stored
        one first (``store_downsample``)."""
        stride = int_triple(stride, "stride", "downsample", minimum=1)
        self.check_key(key, "downsample")
        if stride == (1, 1, 1):
            return key
        return self._downsample(key, stride).out_key

    def _downsample(self, key: CoordinateMapKey, stride: Triple) -> Downsample:
        hit = self.cached_downsample(key, stride)
        if hit is None:
            level = tuple(a * b for a, b in zip(key.stride, stride, strict=True))
            table, inverse, rows, out = _ext.downsample(self._cpu_table(key.id), stride)
            out_key = self._register(table, level)
            windows = None if rows is None else WindowMap(key, out_key, rows, out, table.size)
            hit = self._downsampled[(key.id, stride)] = Downsample(out_key, inverse, windows)
        return hit

    def cached_downsample(self, key: CoordinateMapKey, stride: Triple) -> Downsample | None:
        """The downsample of ``key`` by ``stride`` if the manager holds it (a queued one is
        registered first: ``queue_downsample``)."""
        at = (key.id, tuple(stride))
        settle = self._queued.pop(at, None)
        if settle is not None:
            settle()
        return self._downsampled.get(at)

    def queue_downsample(self, key: CoordinateMapKey, stride: Triple, settle: Callable[[], None]) -> None:
        """Notes a downsample of ``key`` by ``stride`` that a GPU builder queued without reading
        its size (with the levels below it, each from the one before): ``settle()`` registers
        them all (``add_gpu_set``, ``store_downsample``) the first time one is asked for, so a
        network's coarse levels cost one host read, made after their kernels ran, instead of
        one per level between its stages (``lattice.routing.coords.queue_downsamples``)."""
        self._queued[(key.id, tuple(stride))] = settle

    def store_downsample(
        self, key, stride: Triple, out_key: CoordinateMapKey, inverse: mx.array
    ) -> Downsample:
        """Keeps a downsample a GPU builder made (no window map)."""
        hit = self._downsampled[(key.id, tuple(stride))] = Downsample(out_key, inverse, None)
        return hit

    def downsample_inverse(self, key: CoordinateMapKey, stride: Triple) -> mx.array:
        """Every row's row in the downsample by ``stride`` (made as ``downsample`` makes it)."""
        return self._downsample(key, tuple(stride)).inverse

    def has_windows(self, key: CoordinateMapKey, spec: KernelSpec) -> bool:
        """Whether ``windows(key, spec)`` gives a window map, without making it: the windows
        are the downsample's cells, of at most 32 lattice points, and the downsample is not
        one a GPU builder made."""
        if not spec.cell_windows:
            return False
        if spec.stride == (1, 1, 1):
            return True
        hit = self.cached_downsample(key, spec.stride)
        if hit is not None:
            return hit.windows is not None
        return spec.stride[0] * spec.stride[1] * spec.stride[2] <= MAX_WINDOW_VOLUME

    def windows(self, key: CoordinateMapKey, spec: KernelSpec) -> WindowMap | None:
        """The rows of ``key`` grouped by the windows of ``spec`` when they are the cells of its
        downsample (``spec.cell_windows``; cached with the downsample), else None. Also None for
        cells of more than 32 lattice points (the native downsample groups rows by an occupancy
        mask of 32 bits per cell), and for downsamples made on the GPU."""
        if not spec.cell_windows:
            return None
        self.check_key(key, "windows")
        if spec.stride == (1, 1, 1):
            n = self.capacity(key)
            rows = arange(n, dtype=mx.int32)
            return WindowMap(key, key, rows, rows, n)
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
        device=None,
    ) -> KernelRelation:
        """Builds (or returns the cached) relation of ``kind`` from ``in_key``.

        ``device`` ('cpu', 'gpu', an mx.Device, default MLX's default device) picks the
        builder when the relation is not cached yet; a cached relation serves every device
        (each form, edge list or dense map, is derived once from the other when needed).
        """
        kind = RelationKind(kind)
        op = op or f"{kind.value}_kernel_relation"
        self.check_key(in_key, op)
        if target_key is not None:
            self.check_key(target_key, op)
        cache = RelationCacheKey(in_key, target_key, spec, kind)
        hit = self._relations.get(cache)
        if hit is None:
            hit = self._build(kind, in_key, spec, target_key, op, device)
            self._relations[cache] = hit
        return hit

    def covering_relation(self, in_key: CoordinateMapKey, spec: KernelSpec) -> KernelRelation | None:
        """The smallest cached submanifold relation of ``in_key`` whose kernel covers ``spec``
        (``KernelSpec.covers``: same dilation, at least as large on every axis), or None. The
        submanifold relation of ``spec`` is then the covering one's edges at ``spec``'s offsets."""
        best = None
        for cache, rel in self._relations.items():
            if (
                cache.kind is RelationKind.SUBMANIFOLD
                and cache.in_key == in_key
                and cache.spec != spec
                and cache.spec.covers(spec)
                and (best is None or cache.spec.volume < best.spec.volume)
            ):
                best = rel
        return best

    def _build(self, kind, in_key, spec, target_key, op, device=None) -> KernelRelation:
        self._check_relation(kind, in_key, spec, target_key, op)
        route, out_key, edges, nmap = build_relation(self, kind, in_key, spec, target_key, op, device)
        return KernelRelation(
            kind=kind,
            spec=spec,
            in_key=in_key,
            out_key=out_key,
            out_coords=self.coords(out_key),
            kernel_offsets=spec.offsets(),
            in_count=self.capacity(in_key),
            built_edges=edges,
            built_map=nmap,
            route=route,
            _derived={SUPPORT: self._support(kind, in_key, out_key, target_key)},
        )

    def _support(self, kind, in_key, out_key, target_key) -> RelationSupport:
        """The coordinates a relation's contract reports: its input set, and the target set
        where the output support was given (target, submanifold, or an explicit target)."""
        given = target_key is not None or kind is RelationKind.SUBMANIFOLD
        return RelationSupport(
            source_coords=self.coords(in_key),
            source_active_rows=self._live_rows(in_key),
            target_coords=self.coords(out_key) if given else None,
            target_active_rows=self._live_rows(out_key) if given else None,
        )

    def _live_rows(self, key: CoordinateMapKey) -> mx.array:
        """int32 (1,): the set's live rows (a lazily counted set's count, not read)."""
        count = self.row_count(key)
        if count is None:
            return mx.array([self.capacity(key)], dtype=mx.int32)
        return count.array.reshape(1).astype(mx.int32)

    def _check_relation(self, kind, in_key, spec, target_key, op) -> None:
        """Argument rules shared by every builder."""
        if kind is RelationKind.SUBMANIFOLD:
            if target_key is not None:
                raise ValueError(f"[{op}] a submanifold relation has no explicit target")
            if not spec.is_odd:
                raise ValueError(
                    f"[{op}] submanifold kernels need an odd kernel_size on every axis, got {spec.size}"
                )
            if spec.stride != (1, 1, 1) or spec.padding != (0, 0, 0):
                raise ValueError(
                    f"[{op}] submanifold relations take stride 1 and padding 0, got stride "
                    f"{spec.stride} padding {spec.padding}"
                )
        elif kind in (RelationKind.FORWARD, RelationKind.TARGET):
            if kind is RelationKind.FORWARD and target_key is not None:
                raise ValueError(f"[{op}] a forward relation generates its output; use target")
            if kind is RelationKind.TARGET and target_key is None:
                raise ValueError(f"[{op}] a target relation needs a target coordinate set")
            if target_key is not None:
                level = tuple(a * b for a, b in zip(in_key.stride, spec.stride, strict=True))
                self._check_level(target_key, level, op)
        else:
            if kind is RelationKind.GENERATIVE and (spec.padding != (0, 0, 0) or spec.dilation != (1, 1, 1)):
                raise ValueError(
                    f"[{op}] generative relations take no padding or dilation, got padding "
                    f"{spec.padding} dilation {spec.dilation}"
                )
            level = transposed_level(in_key.stride, spec.stride, op)
            if target_key is not None:
                self._check_level(target_key, level, op)

    def exclusive(self, kind, in_key, spec, target_key) -> bool:
        """Non-overlapping windows between a set and its downsample (even kernel == stride,
        no padding or dilation): the downsample's point->row map is the relation."""
        if not spec.cell_windows:
            return False
        if kind is RelationKind.FORWARD:
            return target_key is None
        if kind in (RelationKind.TRANSPOSED, RelationKind.GENERATIVE) and target_key is not None:
            hit = self.cached_downsample(target_key, spec.stride)
            return hit is not None and hit.out_key == in_key
        return False

    def _check_level(self, key: CoordinateMapKey, level: Triple, op: str) -> None:
        if key.stride != tuple(level):
            raise ValueError(
                f"[{op}] target stride must be {tuple(level)} for this relation, got {key.stride}"
            )


def transposed_level(in_stride: Triple, stride: Triple, op: str) -> Triple:
    """The level a transposed relation lands on: ``in_stride / stride`` (which must divide)."""
    if any(a % b for a, b in zip(in_stride, stride, strict=True)):
        raise ValueError(f"[{op}] the transposed stride {stride} must divide the tensor stride {in_stride}")
    return tuple(a // b for a, b in zip(in_stride, stride, strict=True))
