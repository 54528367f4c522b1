"""What a file holds: a point cloud (points, attributes, bounds) or a sparse tensor
(rows, stride, channels, feature names, batches, bounds)."""

from __future__ import annotations

import io
import os
import zipfile
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np

from lattice.io import PointCloud, SparseFile, format_from_name, read_points, read_sparse


def _is_sparse_npz(f: BinaryIO) -> bool:
    """True when the archive has the sparse-tensor ``format`` member (errors: let the reader explain)."""
    try:
        with zipfile.ZipFile(f) as zf:
            return "format.npy" in zf.namelist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return False
    finally:
        f.seek(0)


def _stats(a: np.ndarray) -> dict:
    flat = a.reshape(len(a), -1).astype(np.float64)
    finite = flat[np.isfinite(flat).all(axis=1)] if flat.size else flat
    if not finite.size:
        return {"min": None, "max": None, "mean": None}
    r = lambda v: [round(float(x), 6) for x in v]  # noqa: E731
    lo, hi, mean = r(finite.min(axis=0)), r(finite.max(axis=0)), r(finite.mean(axis=0))
    return (
        {"min": lo, "max": hi, "mean": mean}
        if flat.shape[1] > 1
        else {"min": lo[0], "max": hi[0], "mean": mean[0]}
    )


def describe_cloud(cloud: PointCloud) -> dict:
    """Summary of a point cloud: count, dtype, non-finite points, bounds, attributes."""
    ok = cloud.finite_mask()
    pts = cloud.points[ok]
    bounds = (
        {"min": pts.min(axis=0).astype(float).tolist(), "max": pts.max(axis=0).astype(float).tolist()}
        if len(pts)
        else None
    )
    attrs = [
        {"name": k, "dtype": str(v.dtype), "shape": list(v.shape[1:]), **_stats(v)}
        for k, v in cloud.attributes.items()
    ]
    return {
        "kind": "points",
        "format": cloud.format,
        "points": len(cloud),
        "dtype": str(cloud.points.dtype),
        "nonfinite": int((~ok).sum()),
        "bounds": bounds,
        "attributes": attrs,
        "has_colors": cloud.colors() is not None,
        "has_normals": cloud.normals() is not None,
    }


def describe_sparse(sf: SparseFile) -> dict:
    """Summary of a sparse tensor: rows, channels, names, stride, voxel size, batches, bounds."""
    c = sf.coords
    batches = np.bincount(c[:, 0], minlength=1) if len(c) else np.zeros(0, np.int64)
    scale = sf.stride * sf.voxel_size
    bounds = None
    if len(c):
        lo, hi = c[:, 1:].min(axis=0), c[:, 1:].max(axis=0)
        bounds = {
            "coords_min": lo.tolist(),
            "coords_max": hi.tolist(),
            "min": (sf.origin + lo * scale).tolist(),
            "max": (sf.origin + (hi + 1) * scale).tolist(),
        }
    channels = [{"name": n, **_stats(sf.feats[:, i])} for i, n in enumerate(sf.feature_names)]
    return {
        "kind": "sparse",
        "format": sf.format,
        "rows": sf.num_rows,
        "channels": sf.num_channels,
        "feature_names": list(sf.feature_names),
        "feats_dtype": str(sf.feats.dtype),
        "stride": sf.stride.tolist(),
        "voxel_size": sf.voxel_size.tolist(),
        "origin": sf.origin.tolist(),
        "batches": int(len(batches)),
        "rows_per_batch": batches.tolist(),
        "bounds": bounds,
        "channel_stats": channels,
    }


def describe_file(
    src: str | os.PathLike | BinaryIO, *, format: str | None = None, columns: str | Sequence[str] | None = None
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
        if data[:4] == b"PK\x03\x04" and format in (None, "npz") and _is_sparse_npz(stream):
            return {"file": label, **describe_sparse(read_sparse(stream))}
        return {"file": label, **describe_cloud(read_points(stream, format=format, columns=columns))}
    is_npz = (format or "").lower().lstrip(".") == "npz" or (
        format is None and format_from_name(label) == "npz"
    )
    if is_npz and os.path.isfile(src) and os.path.getsize(src) > 0:
        with open(src, "rb") as f:
            sparse = _is_sparse_npz(f)
        if sparse:
            return {"file": label, **describe_sparse(read_sparse(src))}
    return {"file": label, **describe_cloud(read_points(src, format=format, columns=columns))}


__all__ = ["describe_cloud", "describe_file", "describe_sparse"]
