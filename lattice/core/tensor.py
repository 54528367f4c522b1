"""SparseTensor: unique (batch, x, y, z) lattice coordinates with row-aligned features."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np

from lattice.core._checks import DTypeError, Triple, coords_array, host_array, int_triple, validate_coords
from lattice.core.buffers import checked_count
from lattice.core.coordinates import CoordinateManager, CoordinateMapKey


def _as_features(feats, op: str) -> mx.array:
    if not isinstance(feats, mx.array):
        feats = host_array(feats)
    if feats.ndim != 2:
        raise ValueError(f"[{op}] feats must have shape (N, C), got {tuple(feats.shape)}")
    if feats.dtype == mx.bool_ or mx.issubdtype(feats.dtype, mx.complexfloating):
        raise DTypeError(f"[{op}] feats must be a real numeric dtype, got {feats.dtype}")
    return feats


def _count_array(active_rows, capacity: int, op: str) -> mx.array:
    """``active_rows`` (None: every row, an int, or an int32 array of shape (1,) or ()) as the
    int32 ``(1,)`` array of the documented API. A given array is kept, not read."""
    if active_rows is None:
        return mx.array([capacity], dtype=mx.int32)
    if isinstance(active_rows, mx.array):
        if active_rows.size != 1 or active_rows.ndim > 1 or not mx.issubdtype(active_rows.dtype, mx.integer):
            raise ValueError(
                f"[{op}] active_rows must be an int32 array of shape (1,), got "
                f"{active_rows.dtype} {tuple(active_rows.shape)}"
            )
        return active_rows.reshape(1).astype(mx.int32)
    if isinstance(active_rows, bool) or not isinstance(active_rows, (int, np.integer)):
        raise TypeError(f"[{op}] active_rows must be an int or an int32 array, got {active_rows!r}")
    if not 0 <= active_rows <= capacity:
        raise ValueError(f"[{op}] active_rows must be in [0, {capacity}], got {active_rows}")
    return mx.array([int(active_rows)], dtype=mx.int32)


@dataclass(frozen=True)
class SparseTensorComponents:
    """The portable parts of a SparseTensor: what ``export_components`` returns and
    ``SparseTensor.from_components`` rebuilds a tensor from (in a new or given manager).

    ``coords`` ``(N, 4)`` int32 / int64 and ``feats`` ``(N, C)`` are whole buffers;
    ``active_rows`` is the int32 ``(1,)`` count of the rows in use (the first ones;
    None or an int is normalised to it); ``stride`` a triple; ``batch_counts`` the
    rows per batch member (a tuple of ints) or None. The coordinate manager and key are
    not part of it: they are caches that the consumer rebuilds.
    """

    coords: mx.array
    feats: mx.array
    active_rows: mx.array
    stride: Triple = (1, 1, 1)
    batch_counts: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        op = "SparseTensorComponents"
        validate_coords(self.coords)
        if not isinstance(self.feats, mx.array) or self.feats.ndim != 2:
            raise ValueError(f"[{op}] feats must be an mx.array of shape (N, C), got {self.feats!r:.60}")
        n = self.coords.shape[0]
        if self.feats.shape[0] != n:
            raise ValueError(
                f"[{op}] feats rows must match coords rows, got {self.feats.shape[0]} and {n} "
                "(coords and feats need the same row count)"
            )
        object.__setattr__(self, "active_rows", _count_array(self.active_rows, n, op))
        object.__setattr__(self, "stride", int_triple(self.stride, "stride", op, minimum=1))
        if self.batch_counts is not None:
            counts = tuple(int(c) for c in np.asarray(self.batch_counts).reshape(-1))
            if any(c < 0 for c in counts):
                raise ValueError(f"[{op}] batch_counts must be non-negative, got {counts}")
            object.__setattr__(self, "batch_counts", counts)


class SparseTensor:
    """Sparse voxel features on an integer lattice.

    ``coords`` is int32 ``(N, 4)`` in ``(batch, x, y, z)`` order, lattice indices at
    this tensor's level (``stride``); ``feats`` is ``(N, C)`` row-aligned. Active
    coordinates are unique. Every tensor carries a ``coord_key`` into a
    ``coord_manager``; tensors derived from it share the manager and its relation
    cache. ``active_rows`` (optional: an int or an integer array of one element) marks the
    first rows in use when a builder returned an upper-bound buffer; later rows are ignored
    by every op. Read back, ``active_rows`` is always the int32 ``(1,)`` array of the live
    count and ``active_count`` the int.
    """

    def __init__(
        self,
        coords,
        feats,
        stride: int | Sequence[int] = 1,
        *,
        coord_key: CoordinateMapKey | None = None,
        coord_manager: CoordinateManager | None = None,
        batch_counts=None,
        active_rows=None,
    ) -> None:
        op = "SparseTensor"
        self.stride: Triple = int_triple(stride, "stride", op, minimum=1)
        self.coords = coords_array(coords, op)
        self.feats = _as_features(feats, op)
        n = self.coords.shape[0]
        if self.feats.shape[0] != n:
            raise ValueError(
                f"[{op}] feats rows must match coords rows, got {self.feats.shape[0]} and {n} "
                "(coords and feats need the same row count)"
            )
        self._active_array = None  # active_rows, made on first use
        self._count = None  # the set's RowCount where a builder returned an upper-bound buffer
        if coord_key is not None:
            if coord_manager is None:
                raise ValueError(f"[{op}] coord_manager is required when coord_key is set")
            if isinstance(coord_key, CoordinateMapKey) and not coord_manager.owns(coord_key):
                raise ValueError(
                    f"[{op}] coord_key {coord_key.id} (manager {coord_key.manager_id}) does not "
                    f"belong to coord_manager {coord_manager.id}"
                )
            coord_manager.check_key(coord_key, op)
            if coord_key.stride != self.stride:
                raise ValueError(
                    f"[{op}] coord_key stride {coord_key.stride} differs from stride {self.stride}"
                )
            self._check_owned(coords, coord_manager, coord_key, op)
            self._count = coord_manager.row_count(coord_key)
        if self._count is not None:
            # A set built under lazy_rows(): its whole buffer, its count not read here.
            if active_rows is not None and active_rows is not self._count.array:
                raise ValueError(f"[{op}] a lazily counted set takes its own active_rows")
            if coord_manager.capacity(coord_key) != n:
                raise ValueError(
                    f"[{op}] coord_key holds a buffer of {coord_manager.capacity(coord_key)} rows, "
                    f"tensor has {n}"
                )
            self._active, self._live = self._count.array, None
        else:
            self._active = active_rows  # as given (None: every row), for replace()
            self._live = n if active_rows is None else self._check_active(active_rows, n, op)
            if coord_key is None:
                # the key this array object already has in the manager (same rows, stride), else new
                coord_manager = coord_manager or CoordinateManager()
                coord_key = coord_manager._insert_array(self.coords, self.stride, self._live, op)
            elif coord_manager.size(coord_key) != self._live:
                raise ValueError(
                    f"[{op}] coord_key holds {coord_manager.size(coord_key)} rows, tensor has {self._live}"
                )
        self.coord_key = coord_key
        self.coord_manager = coord_manager
        self._batch_counts = None if batch_counts is None else self._check_counts(batch_counts, op)

    # ---- validation helpers ------------------------------------------------------

    def _check_owned(self, given, manager: CoordinateManager, key: CoordinateMapKey, op: str) -> None:
        """With a key, the coordinates are the key's own: for a set made by ``insert``, the
        array ``manager.coords(key)`` itself where ``coords`` is an mx.array of its row count
        (another object raises, equal values or not); NumPy / list coordinates are converted
        and must hold its rows."""
        own = manager._arrays.get(key.id)
        if own is None or own is self.coords or own.shape[0] != self.coords.shape[0]:
            return
        if isinstance(given, mx.array) or not bool(mx.array_equal(own, self.coords).item()):
            raise ValueError(
                f"[{op}] coords must be the manager-owned array for coord_key "
                "(coord_manager.coords(coord_key)), got another array"
            )

    @staticmethod
    def _check_active(active_rows, n: int, op: str) -> int:
        """The value of a caller's ``active_rows`` (read once, here), checked against ``n``."""
        return checked_count(active_rows, n, op)

    def _check_counts(self, batch_counts, op: str) -> tuple[int, ...]:
        counts = np.asarray(batch_counts, dtype=np.int64).reshape(-1)
        if counts.size and counts.min() < 0:
            raise ValueError(f"[{op}] batch_counts must be non-negative, got {counts.tolist()}")
        actual = np.bincount(np.asarray(self.batch_indices), minlength=counts.size)
        if actual.size != counts.size or not np.array_equal(actual, counts):
            raise ValueError(
                f"[{op}] batch_counts {counts.tolist()} do not match the rows per batch {actual.tolist()}"
            )
        return tuple(int(c) for c in counts)

    # ---- sizes ---------------------------------------------------------------------

    @property
    def capacity(self) -> int:
        """Rows allocated (including rows past ``active_rows``)."""
        return int(self.coords.shape[0])

    @property
    def active_rows(self) -> mx.array:
        """The live-row count as the documented int32 ``(1,)`` array, also when every row is
        live: a lazily counted set's own lazy count (never read here), else made once from
        the known count. ``active_count`` is the Python int."""
        if self._count is not None:
            return self._count.array
        if self._active_array is None:
            self._active_array = mx.array([self._live], dtype=mx.int32)
        return self._active_array

    @property
    def active_count(self) -> int:
        """Rows in use (on a set built under ``lazy_rows``, reads its count once)."""
        return self._live if self._count is None else self._count.value()

    @property
    def lazy(self) -> bool:
        """True on a set a GPU builder made under ``lazy_rows``: capacity rows, the live
        count a lazy ``active_rows`` array (rows past it hold batch index -1)."""
        return self._count is not None

    @property
    def run_rows(self) -> int:
        """The rows an op runs over: every buffer row of a lazily counted set (rows past the
        count are computed and ignored, so no count is read), else the active rows."""
        return self.capacity if self._count is not None else self.active_count

    @property
    def run_coords(self) -> mx.array:
        """The coordinates of ``run_rows`` (a lazily counted set's whole buffer: its spare rows
        hold batch index -1, so a lookup never finds them and a join gives them the fill)."""
        n = self.run_rows
        return self.coords if n == self.capacity else self.coords[:n]

    @property
    def run_feats(self) -> mx.array:
        """The features of ``run_rows`` (no copy when that is every row)."""
        n = self.run_rows
        return self.feats if n == self.capacity else self.feats[:n]

    @property
    def channels(self) -> int:
        return int(self.feats.shape[1])

    @property
    def shape(self) -> tuple[int, int]:
        """``(active rows, channels)``."""
        return (self.active_count, self.channels)

    @property
    def dtype(self) -> mx.Dtype:
        return self.feats.dtype

    # ---- batches -------------------------------------------------------------------

    @property
    def batch_indices(self) -> mx.array:
        """Batch index of each active row (int32)."""
        return self.coords[: self.active_count, 0]

    @property
    def batch_counts(self) -> tuple[int, ...]:
        """Active rows per batch member, a tuple of ints; empty members count 0."""
        if self._batch_counts is None:
            b = np.asarray(self.batch_indices)
            self._batch_counts = tuple(int(c) for c in np.bincount(b, minlength=0))
        return self._batch_counts

    @property
    def batch_size(self) -> int:
        return len(self.batch_counts)

    @property
    def batch_rows(self) -> list[mx.array]:
        """Row indices of each batch member (int32, ascending)."""
        b = np.asarray(self.batch_indices)
        order = np.argsort(b, kind="stable").astype(np.int32)
        bounds = np.concatenate([[0], np.cumsum(np.asarray(self.batch_counts))])
        return [mx.array(order[bounds[i] : bounds[i + 1]]) for i in range(self.batch_size)]

    @property
    def decomposed_coordinates(self) -> list[mx.array]:
        """``(n_b, 3)`` xyz coordinates of each batch member."""
        return [self.coords[rows, 1:] for rows in self.batch_rows]

    @property
    def decomposed_features(self) -> list[mx.array]:
        """``(n_b, C)`` features of each batch member."""
        return [self.feats[rows] for rows in self.batch_rows]

    @property
    def decomposed_coordinates_and_features(self) -> tuple[list[mx.array], list[mx.array]]:
        """``(decomposed_coordinates, decomposed_features)``, the batch rows found once."""
        rows = self.batch_rows
        return [self.coords[r, 1:] for r in rows], [self.feats[r] for r in rows]

    # ---- derived tensors -----------------------------------------------------------

    def replace(self, *, coords=None, feats=None, stride=None) -> SparseTensor:
        """A tensor with some parts replaced; unchanged coordinates keep their key."""
        feats = self.feats if feats is None else feats
        if coords is None:
            if stride is not None and int_triple(stride, "stride", "replace") != self.stride:
                raise ValueError("[replace] changing the stride needs new coords")
            out = SparseTensor(
                self.coords,
                feats,
                self.stride,
                coord_key=self.coord_key,
                coord_manager=self.coord_manager,
                active_rows=self._active,
            )
            out._batch_counts = self._batch_counts  # same rows: already checked, not read again
            return out
        return SparseTensor(
            coords,
            feats,
            self.stride if stride is None else stride,
            coord_manager=self.coord_manager,
        )

    def reuse_coords_from(self, other: SparseTensor) -> SparseTensor:
        """This tensor's features on ``other``'s coordinate identity (its array, key, manager,
        count and batch counts); both must already share it (``same_coords``)."""
        if not self.same_coords(other):
            raise ValueError(
                "[reuse_coords_from] sparse tensor coordinates must match: the tensors hold "
                "different coordinate keys (align them with sparse_alignment / reindex_sparse)"
            )
        return other.replace(feats=self.feats)

    def same_coords(self, other: SparseTensor) -> bool:
        """Whether both tensors share coordinate identity: one manager and one key (so one
        set of rows, in one order). Equal rows held under another key or manager are not the
        same identity; ``same_rows`` compares the rows themselves."""
        return self.coord_manager is other.coord_manager and self.coord_key == other.coord_key

    def same_rows(self, other: SparseTensor) -> bool:
        """Whether both tensors hold the same live coordinate rows in the same order at the
        same stride (true under ``same_coords``; else compares the rows: one host read)."""
        if self.same_coords(other):
            return True
        if self.stride != other.stride or self.active_count != other.active_count:
            return False
        n = self.active_count
        return bool(mx.array_equal(self.coords[:n], other.coords[:n]).item())

    def astype(self, dtype: mx.Dtype) -> SparseTensor:
        return self.replace(feats=self.feats.astype(dtype))

    def export_components(self) -> SparseTensorComponents:
        """The portable parts of this tensor: its whole buffers, the live-row count, the
        stride and the rows per batch member (no manager, no key)."""
        count = self.active_rows if self.lazy else self.active_count
        return SparseTensorComponents(
            coords=self.coords,
            feats=self.feats,
            active_rows=_count_array(count, self.capacity, "export_components"),
            stride=self.stride,
            batch_counts=self.batch_counts,
        )

    @classmethod
    def from_components(
        cls,
        components: SparseTensorComponents | dict[str, Any],
        *,
        coord_manager: CoordinateManager | None = None,
    ) -> SparseTensor:
        """A tensor (in ``coord_manager``, else a new one) from ``SparseTensorComponents`` or a
        dict of the same names (``coords`` and ``feats`` required)."""
        if isinstance(components, SparseTensorComponents):
            components = {
                f: getattr(components, f)
                for f in ("coords", "feats", "active_rows", "stride", "batch_counts")
            }
        missing = {"coords", "feats"} - set(components)
        if missing:
            raise ValueError(f"[from_components] missing components: {sorted(missing)}")
        stride = components.get("stride", 1)
        if isinstance(stride, mx.array):
            stride = stride.tolist()
        elif isinstance(stride, np.ndarray):
            stride = [int(v) for v in stride.reshape(-1)]
        return cls(
            components["coords"],
            components["feats"],
            stride,
            coord_manager=coord_manager,
            batch_counts=components.get("batch_counts"),
            active_rows=components.get("active_rows"),
        )

    def __len__(self) -> int:
        return self.active_count

    def __repr__(self) -> str:
        return (
            f"SparseTensor(rows={self.active_count}, channels={self.channels}, "
            f"stride={self.stride}, dtype={self.dtype}, batch_size={self.batch_size})"
        )
