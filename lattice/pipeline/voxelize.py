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

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import BinaryIO

import numpy as np

from lattice import _ext
from lattice.core.modes import ModeAccumulator
from lattice.io import PointCloud, PointCloudError, SparseFile
from lattice.io.kinds import DEFAULT_REDUCTION, NORMAL_GROUPS, AttributeInfo, attribute_kind
from lattice.io.kinds import REDUCTIONS as KIND_REDUCTIONS
from lattice.pipeline.provenance import make_record
from lattice.pipeline.sources import DEFAULT_CHUNK_POINTS, PointSource, memory_source, open_source
from lattice.routing.points import PointsRequest, route_points

REDUCTIONS = KIND_REDUCTIONS
_INT32 = (-(2**31), 2**31 - 1)
_EXACT_F32 = 2**24  # integers up to this magnitude are exact in float32
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
    ``reduction``: None (the default) reduces every attribute by its kind
    (``lattice.io.kinds``: mean for measurements and colours, the mode for class ids and
    other categorical attributes, the renormalised mean for normals); one of
    mean | sum | min | max | mode | first applies to every attribute; ``count`` gives the
    single channel ``count`` (points per voxel). ``reductions``: ``{attribute or feature
    name: reduction}`` overriding both (``count`` there counts the points whose value is
    not NaN). ``features``: attribute names (an ``(N, K)`` attribute ``a`` gives columns
    ``a_0 … a_{K-1}``, each also selectable); None takes every numeric attribute; an empty
    tuple (or a cloud without attributes) gives the single channel ``count``. ``strict``:
    non-finite coordinates are an error instead of being dropped. ``centroids``: also
    keep each voxel's mean point (float64), for exports at ``position="centroid"``.
    """

    voxel_size: float | tuple[float, float, float] = 1.0
    origin: float | tuple[float, float, float] | str = 0.0
    reduction: str | None = None
    features: tuple[str, ...] | None = None
    strict: bool = False
    chunk_points: int = DEFAULT_CHUNK_POINTS
    reductions: dict[str, str] = field(default_factory=dict)
    centroids: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "voxel_size", _triple(self.voxel_size, "voxel size", positive=True))
        if not (isinstance(self.origin, str) and self.origin == "min"):
            object.__setattr__(self, "origin", _triple(self.origin, "origin"))
        if self.reduction is not None and self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, got {self.reduction!r}")
        reductions = dict(self.reductions or {})
        for name, r in reductions.items():
            if r not in REDUCTIONS:
                raise ValueError(f"reduction for {name!r} must be one of {', '.join(REDUCTIONS)}, got {r!r}")
        object.__setattr__(self, "reductions", reductions)
        if self.features is not None:
            object.__setattr__(self, "features", tuple(self.features))
        if self.chunk_points < 1:
            raise ValueError(f"chunk_points must be positive, got {self.chunk_points}")

    def parameters(self) -> dict:
        """The options as a JSON object (what an output's provenance records)."""
        return {
            "voxel_size": list(self.voxel_size),
            "origin": self.origin if isinstance(self.origin, str) else list(self.origin),
            "reduction": self.reduction,
            "reductions": dict(sorted(self.reductions.items())),
            "features": None if self.features is None else list(self.features),
            "strict": self.strict,
            "centroids": self.centroids,
        }


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


def _column(attrs: dict[str, np.ndarray], col: Column) -> np.ndarray:
    attr, k, _ = col
    return attrs[attr] if k is None else attrs[attr].reshape(len(attrs[attr]), -1)[:, k]


def _columns(attrs: dict[str, np.ndarray], cols: list[Column], dtype, rows=None) -> np.ndarray:
    """The ``(n, C)`` feature matrix of a chunk (optionally only ``rows``)."""
    parts = [_column(attrs, c) if rows is None else _column(attrs, c)[rows] for c in cols]
    n = len(rows) if rows is not None else (len(next(iter(attrs.values()))) if attrs else 0)
    return np.stack(parts, axis=1).astype(dtype) if parts else np.zeros((n, 0), dtype)


def _column_infos(source: PointSource, cols: list[Column], options: VoxelizeOptions) -> list[AttributeInfo]:
    """One ``AttributeInfo`` per feature column: the attribute's kind, type and scale, and its reduction."""
    known = source.infos or {}
    infos = []
    for attr, _, name in cols:
        base = known.get(attr)
        if base is None:
            dtype = source.attributes[attr][0]
            kind = source.kinds.get(attr) or attribute_kind(attr, dtype, source.format)
            base = AttributeInfo(attr, kind, np.dtype(dtype).name, DEFAULT_REDUCTION[kind],
                                 255.0 if kind == "colour" and np.dtype(dtype) == np.uint8 else None)  # fmt: skip
        reduction = options.reductions.get(name, options.reductions.get(attr, options.reduction))
        infos.append(replace(base, name=name, reduction=reduction or base.reduction))
    return infos


class VoxelRangeError(ValueError):
    """The voxel coordinates of the points do not fit the native table (int32 / 64-bit packed key)."""


class StreamingVoxelizer:
    """Accumulates voxels over chunks of points; ``result()`` gives coords, features and counts.

    The state is one native ``_ext.VoxelAccumulator``: a hash table of the voxels that
    persists across chunks (grown by rehashing only when it fills up) and per-voxel
    float64 state for every column reduced by mean, sum, min, max, first or count, updated
    in place in buffers that grow without copying; columns reduced by ``mode`` are counted
    per (voxel, value) pair beside it (``lattice.core.modes``). Memory is the voxels
    plus one chunk. ``centroids``: also the mean point of every voxel.
    """

    def __init__(self, voxel_size, origin, reductions: list[str], columns: list[Column], *, centroids=False):
        if len(reductions) != len(columns):
            raise ValueError(f"{len(reductions)} reductions for {len(columns)} columns")
        self.voxel_size, self.origin = tuple(voxel_size), tuple(origin)
        self.reductions, self.columns, self.centroids = list(reductions), list(columns), centroids
        self._native = [i for i, r in enumerate(reductions) if r != "mode"]
        self._modes = {i: None for i, r in enumerate(reductions) if r == "mode"}
        native = [reductions[i] for i in self._native] + (["mean"] * 3 if centroids else [])
        self._acc = _ext.VoxelAccumulator(list(self.voxel_size), list(self.origin), native)

    def add(self, points: np.ndarray, attrs: dict[str, np.ndarray]) -> None:
        """Quantise and reduce one chunk of finite points (with their attributes)."""
        if len(points) == 0:
            return
        if points.dtype != np.float64:
            points = points.astype(np.float32, copy=False)
        points = np.ascontiguousarray(points)  # read in place by the accumulator, not copied
        feats = None
        if self._acc.channels:
            parts = [_column(attrs, self.columns[i]).astype(np.float64) for i in self._native]
            if self.centroids:
                parts += [points[:, a].astype(np.float64) for a in range(3)]
            feats = np.ascontiguousarray(np.stack(parts, axis=1))
        try:  # the range is checked by the caller; what is left is a span too wide to pack
            self._acc.add(points, feats)
        except ValueError as e:
            raise VoxelRangeError(str(e)) from e
        if self._modes:
            rows = self._acc.last_rows()
            for i in self._modes:
                values = _column(attrs, self.columns[i])
                if self._modes[i] is None:
                    self._modes[i] = ModeAccumulator(values.dtype)
                self._modes[i].add(rows, values, self.num_voxels)

    @property
    def num_voxels(self) -> int:
        """Voxels seen so far."""
        return int(self._acc.size)

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """``(coords (M, 4) int32, feats (M, C) float64, counts (M,) int64, centroids (M, 3) or None)``.

        The voxelizer is then empty. ``mean`` is ``sum / count`` in float64.
        """
        m = self.num_voxels
        coords, native, counts = self._acc.finish()
        feats = np.empty((m, len(self.columns)), np.float64)
        for j, i in enumerate(self._native):
            feats[:, i] = native[:, j]
        for i, acc in self._modes.items():
            feats[:, i] = acc.result(m) if acc is not None else np.nan
        centroids = np.ascontiguousarray(native[:, -3:]) if self.centroids else None
        return coords, feats, counts, centroids


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


def _renormalise(feats: np.ndarray, infos: list[AttributeInfo]) -> None:
    """Normals averaged into a voxel become unit vectors again (in place; zero stays zero)."""
    names = [i.name for i in infos]
    for group in NORMAL_GROUPS:
        if not all(n in names for n in group):
            continue
        idx = [names.index(n) for n in group]
        if any(infos[i].reduction != "mean" for i in idx):
            continue
        v = feats[:, idx]
        norm = np.linalg.norm(v, axis=1, keepdims=True)
        feats[:, idx] = np.divide(v, norm, out=np.zeros_like(v), where=norm > 0)


def _feature_dtype(feats: np.ndarray, infos: list[AttributeInfo]) -> np.dtype:
    """float32, unless a channel would lose values in it: time, float64 sources, integers above 2^24."""
    for j, info in enumerate(infos):
        if info.kind == "time" or info.dtype == "float64":
            return np.dtype(np.float64)
        if np.dtype(info.dtype).kind in "iu" and feats.size:
            col = feats[:, j]
            top = np.nanmax(np.abs(col)) if np.isfinite(col).any() else 0.0
            if top > _EXACT_F32:
                return np.dtype(np.float64)
    return np.dtype(np.float32)


def voxelize_source(source: PointSource, options: VoxelizeOptions) -> tuple[SparseFile, dict]:
    """Voxelize every chunk of ``source``; returns the sparse file contents and a summary dict.

    Each feature column is reduced by its attribute's kind unless ``options`` say otherwise;
    the file records every channel's ``AttributeInfo`` (its ``schema``), the source's format
    and metadata (``source``), and the options and lattice version (``provenance``).
    """
    t0 = time.perf_counter()
    count_only = options.reduction == "count"
    cols = [] if count_only else feature_columns(source.attributes, options.features)
    infos = _column_infos(source, cols, options)
    named = {c[2] for c in cols} | {c[0] for c in cols}
    unknown = sorted(set(options.reductions) - named)
    if unknown:
        have = ", ".join(sorted(named)) or "none"
        raise ValueError(f"no feature {unknown[0]!r} to reduce; the features are: {have}")
    origin = options.origin
    if origin == "min":
        origin = _min_origin(source, options.chunk_points)
    kinds = sorted({i.reduction for i in infos}) or ["count"]
    request = PointsRequest("voxelize", -1, max(len(cols), 1), kinds[0] if len(kinds) == 1 else "mixed")
    route_points(request).require("cpu.hash_quantize_segment_reduce")  # streamed through the CPU core
    vox = StreamingVoxelizer(
        options.voxel_size, origin, [i.reduction for i in infos], cols, centroids=options.centroids
    )
    seen = dropped = 0
    points_dtype = None
    for pts, attrs in source.chunks(options.chunk_points):
        n = len(pts)
        points_dtype = points_dtype or pts.dtype.name
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
    coords, feats, counts, centroids = vox.result()
    if not cols:
        feats = counts.astype(np.float32).reshape(-1, 1)
        infos = [AttributeInfo("count", "continuous", "uint32", "count")]
    else:
        _renormalise(feats, infos)
        feats = feats.astype(_feature_dtype(feats, infos), copy=False)
    names = tuple(i.name for i in infos)
    sf = SparseFile(
        coords,
        feats,
        np.ones(3, np.int32),
        np.asarray(options.voxel_size, np.float64),
        np.asarray(origin, np.float64),
        names,
        schema=tuple(infos),
        provenance=make_record("voxelize", options.parameters()),
        source=_source_record(source, points_dtype),
        centroids=centroids,
    )
    reductions = {i.name: i.reduction for i in infos}
    summary = {
        "input": source.label,
        "format": source.format,
        "streamed": source.streamed,
        "points": seen,
        "nonfinite_dropped": dropped,
        "voxels": sf.num_rows,
        "channels": sf.num_channels,
        "feature_names": list(names),
        "reduction": "count" if not cols else (kinds[0] if len(kinds) == 1 else "by kind"),
        "reductions": reductions,
        "kinds": {i.name: i.kind for i in infos},
        "voxel_size": list(options.voxel_size),
        "origin": [float(v) for v in origin],
        "points_per_voxel": round((seen - dropped) / sf.num_rows, 3) if sf.num_rows else 0.0,
        "seconds": round(time.perf_counter() - t0, 4),
    }
    return sf, summary


def _source_record(source: PointSource, points_dtype: str | None) -> dict:
    """The input's format, point type and JSON-ready metadata, kept so a voxel export can restore them."""
    meta = {}
    for k, v in source.metadata.items():
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            continue
        meta[k] = v
    record = {"format": source.format, "metadata": meta}
    if points_dtype in ("float32", "float64"):
        record["points_dtype"] = points_dtype
    return record


def voxelize_cloud(cloud: PointCloud, voxel_size=1.0, **options) -> tuple[SparseFile, dict]:
    """Voxelize an in-memory cloud (``options`` as in ``VoxelizeOptions``)."""
    return voxelize_source(memory_source(cloud), VoxelizeOptions(voxel_size, **options))


def write_sparse_file(dst: str | os.PathLike | BinaryIO, sf: SparseFile) -> str:
    """Write ``sf`` as a ``lattice.sparse/1`` NPZ (atomically for a path); returns the path, or ``-``.

    Its records (schema, provenance, source, centroids) are written too
    (``lattice.pipeline.export.write_tensor``).
    """
    from lattice.pipeline.export import write_tensor

    return write_tensor(dst, sf)


def voxelize_parameters(
    options: VoxelizeOptions, position: str = "centre", output_format: str = "npz"
) -> dict:
    """What a ``voxelize_file`` output records as its parameters (a batch re-run compares them)."""
    return {**options.parameters(), "position": position, "output_format": output_format}


def voxelize_file(
    src: str | os.PathLike | BinaryIO,
    dst: str | os.PathLike | BinaryIO,
    options: VoxelizeOptions,
    *,
    format: str | None = None,
    output_format: str | None = None,
    position: str = "centre",
    sidecar: bool = False,
    columns: str | Sequence[str] | None = None,
) -> dict:
    """Read ``src`` (streamed where the format allows), voxelize, write ``dst``.

    ``dst``'s extension (or ``output_format``) chooses what is written: ``.npz`` the sparse
    tensor, any other point format the voxels as points at ``position`` (``centre`` or
    ``centroid``; see ``lattice.pipeline.export``). ``sidecar``: record the provenance of a
    non-NPZ output beside it (batch mode does, so re-runs can compare parameters).
    ``format`` and ``columns`` as for ``lattice.io.read_points``.
    """
    from lattice.pipeline.export import output_format as resolve
    from lattice.pipeline.export import write_result

    fmt = resolve(dst, output_format)  # an unknown extension fails before anything is read
    if position == "centroid" and not options.centroids:
        options = replace(options, centroids=True)
    sf, summary = voxelize_source(open_source(src, format=format, columns=columns), options)
    sf = replace(sf, provenance=make_record("voxelize", voxelize_parameters(options, position, fmt), src))
    # the voxelizer's table rows are unique by construction: not re-checked
    summary["output"] = write_result(
        dst, sf, format=fmt, position=position, rows_unique=True, sidecar=sidecar
    )
    summary["output_format"] = fmt
    if fmt != "npz":
        summary["position"] = position
    return summary


__all__ = [
    "REDUCTIONS",
    "StreamingVoxelizer",
    "VoxelRangeError",
    "VoxelizeOptions",
    "feature_columns",
    "voxelize_cloud",
    "voxelize_file",
    "voxelize_parameters",
    "voxelize_source",
    "write_sparse_file",
]
