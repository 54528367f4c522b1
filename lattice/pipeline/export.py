"""Outputs by extension: a sparse result written as the NPZ tensor or as points in any format.

``.npz`` keeps the ``lattice.sparse/1`` tensor. Every other point-cloud extension writes
the voxels as points (``sparse_to_cloud``): the voxel centre (``position="centre"``) or the
mean of the voxel's points (``"centroid"``, when the voxelizer kept it), with every
channel as an attribute cast back to the type its source attribute had (class ids as
integers, colours rounded to their channel type and then re-encoded by the writer to
the output format's convention, times in float64). A voxel export of a LAS input keeps
its LAS header and CRS records. An extension no writer knows is an error
(``OutputFormatError``), never a silent NPZ.
"""

from __future__ import annotations

import os
from dataclasses import replace
from typing import BinaryIO

import numpy as np

from lattice.io import FORMATS, PointCloud, PointCloudError, SparseFile, format_from_name, write_points
from lattice.io._common import output_label
from lattice.io.kinds import AttributeInfo, convert_colour, info_for
from lattice.io.sparse import _write_table_rows, write_sparse
from lattice.pipeline.provenance import write_sidecar

POSITIONS = ("centre", "centroid")
PathOrStream = str | os.PathLike | BinaryIO


class OutputFormatError(ValueError):
    """An output path or ``format`` that no writer knows (a usage error in the CLI)."""


def output_formats() -> tuple[str, ...]:
    """Every format a sparse result can be written as: ``npz`` (the tensor) and the point formats."""
    return tuple(FORMATS)


def output_format(dst: PathOrStream, requested: str | None = None) -> str:
    """The format ``dst`` is written in: ``requested``, else the path's extension, else ``npz`` for a stream.

    Raises ``OutputFormatError`` for an unknown format or extension.
    """
    if requested is not None:
        fmt = requested.lower().lstrip(".")
        fmt = {"bin": "kitti", "velodyne": "kitti", "pcd.bin": "nuscenes"}.get(fmt, fmt)
        if fmt not in FORMATS:
            raise OutputFormatError(
                f"unknown output format {requested!r}; known formats: {', '.join(output_formats())}"
            )
        return fmt
    if hasattr(dst, "write"):
        return "npz"
    name = os.fspath(dst)
    try:
        fmt = format_from_name(name)
    except PointCloudError as e:
        raise OutputFormatError(str(e)) from e
    if fmt is None:
        ext = os.path.splitext(name)[1] or "(none)"
        exts = sorted({e for f in FORMATS.values() for e in f.extensions})
        raise OutputFormatError(
            f"{name}: unknown output extension {ext}; use one of {', '.join(exts)} "
            "(.npz keeps the sparse tensor, the others write the voxels as points)"
        )
    return fmt


def extension_of(fmt: str) -> str:
    """The file extension written for ``fmt`` in batch mode (``.npz``, ``.ply``, ``.las`` ...)."""
    exts = FORMATS[fmt].extensions
    return exts[0] if exts else ".pcd.bin" if fmt == "nuscenes" else f".{fmt}"


def _channel_info(sf: SparseFile, j: int) -> AttributeInfo:
    if sf.schema is not None:
        return sf.schema[j]
    return info_for(sf.feature_names[j], sf.feats[:, j])


def _cast_back(values: np.ndarray, info: AttributeInfo) -> np.ndarray:
    """A reduced channel in the type of its source attribute (rounded where that type is integral)."""
    try:
        dtype = np.dtype(info.dtype)
    except TypeError:
        dtype = np.dtype(np.float32)
    if info.reduction == "count":
        return values.astype(np.uint32)
    if info.kind == "colour" and info.scale:
        return (
            convert_colour(values, info.scale, info.scale, dtype)
            if dtype.kind in "iu"
            else values.astype(dtype)
        )
    if info.kind == "time":
        return values.astype(np.float64)
    if dtype.kind in "iub":
        if not np.all(np.isfinite(values)):
            return values.astype(np.float32)  # an empty mode (NaN) cannot be an integer
        lo, hi = (0, 1) if dtype.kind == "b" else (np.iinfo(dtype).min, np.iinfo(dtype).max)
        return np.clip(np.rint(values), lo, hi).astype(dtype)
    return values.astype(dtype if dtype.kind == "f" else np.float32)


def voxel_positions(sf: SparseFile, position: str = "centre") -> np.ndarray:
    """float64 ``(N, 3)`` world positions of the voxels: their centres, or their points' mean."""
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {', '.join(POSITIONS)}, got {position!r}")
    if position == "centroid":
        if sf.centroids is None:
            raise ValueError(
                "the voxel centroids were not kept: voxelize with centroids (--position centroid) to export them"
            )
        return sf.centroids.astype(np.float64)
    size = sf.voxel_size * sf.stride
    return sf.origin + (sf.coords[:, 1:].astype(np.float64) + 0.5) * size


