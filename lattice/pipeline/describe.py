"""What a file holds, at ``pdal info`` depth: a point cloud (points, bounds, attributes with
their kinds and statistics, histograms of categorical attributes, a LAS header and its CRS)
or a sparse tensor (rows, stride, channels with their kinds, bounds, provenance, source).

Numbers are exact: integers stay integers, float32 values are given by their shortest
float32 text (``5403547.5``, not ``5403547.5000000``), float64 values in full, and a LAS
file's bounds are rounded to its scale's decimals (``636001.76``: the coordinates are
integers times the scale, so nothing is lost). The dicts hold JSON values only.
"""

from __future__ import annotations

import base64
import io
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, BinaryIO

import numpy as np

from lattice.io import PointCloud, SparseFile, format_from_name, read_points, read_sparse, storage
from lattice.io.classes import asprs_class_name
from lattice.io.kinds import AttributeInfo
from lattice.io.las_records import is_las_metadata
from lattice.io.sparse import is_sparse_npz

HISTOGRAM_VALUES = 64  # categorical values listed one by one; past this, the most frequent


def exact(values: Any, dtype: Any) -> Any:
    """``values`` (a scalar or array) as JSON numbers that are exact for ``dtype``.

    Integers and bools become ints; float32 the float of their shortest float32 text;
    other floats are kept in full.
    """
    a, dt = np.asarray(values), np.dtype(dtype)
    if dt.kind in "biu":
        return a.astype(np.int64).tolist()
    if dt == np.float32 or dt == np.float16:
        return np.vectorize(lambda v: float(str(np.float32(v))), otypes=[float])(a).tolist()
    return a.astype(np.float64).tolist()


def scale_decimals(scale: float) -> int:
    """Decimals that write multiples of ``scale`` exactly: 2 for 0.01, 3 for 0.025, 0 for 10."""
    for d in range(13):
        if abs(round(scale, d) - scale) <= abs(scale) * 1e-9:
            return d
    return 12


def _stats(a: np.ndarray) -> dict:
    flat = a.reshape(len(a), int(np.prod(a.shape[1:], dtype=np.int64)))
    if flat.dtype.kind == "f" and flat.size:
        flat = flat[np.isfinite(flat).all(axis=1)]
    if not flat.size:
        return {"min": None, "max": None, "mean": None}
    stats = {
        "min": exact(flat.min(axis=0), a.dtype),
        "max": exact(flat.max(axis=0), a.dtype),
        "mean": flat.astype(np.float64).mean(axis=0).tolist(),
    }
    return stats if flat.shape[1] > 1 else {k: v[0] for k, v in stats.items()}


def histogram(values: np.ndarray, name_of: Callable[[Any], str | None] | None = None) -> dict:
    """Value -> count of a 1-D categorical attribute, in value order.

    Every value when there are at most ``HISTOGRAM_VALUES`` distinct ones, else the most
    frequent ones (ties to the smaller value) with ``other_values`` / ``other_count`` for
    the rest. NaN values are counted in ``nan``. ``name_of`` names each value (ASPRS classes).
    """
    v = np.asarray(values).ravel()
    nan = int(np.isnan(v).sum()) if v.dtype.kind == "f" else 0
    if nan:
        v = v[~np.isnan(v)]
    if v.dtype.kind in "bu" and v.dtype.itemsize <= 2 and v.size:
        counts = np.bincount(v.astype(np.int64))
        uniq = np.flatnonzero(counts)
        counts = counts[uniq]
    else:
        uniq, counts = np.unique(v, return_counts=True)
    keep = np.arange(len(uniq))
    if len(uniq) > HISTOGRAM_VALUES:
        keep = np.sort(np.lexsort((uniq, -counts))[:HISTOGRAM_VALUES])
    bins = []
    for value, count in zip(exact(uniq[keep], v.dtype), counts[keep].tolist(), strict=True):
        entry = {"value": value, "count": int(count)}
        if name_of is not None:
            entry["name"] = name_of(value)
        bins.append(entry)
    shown = int(counts[keep].sum())
    return {
        "distinct": int(len(uniq)),
        "bins": bins,
        "other_values": int(len(uniq) - len(keep)),
        "other_count": int(counts.sum()) - shown,
        "nan": nan,
    }


