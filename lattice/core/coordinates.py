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
from lattice.core.rows import RowCount, lazy_rows_enabled

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
    ``count`` is set where the builder returned an upper-bound buffer (``lazy_rows``): the
    first ``count`` rows are the set, the rest hold batch index -1."""

    coords: mx.array
    count: RowCount | None = None


class CoordinateManager:
    """Coordinate sets and the relation cache of a family of tensors."""

    def __init__(self) -> None:
        self.id = next(_manager_ids)
        self._next_id = itertools.count()
        self._tables: dict[int, _ext.CoordTable | _Pending] = {}
        self._cpu_tables: dict[int, _ext.CoordTable] = {}  # of GPU-made sets, built on first CPU use
        self._gpu_tables: dict[int, object] = {}  # lattice.backends.cuda.GpuTable, built on first GPU use
        self._keys: dict[int, CoordinateMapKey] = {}
        self._relations: dict[RelationCacheKey, KernelRelation] = {}
        self._downsampled: dict[tuple[int, Triple], Downsample] = {}
        self._interned: dict[tuple[str, int, Triple], CoordinateMapKey] = {}

    def __repr__(self) -> str:
        return f"CoordinateManager(id={self.id}, sets={len(self._tables)}, relations={len(self._relations)})"

    # ---- coordinate sets ---------------------------------------------------------

    def insert(self, coords, stride=1, *, op: str = "CoordinateManager.insert") -> CoordinateMapKey:
        """Registers a set of unique (batch, x, y, z) rows; returns its key.

        Raises ValueError on duplicate rows or negative batch indices. Where MLX's default
        device is a CUDA GPU the set is hashed and checked there (one host read: valid or
        not) and its CPU table is built only if a CPU route asks; an invalid set is
        re-checked by the CPU builder, whose error names the offending rows.
        """
        from lattice.routing import requested_device
        from lattice.routing.relations import CoordinateRequest, route_coordinates

        coords = coords_array(coords, op)
        stride = int_triple(stride, "stride", op, minimum=1)
        route = route_coordinates(CoordinateRequest("insert", int(coords.shape[0]), requested_device(None)))
        if route.require("cpu.hash_set", "cuda.hash_set_checked", "metal.hash_set_checked").backend != "cpu":
            from lattice.backends import cuda

            gpu_table, valid = cuda.build_checked_table(coords)
            if valid:
                return self.adopt(gpu_table, stride)
        return self._register(_ext.build_table(coords, op), stride)

    def adopt(self, table, stride=1) -> CoordinateMapKey:
        """Registers a table made by lattice's own coordinate functions (quantize, union,
        dedup: unique rows by construction) without hashing its rows again: a native table,
        or a GPU table (``lattice.backends.cuda.GpuTable``) of a set known to be valid, whose
        CPU table is built only if a CPU route asks."""
        stride = int_triple(stride, "stride", "CoordinateManager.adopt", minimum=1)
        if isinstance(table, _ext.CoordTable):
            return self._register(table, stride)
        key = self._register(_Pending(table.coords), stride)
        self._gpu_tables[key.id] = table
        return key

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

    def gpu_table(self, key: CoordinateMapKey):
        """The GPU hash table of a set (lattice.backends.cuda), built on first use and kept."""
        self.check_key(key)
        hit = self._gpu_tables.get(key.id)
        if hit is None:
            from lattice.backends import cuda

            count = self.row_count(key)
            hit = self._gpu_tables[key.id] = cuda.build_table(
                self.coords(key), None if count is None else count.array
            )
        return hit

    def coords(self, key: CoordinateMapKey) -> mx.array:
        """The (N, 4) int32 coordinates of a set (a lazily counted set's whole buffer)."""
        self.check_key(key)
        return self._tables[key.id].coords

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
        """The lazy count of a set a GPU builder made under ``lazy_rows``, else None."""
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

    def downsample(self, key: CoordinateMapKey, stride, *, gpu: bool = False) -> CoordinateMapKey:
        """Key of ``unique(floor(coords / stride))`` at level ``key.stride * stride`` (cached).

        Rows keep first-occurrence order on either device; ``gpu`` deduplicates with the
        GPU hash table (the new set's CPU table is built only if a CPU route asks).
        """
        stride = int_triple(stride, "stride", "downsample", minimum=1)
        self.check_key(key, "downsample")
        if stride == (1, 1, 1):
            return key
        return self._downsample(key, stride, gpu).out_key

    def _downsample(self, key: CoordinateMapKey, stride: Triple, gpu: bool = False) -> Downsample:
        cache = (key.id, stride)
        hit = self._downsampled.get(cache)
        if hit is None:
            level = tuple(a * b for a, b in zip(key.stride, stride, strict=True))
            if gpu:
                from lattice.backends import cuda

                count = self.row_count(key)
                coords, inverse, out_count = cuda.downsample(
                    self.coords(key), stride, None if count is None else count.array, lazy=lazy_rows_enabled()
                )
                pending = _Pending(coords, None if out_count is None else RowCount(out_count))
                hit = self._downsampled[cache] = Downsample(self._register(pending, level), inverse, None)
            else:
                table, inverse, rows, out = _ext.downsample(self._cpu_table(key.id), stride)
                out_key = self._register(table, level)
                windows = None if rows is None else WindowMap(key, out_key, rows, out, table.size)
                hit = self._downsampled[cache] = Downsample(out_key, inverse, windows)
        return hit

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
            rows = mx.arange(n, dtype=mx.int32)
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

    def _build(self, kind, in_key, spec, target_key, op, device=None) -> KernelRelation:
        from lattice.routing import requested_device
        from lattice.routing.relations import RelationRequest, route_relation

        exclusive = self._exclusive(kind, in_key, spec, target_key)
        route = route_relation(
            RelationRequest(
                op, kind.value, self.capacity(in_key), spec.volume, device=requested_device(device),
                exclusive=exclusive,
            )
        )
        route.require(  # the relation builders of this build
            "cpu.hash_relation_symmetric",
            "cpu.hash_relation_input_driven",
            "cpu.hash_relation_scatter",
            "cpu.hash_relation_exclusive",
            "cuda.hash_map_submanifold",
            "cuda.hash_map_probe",
            "metal.hash_map_submanifold",
            "metal.hash_map_probe",
        )
        self._check_relation(kind, in_key, spec, target_key, op)
        if route.backend != "cpu":
            from lattice.backends.cuda import NotRepresentable

            try:
                return self._build_gpu(kind, in_key, spec, target_key, route)
            except NotRepresentable:
                pass  # the CPU builder raises the precise error
        table = self._cpu_table(in_key.id)
        if kind is RelationKind.SUBMANIFOLD:
            arrays, out_key = self._build_submanifold(table, in_key, spec, target_key, op)
        elif kind in (RelationKind.FORWARD, RelationKind.TARGET):
            arrays, out_key = self._build_forward(table, kind, in_key, spec, target_key, op, exclusive)
        else:
            arrays, out_key = self._build_transposed(table, kind, in_key, spec, target_key, op, exclusive)
        in_rows, out_rows, counts = arrays[:3]
        return self._relation_value(
            kind, spec, in_key, out_key, route, spec.offsets(), edges=RelationEdges(in_rows, out_rows, counts)
        )

    def _relation_value(self, kind, spec, in_key, out_key, route, offsets, *, edges=None, nmap=None):
        return KernelRelation(
            kind=kind,
            spec=spec,
            in_key=in_key,
            out_key=out_key,
            out_coords=self.coords(out_key),
            kernel_offsets=offsets,
            in_count=self.capacity(in_key),
            built_edges=edges,
            built_map=nmap,
            route=route,
        )

    def _build_gpu(self, kind, in_key, spec, target_key, route) -> KernelRelation:
        """Dense neighbour map built by the CUDA kernels: the input's GPU hash table, the
        output set deduplicated on the GPU where the relation generates it, one probe per
        (output row, offset). No coordinates leave the GPU (two scalar reads: set sizes)."""
        from lattice.backends import cuda

        offsets = spec.offsets()
        table = self.gpu_table(in_key)
        if kind is RelationKind.SUBMANIFOLD:
            out_key = in_key
            nmap = cuda.submanifold_map(table, offsets)
        else:
            transposed = kind in (RelationKind.TRANSPOSED, RelationKind.GENERATIVE)
            if target_key is not None:
                out_key = target_key
            elif transposed:
                level = self._transposed_level(in_key.stride, spec.stride, "relation")
                coords = cuda.generated_support(self.live_coords(in_key), offsets, spec.stride, spec.padding)
                out_key = self._register(_Pending(coords), level)
            else:
                out_key = self.downsample(in_key, spec.stride, gpu=True)
            nmap = cuda.probe_map(
                table, self.coords(out_key), offsets, spec.stride, spec.padding, transposed=transposed
            )
        return self._relation_value(kind, spec, in_key, out_key, route, offsets, nmap=nmap)

    def _check_relation(self, kind, in_key, spec, target_key, op) -> None:
        """Argument rules shared by every builder."""
        if kind is RelationKind.SUBMANIFOLD:
            if target_key is not None:
                raise ValueError(f"[{op}] a submanifold relation has no explicit target")
            if not spec.is_odd:
                raise ValueError(f"[{op}] submanifold kernels must have odd sizes, got {spec.size}")
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
            level = self._transposed_level(in_key.stride, spec.stride, op)
            if target_key is not None:
                self._check_level(target_key, level, op)

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
        return _ext.relation_submanifold(table, spec.size, spec.dilation), in_key

    def _build_forward(self, table, kind, in_key, spec, target_key, op, exclusive):
        out_key = self.downsample(in_key, spec.stride) if kind is RelationKind.FORWARD else target_key
        if exclusive:
            if spec.stride == (1, 1, 1):
                inverse = mx.arange(table.size, dtype=mx.int32)
            else:
                # (a downsample made on the GPU from a lazily counted set has -1 past its count)
                inverse = self._downsample(in_key, spec.stride).inverse[: table.size]
            return _ext.relation_exclusive(table, inverse, spec.stride), out_key
        arrays = _ext.relation_forward(
            table, self._cpu_table(out_key.id), spec.size, spec.stride, spec.padding, spec.dilation
        )
        return arrays, out_key

    def _build_transposed(self, table, kind, in_key, spec, target_key, op, exclusive):
        level = self._transposed_level(in_key.stride, spec.stride, op)
        if exclusive:
            # Back onto the set this one was downsampled from: the forward relation of
            # that set, edges reversed (same offsets).
            fwd = self.relation(RelationKind.FORWARD, target_key, spec, op=op, device="cpu")
            return (fwd.edges.out_rows, fwd.edges.in_rows, fwd.counts), target_key
        target_table = None if target_key is None else self._cpu_table(target_key.id)
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
