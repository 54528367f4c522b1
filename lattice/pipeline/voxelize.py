"""Points -> sparse voxel tensor, chunk by chunk, in memory bounded by one chunk plus the voxels.

The chunks go into one native ``_ext.VoxelAccumulator``: each chunk is quantised and its
voxels found or inserted in a hash table that persists across chunks (new voxels numbered
by first occurrence in file order; the table grows by rehashing only when it fills), and
every point is reduced in place onto its voxel: counts add, sums add in float64 in file
order (``mean = sum / count`` at the end, in float64), ``max`` keeps a running maximum,
``first`` keeps the value of the voxel's first point in file order. The result equals
``lattice.ops.voxelize`` on the whole cloud: same coordinates in the same order, features
equal up to float rounding of the sums (float64 here, float32 there), whatever the chunk size.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from lattice import _ext
from lattice.io import PointCloud, PointCloudError, SparseFile, write_sparse
from lattice.io.sparse import _write_table_rows
from lattice.pipeline.sources import DEFAULT_CHUNK_POINTS, PointSource, memory_source, open_source
from lattice.routing.points import PointsRequest, route_points

REDUCTIONS = ("mean", "sum", "max", "first", "count")
_INT32 = (-(2**31), 2**31 - 1)
Column = tuple[str, int | None, str]  # (attribute, column of a 2-D attribute or None, feature name)


def _triple(value, name: str, *, positive: bool = False) -> tuple[float, float, float]:
    a = np.asarray(value, dtype=np.float64).reshape(-1)
    if a.size == 1:
        a = np.repeat(a, 3)
    if a.size != 3 or not np.all(np.isfinite(a)) or (positive and np.any(a <= 0)):
        rule = "positive finite" if positive else "finite"
        raise ValueError(f"{name} must be one or three {rule} numbers, got {np.asarray(value).tolist()}")
    return tuple(float(v) for v in a)


@dataclass(frozen=True)
class VoxelizeOptions:
    """What ``voxelize_source`` does.

    ``voxel_size``: one or three positive numbers. ``origin``: one or three numbers, or
    ``"min"`` for the minimum of the finite points (so every index is >= 0).
    ``reduction``: mean | sum | max | first | count. ``features``: attribute names (an
    ``(N, K)`` attribute ``a`` gives columns ``a_0 … a_{K-1}``, each also selectable);
    None takes every numeric attribute; an empty tuple (or a cloud without attributes)
    gives the single channel ``count``. ``strict``: non-finite coordinates are an error
    instead of being dropped.
    """

    voxel_size: float | tuple[float, float, float] = 1.0
    origin: float | tuple[float, float, float] | str = 0.0
    reduction: str = "mean"
    features: tuple[str, ...] | None = None
    strict: bool = False
    chunk_points: int = DEFAULT_CHUNK_POINTS

    def __post_init__(self) -> None:
        object.__setattr__(self, "voxel_size", _triple(self.voxel_size, "voxel size", positive=True))
        if not (isinstance(self.origin, str) and self.origin == "min"):
            object.__setattr__(self, "origin", _triple(self.origin, "origin"))
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {self.reduction!r}")
        if self.features is not None:
            object.__setattr__(self, "features", tuple(self.features))
        if self.chunk_points < 1:
            raise ValueError(f"chunk_points must be positive, got {self.chunk_points}")


def feature_columns(schema: dict[str, tuple[np.dtype, tuple[int, ...]]], features) -> list[Column]:
    """The feature columns for ``features`` (None: every numeric attribute) from an attribute schema."""
    by_attr: dict[str, list[Column]] = {}
    for name, (dtype, tail) in schema.items():
        if np.dtype(dtype).kind not in "biuf":
            continue
        width = int(np.prod(tail)) if tail else 0
        by_attr[name] = [(name, None, name)] if not tail else [(name, k, f"{name}_{k}") for k in range(width)]
    if features is None:
        return [c for cols in by_attr.values() for c in cols]
    by_name = {c[2]: c for cols in by_attr.values() for c in cols}
    out: list[Column] = []
    for f in features:
        if f in by_attr:
            out += by_attr[f]
        elif f in by_name:
            out.append(by_name[f])
        else:
            have = ", ".join(by_name) or "none"
            raise ValueError(f"unknown feature {f!r}; the input has: {have}")
    return out


def _columns(attrs: dict[str, np.ndarray], cols: list[Column], dtype, rows=None) -> np.ndarray:
    """The ``(n, C)`` feature matrix of a chunk (optionally only ``rows``)."""
    parts = []
    for attr, k, _ in cols:
        a = attrs[attr] if k is None else attrs[attr].reshape(len(attrs[attr]), -1)[:, k]
        parts.append(a if rows is None else a[rows])
    n = len(rows) if rows is not None else (len(next(iter(attrs.values()))) if attrs else 0)
    return np.stack(parts, axis=1).astype(dtype) if parts else np.zeros((n, 0), dtype)


class VoxelRangeError(ValueError):
    """The voxel coordinates of the points do not fit the native table (int32 / 64-bit packed key)."""


class StreamingVoxelizer:
    """Accumulates voxels over chunks of points; ``result()`` gives coords and features.

    The state is one native ``_ext.VoxelAccumulator``: a hash table of the voxels that
    persists across chunks (grown by rehashing only when it fills up) and per-voxel
    counts, float64 sums, maxima or first values updated in place, in buffers that grow
    without copying. Memory is the voxels plus one chunk.
    """

    def __init__(self, voxel_size, origin, reduction: str, columns: list[Column]):
        self.voxel_size, self.origin = tuple(voxel_size), tuple(origin)
        self.reduction, self.columns = reduction, columns
        reduce = reduction if columns else "count"
        self._dtype = np.float64 if reduce in ("sum", "mean") else np.float32  # float64 sums stay exact
        self._acc = _ext.VoxelAccumulator(list(self.voxel_size), list(self.origin), reduce, len(columns))

    def add(self, points: np.ndarray, attrs: dict[str, np.ndarray]) -> None:
        """Quantise and reduce one chunk of finite points (with their attributes)."""
        if len(points) == 0:
            return
        if points.dtype != np.float64:
            points = points.astype(np.float32, copy=False)
        points = np.ascontiguousarray(points)  # read in place by the accumulator, not copied
        feats = None
        if self.columns and self.reduction != "count":
            feats = _columns(attrs, self.columns, self._dtype)
        try:  # the range is checked by the caller; what is left is a span too wide to pack
            self._acc.add(points, feats)
        except ValueError as e:
            raise VoxelRangeError(str(e)) from e

    @property
    def num_voxels(self) -> int:
        """Voxels seen so far."""
        return int(self._acc.size)

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(coords (M, 4) int32, feats (M, C) float32, counts (M,) int64)``; the voxelizer is then empty.

        The arrays own the native buffers (no copies). ``mean`` is ``sum / count`` in float64.
        """
        return self._acc.finish()