def _attribute(name: str, values: np.ndarray, info: AttributeInfo, las: bool) -> dict:
    d = {"name": name, "dtype": str(values.dtype), "shape": list(values.shape[1:]), **_stats(values)}
    d |= {"kind": info.kind, "reduction": info.reduction, "scale": info.scale}
    if info.kind == "categorical" and values.ndim == 1:
        names = asprs_class_name if las and name == "classification" else None
        d["histogram"] = histogram(values, names)
    return d


def _bounds(points: np.ndarray, meta: Mapping) -> dict | None:
    if not len(points):
        return None
    lo, hi = points.min(axis=0), points.max(axis=0)
    if is_las_metadata(meta):
        digits = [scale_decimals(float(s)) for s in meta["scales"]]
        return {
            k: [round(float(v), d) for v, d in zip(b, digits, strict=True)]
            for k, b in (("min", lo), ("max", hi))
        }
    return {"min": exact(lo, points.dtype), "max": exact(hi, points.dtype)}


_HEADER_KEYS = (
    "version", "point_format", "scales", "offsets", "system_identifier", "generating_software",
    "creation_date", "global_encoding", "file_source_id", "guid",
)  # fmt: skip


def _records(entries: Any) -> list[dict]:
    out = []
    for r in entries or []:
        size = len(base64.b64decode(str(r.get("data", ""))))
        out.append({k: r.get(k) for k in ("user_id", "record_id", "description")} | {"bytes": size})
    return out


def las_header(meta: Mapping, points: int) -> dict | None:
    """The LAS header part of ``PointCloud.metadata`` (records listed without their bytes), or None."""
    if not is_las_metadata(meta):
        return None
    d = {k: meta.get(k) for k in _HEADER_KEYS}
    d["points"] = points
    d["vlrs"], d["evlrs"] = _records(meta.get("vlrs")), _records(meta.get("evlrs"))
    return d


def _crs_fields(meta: Mapping) -> dict:
    out = {"crs": meta.get("crs")}
    if meta.get("crs_error"):
        out["crs_error"] = meta["crs_error"]
    return out


def describe_cloud(cloud: PointCloud) -> dict:
    """Summary of a point cloud: count, dtype, non-finite points, bounds, attributes (kind,
    statistics, histograms), and for a LAS source its header and CRS."""
    ok = cloud.finite_mask()
    las = cloud.format in ("las", "laz") or is_las_metadata(cloud.metadata)
    infos = cloud.attribute_info()
    attrs = [_attribute(k, v, infos[k], las) for k, v in cloud.attributes.items()]
    out = {
        "kind": "points",
        "format": cloud.format,
        "points": len(cloud),
        "dtype": str(cloud.points.dtype),
        "nonfinite": int((~ok).sum()),
        "bounds": _bounds(cloud.points[ok], cloud.metadata),
        "attributes": attrs,
        "has_colors": cloud.colors() is not None,
        "has_normals": cloud.normals() is not None,
    }
    header = las_header(cloud.metadata, len(cloud))
    if header is not None:
        out["las"] = header
        out |= _crs_fields(cloud.metadata)
    return out


def _channel(sf: SparseFile, i: int, name: str, las: bool) -> dict:
    values = sf.feats[:, i]
    d = {"name": name, "dtype": str(values.dtype), **_stats(values)}
    info = sf.schema[i] if sf.schema is not None else None
    if info is not None:
        d |= {"kind": info.kind, "reduction": info.reduction, "scale": info.scale, "source_dtype": info.dtype}
        if info.kind == "categorical":
            d["histogram"] = histogram(values, asprs_class_name if las and name == "classification" else None)
    return d