def sparse_to_cloud(sf: SparseFile, *, position: str = "centre") -> PointCloud:
    """The voxels of ``sf`` as a ``PointCloud``: one point per voxel, every channel an attribute.

    A tensor of several batch members gets a ``batch`` attribute. The cloud's format and
    metadata are the voxelized input's (``sf.source``), so writers keep e.g. a LAS header;
    positions are float32 when the input's points were.
    """
    attrs: dict[str, np.ndarray] = {}
    if len(sf.coords) and sf.coords[:, 0].max() > 0:
        attrs["batch"] = sf.coords[:, 0].astype(np.int32)
    kinds = {}
    for j, name in enumerate(sf.feature_names):
        info = _channel_info(sf, j)
        attrs[name] = _cast_back(sf.feats[:, j], info)
        kinds[name] = info.kind
    source = sf.source or {}
    meta = dict(source.get("metadata") or {})
    meta.pop("width", None), meta.pop("height", None)  # voxels are not an organised grid
    points = voxel_positions(sf, position)
    if source.get("points_dtype") == "float32":  # the input's coordinate type (PLY/PCD keep float32)
        points = points.astype(np.float32)
    return PointCloud(points, attrs, format=source.get("format"), metadata=meta, kinds=kinds)


def fit_for(cloud: PointCloud, fmt: str) -> tuple[PointCloud, list[str]]:
    """``cloud`` made writable as ``fmt`` without losing values, and what was changed (one line each).

    LAS's ``intensity`` is a 16-bit integer: a float intensity that is not (KITTI's remission
    in [0, 1], a voxel mean) is written as the extra-bytes dimension ``remission``. LAS has no
    NaN coordinates: points without finite x, y, z (invalid pixels of organised clouds) are
    dropped, and counted in the note.
    """
    notes = []
    if fmt in ("las", "laz"):
        finite = cloud.finite_mask()
        if not finite.all():
            notes.append(
                f"dropped {int((~finite).sum())} points with non-finite coordinates (LAS cannot store them)"
            )
            cloud = cloud.select(finite)
    attrs = dict(cloud.attributes)
    if fmt in ("las", "laz"):
        v = attrs.get("intensity")
        if v is not None and v.dtype.kind == "f" and "remission" not in attrs:
            finite = v[np.isfinite(v)]
            if len(finite) != len(v) or (
                finite.size
                and (np.any(finite != np.round(finite)) or finite.min() < 0 or finite.max() > 65535)
            ):
                attrs["remission"] = attrs.pop("intensity")
                notes.append("float intensity does not fit LAS's 16-bit intensity: written as 'remission'")
    if attrs.keys() == cloud.attributes.keys():
        return cloud, notes
    return replace(cloud, attributes=attrs, kinds={k: v for k, v in cloud.kinds.items() if k in attrs}), notes


def write_tensor(dst: PathOrStream, sf: SparseFile) -> str:
    """Write ``sf`` as a ``lattice.sparse/1`` NPZ with all its records (schema, provenance,
    source, centroids), atomically for a path; returns the path, or ``-``."""
    write_sparse(
        dst,
        sf.coords,
        sf.feats,
        stride=sf.stride,
        voxel_size=sf.voxel_size,
        origin=sf.origin,
        feature_names=sf.feature_names,
        schema=sf.schema,
        provenance=sf.provenance,
        source=sf.source,
        centroids=sf.centroids,
    )
    return output_label(dst)


def write_result(
    dst: PathOrStream,
    sf: SparseFile,
    *,
    format: str | None = None,
    position: str = "centre",
    rows_unique: bool = False,
    sidecar: bool = False,
) -> str:
    """Write ``sf`` to ``dst`` in ``format`` (default: by extension, ``npz`` for a stream); returns its label.

    ``npz`` writes the tensor (its provenance record inside); any other format the voxels as
    points (``sparse_to_cloud``), and with ``sidecar`` (batch mode) the provenance record
    beside them as ``<dst>.lattice.json``. ``rows_unique``: the rows come from one
    coordinate table (skips the uniqueness check).
    """
    fmt = output_format(dst, format)
    if fmt == "npz":
        if rows_unique:
            _write_table_rows(dst, sf)
        else:
            write_tensor(dst, sf)
    else:
        cloud, _ = fit_for(sparse_to_cloud(sf, position=position), fmt)
        write_points(dst, cloud, format=fmt)
        if sidecar and sf.provenance is not None and not hasattr(dst, "write"):
            write_sidecar(dst, sf.provenance)
    return output_label(dst)


__all__ = [
    "POSITIONS",
    "OutputFormatError",
    "extension_of",
    "fit_for",
    "output_format",
    "output_formats",
    "sparse_to_cloud",
    "voxel_positions",
    "write_result",
    "write_tensor",
]