def _finite(points: np.ndarray, attrs: dict, start: int, strict: bool, label: str):
    """The chunk without non-finite points (or an error in strict mode), the count dropped, and the bounds."""
    lo, hi = points.min(axis=0), points.max(axis=0)  # NaN propagates: a cheap all-finite test
    if np.isfinite(lo).all() and np.isfinite(hi).all():
        return points, attrs, 0, lo, hi
    ok = np.isfinite(points).all(axis=1)
    if strict:
        i = int(np.flatnonzero(~ok)[0])
        raise PointCloudError(
            f"{label}: point {start + i} has a non-finite coordinate {points[i].tolist()} (strict mode)"
        )
    points, attrs = points[ok], {k: v[ok] for k, v in attrs.items()}
    if len(points):
        lo, hi = points.min(axis=0), points.max(axis=0)
    return points, attrs, int((~ok).sum()), lo, hi


def _index_range_check(lo: np.ndarray, hi: np.ndarray, vs, origin, label: str) -> None:
    lo, hi = lo.astype(np.float64), hi.astype(np.float64)
    idx = np.floor((np.stack([lo, hi]) - np.asarray(origin)) / np.asarray(vs))
    if idx.min() < _INT32[0] or idx.max() > _INT32[1]:
        raise PointCloudError(
            f"{label}: voxel indices overflow int32: coordinates {lo.tolist()} .. {hi.tolist()} at voxel size "
            f"{list(vs)} from origin {list(origin)} give indices up to {idx.max():.3g}; "
            "use a larger voxel size or the origin 'min'"
        )


