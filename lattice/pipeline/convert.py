"""``convert_file``: any supported point-cloud format to any other (PDAL's ``translate``).

Points and every attribute are kept, by kind (``lattice.io.kinds``): colours are
re-encoded to the output format's convention (8-bit channels for PLY, PCD and text,
16-bit for LAS), class ids stay integers, LAS headers and CRS records travel with the
cloud. A ``lattice.sparse/1`` NPZ input is exported as points (one per voxel, at its
centre or its points' centroid), or copied when the output is NPZ too. What could not be
kept as it was is said in the summary's ``warnings`` (e.g. KITTI's fractional float
``intensity``, which LAS's 16-bit intensity cannot hold, is written as ``remission``).
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import replace
from typing import BinaryIO

from lattice.io import PointCloud, read_points, read_sparse, write_points
from lattice.io._common import output_label
from lattice.io.sparse import is_sparse_npz
from lattice.pipeline.export import fit_for, sparse_to_cloud, write_result
from lattice.pipeline.export import output_format as resolve_output
from lattice.pipeline.provenance import make_record, write_sidecar

PathOrStream = str | os.PathLike | BinaryIO


def convert_parameters(position: str = "centre", output_format: str = "npz", columns=None) -> dict:
    """What a ``convert_file`` output records as its parameters (a batch re-run compares them)."""
    return {"position": position, "output_format": output_format, "columns": columns}


def _read(src: PathOrStream, format: str | None, columns) -> tuple[PointCloud | None, object, str]:
    """``(cloud, None, kind)`` for a point file, ``(None, SparseFile, "sparse")`` for a sparse NPZ."""
    stream = src
    if hasattr(src, "read"):
        data = src.read()
        stream = io.BytesIO(data)
        stream.name = getattr(src, "name", "<stdin>")
    if format in (None, "npz") and is_sparse_npz(stream):
        return None, read_sparse(stream), "sparse"
    kw = {"columns": columns} if columns is not None else {}
    return read_points(stream, format=format, **kw), None, "points"


def convert_file(
    src: PathOrStream,
    dst: PathOrStream,
    *,
    format: str | None = None,
    output_format: str | None = None,
    position: str = "centre",
    columns=None,
    sidecar: bool = False,
) -> dict:
    """Read ``src`` (points or a sparse NPZ) and write it to ``dst`` in the format of its extension
    (or ``output_format``; NPZ for a stream); returns the summary. ``sidecar``: record the
    provenance beside a non-sparse output (batch mode)."""
    t0 = time.perf_counter()
    fmt = resolve_output(dst, output_format)
    cloud, sf, kind = _read(src, format, columns)
    record = make_record("convert", convert_parameters(position, fmt, columns), src)
    warnings: list[str] = []
    if sf is not None:
        if fmt == "npz":
            write_result(dst, replace(sf, provenance=record), format=fmt)
            rows, attrs, in_fmt = sf.num_rows, list(sf.feature_names), "lattice.sparse/1"
        else:
            cloud, warnings = fit_for(sparse_to_cloud(sf, position=position), fmt)
            write_points(dst, cloud, format=fmt)
            rows, attrs, in_fmt = len(cloud), list(cloud.attributes), "lattice.sparse/1"
    else:
        cloud, warnings = fit_for(cloud, fmt)
        write_points(dst, cloud, format=fmt)
        rows, attrs, in_fmt = len(cloud), list(cloud.attributes), cloud.format
    if sidecar and (fmt != "npz" or sf is None) and not hasattr(dst, "write"):
        write_sidecar(dst, record)
    return {
        "input": "-" if hasattr(src, "read") else os.fspath(src),
        "output": output_label(dst),
        "input_format": in_fmt,
        "output_format": fmt,
        "kind": kind,
        "points": rows,
        "attributes": attrs,
        "warnings": warnings,
        "seconds": round(time.perf_counter() - t0, 4),
    }


__all__ = ["convert_file", "convert_parameters"]