def describe_sparse(sf: SparseFile) -> dict:
    """Summary of a sparse tensor: rows, channels (with their kinds when the file records
    them), stride, voxel size, batches, bounds in voxel and world units, provenance and source."""
    c = sf.coords
    # counted from the ids present, never sized by the largest id (a batch id may be 2^31 - 1)
    batch_ids, batches = np.unique(c[:, 0], return_counts=True)
    scale = sf.stride * sf.voxel_size
    bounds = None
    if len(c):
        lo, hi = c[:, 1:].min(axis=0), c[:, 1:].max(axis=0)
        bounds = {
            "coords_min": lo.tolist(),
            "coords_max": hi.tolist(),
            # voxel faces in world units, without the float noise of the product (1.15, not 1.1500000000000001)
            "min": [float(f"{v:.12g}") for v in sf.origin + lo * scale],
            "max": [float(f"{v:.12g}") for v in sf.origin + (hi + 1) * scale],
        }
    src_meta = sf.source.get("metadata") if isinstance(sf.source.get("metadata"), dict) else {}
    las = sf.source.get("format") in ("las", "laz")
    out = {
        "kind": "sparse",
        "format": sf.format,
        "rows": sf.num_rows,
        "channels": sf.num_channels,
        "feature_names": list(sf.feature_names),
        "feats_dtype": str(sf.feats.dtype),
        "stride": sf.stride.tolist(),
        "voxel_size": sf.voxel_size.tolist(),
        "origin": sf.origin.tolist(),
        "batches": int(len(batch_ids)),
        "batch_ids": batch_ids.tolist(),
        "rows_per_batch": batches.tolist(),
        "bounds": bounds,
        "channel_stats": [_channel(sf, i, n, las) for i, n in enumerate(sf.feature_names)],
        "provenance": sf.provenance,
        "source_format": sf.source.get("format"),
    }
    if is_las_metadata(src_meta):
        out |= _crs_fields(src_meta)
    return out


def describe_file(
    src: str | os.PathLike | BinaryIO,
    *,
    format: str | None = None,
    columns: str | Sequence[str] | None = None,
) -> dict:
    """Read ``src`` (a path or a binary stream) and describe it (``format``, ``columns``: see ``read_points``).

    A ``lattice.sparse/1`` NPZ is described as a sparse tensor, anything else as points.
    Raises ``PointCloudError`` with one line for unreadable input.
    """
    label = "-" if hasattr(src, "read") else os.fspath(src)
    if hasattr(src, "read"):
        data = src.read()
        stream = io.BytesIO(data)
        stream.name = getattr(src, "name", "<stdin>")
        if data[:4] == b"PK\x03\x04" and format in (None, "npz") and is_sparse_npz(stream):
            return {"file": label, **describe_sparse(read_sparse(stream))}
        return {"file": label, **describe_cloud(read_points(stream, format=format, columns=columns))}
    is_npz = (format or "").lower().lstrip(".") == "npz" or (
        format is None and format_from_name(label) == "npz"
    )
    if is_npz and (storage.file_size(src) or 0) > 0 and is_sparse_npz(src):
        return {"file": label, **describe_sparse(read_sparse(src))}
    return {"file": label, **describe_cloud(read_points(src, format=format, columns=columns))}


def describe_job(src: str | os.PathLike, dst: None = None, **options) -> dict:
    """``describe_file`` as a batch job (``run_batch`` over tasks without outputs: ``dst`` is None)."""
    if dst is not None:
        raise ValueError(f"describe_job writes nothing; got an output {dst}")
    return describe_file(src, **options)


__all__ = [
    "HISTOGRAM_VALUES",
    "describe_job",
    "describe_cloud",
    "describe_file",
    "describe_sparse",
    "exact",
    "histogram",
    "las_header",
    "scale_decimals",
]