def _min_origin(source: PointSource, chunk_points: int) -> tuple[float, float, float]:
    lo = np.full(3, np.inf)
    for pts, _ in source.chunks(chunk_points):
        ok = np.isfinite(pts).all(axis=1)
        if ok.any():
            lo = np.minimum(lo, pts[ok].min(axis=0))
    return tuple(float(v) for v in lo) if np.isfinite(lo).all() else (0.0, 0.0, 0.0)


def voxelize_source(source: PointSource, options: VoxelizeOptions) -> tuple[SparseFile, dict]:
    """Voxelize every chunk of ``source``; returns the sparse file contents and a summary dict."""
    t0 = time.perf_counter()
    cols = [] if options.reduction == "count" else feature_columns(source.attributes, options.features)
    reduction = options.reduction if cols else "count"
    origin = options.origin
    if origin == "min":
        origin = _min_origin(source, options.chunk_points)
    request = PointsRequest("voxelize", -1, max(len(cols), 1), reduction)
    route_points(request).require("cpu.hash_quantize_segment_reduce")  # streamed through the CPU core
    vox = StreamingVoxelizer(options.voxel_size, origin, reduction, cols)
    seen = dropped = 0
    for pts, attrs in source.chunks(options.chunk_points):
        n = len(pts)
        if n == 0:
            continue
        pts, attrs, bad, lo, hi = _finite(pts, attrs, seen, options.strict, source.label)
        dropped += bad
        if len(pts):
            _index_range_check(lo, hi, options.voxel_size, origin, source.label)
            try:
                vox.add(pts, attrs)
            except VoxelRangeError as e:
                raise PointCloudError(f"{source.label}: {e}") from e
        seen += n
        del pts, attrs  # not alive while the next chunk is read
    coords, feats, _ = vox.result()
    names = tuple(c[2] for c in cols) if reduction != "count" else ("count",)
    sf = SparseFile(
        coords,
        feats,
        np.ones(3, np.int32),
        np.asarray(options.voxel_size, np.float64),
        np.asarray(origin, np.float64),
        names,
    )
    summary = {
        "input": source.label,
        "format": source.format,
        "streamed": source.streamed,
        "points": seen,
        "nonfinite_dropped": dropped,
        "voxels": sf.num_rows,
        "channels": sf.num_channels,
        "feature_names": list(names),
        "reduction": reduction,
        "voxel_size": list(options.voxel_size),
        "origin": [float(v) for v in origin],
        "points_per_voxel": round(seen / max(sf.num_rows, 1), 3) if sf.num_rows else 0.0,
        "seconds": round(time.perf_counter() - t0, 4),
    }
    return sf, summary


def voxelize_cloud(cloud: PointCloud, voxel_size=1.0, **options) -> tuple[SparseFile, dict]:
    """Voxelize an in-memory cloud (``options`` as in ``VoxelizeOptions``)."""
    return voxelize_source(memory_source(cloud), VoxelizeOptions(voxel_size, **options))


def write_sparse_file(dst: str | os.PathLike | BinaryIO, sf: SparseFile) -> str:
    """Write ``sf`` as a ``lattice.sparse/1`` NPZ (atomically for a path); returns the path, or ``-``."""
    write_sparse(
        dst,
        sf.coords,
        sf.feats,
        stride=sf.stride,
        voxel_size=sf.voxel_size,
        origin=sf.origin,
        feature_names=sf.feature_names,
    )
    return _output_label(dst)


def _output_label(dst: str | os.PathLike | BinaryIO) -> str:
    return "-" if hasattr(dst, "write") else os.fspath(dst)


def voxelize_file(
    src: str | os.PathLike | BinaryIO,
    dst: str | os.PathLike | BinaryIO,
    options: VoxelizeOptions,
    *,
    format: str | None = None,
    columns: str | Sequence[str] | None = None,
) -> dict:
    """Read ``src`` (streamed where the format allows), voxelize, write the sparse NPZ to ``dst``.

    ``format`` and ``columns`` as for ``lattice.io.read_points``."""
    sf, summary = voxelize_source(open_source(src, format=format, columns=columns), options)
    _write_table_rows(dst, sf)  # the voxelizer's table rows: unique by construction, not re-checked
    summary["output"] = _output_label(dst)
    return summary


__all__ = [
    "REDUCTIONS",
    "StreamingVoxelizer",
    "VoxelRangeError",
    "VoxelizeOptions",
    "feature_columns",
    "voxelize_cloud",
    "voxelize_file",
    "voxelize_source",
    "write_sparse_file",
]
