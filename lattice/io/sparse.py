"""Sparse-tensor NPZ files (``format = "lattice.sparse/1"``), the exchange format of the CLI.

Keys: ``coords`` int32 (N, 4) ``(batch, x, y, z)``, unique rows, batch >= 0; ``feats``
(N, C); ``stride`` int32 (3,) positive; ``voxel_size`` float64 (3,) positive;
``origin`` float64 (3,); ``feature_names`` (C,) fixed-width unicode; ``format`` the
tag. Optional, each a 0-d JSON string: ``attributes`` (per channel: the kind, stored type,
reduction and colour scale of the point attribute it came from, ``lattice.io.kinds``),
``provenance`` (the command, parameters and lattice version that made the file) and
``source`` (the input's format and metadata, e.g. a LAS header and its CRS records, so a
voxel export to LAS keeps them). No pickle is written or read. NumPy in, NumPy out:
converting to a ``SparseTensor`` is the caller's job.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lattice.io._common import (
    HOSTILE_ERRORS,
    PathOrFile,
    PointCloudError,
    label_of,
    open_input,
    open_output,
    reading,
)
from lattice.io.kinds import AttributeInfo, schema_from_json, schema_json
from lattice.io.npz import load_npz, save_npz

SPARSE_FORMAT = "lattice.sparse/1"
_KEYS = ("format", "coords", "feats", "stride", "voxel_size", "origin", "feature_names")


@dataclass(frozen=True, eq=False)
class SparseFile:
    """The contents of a sparse-tensor NPZ, validated.

    ``schema``: one ``AttributeInfo`` per channel (what point attribute it holds), or None
    when the file does not say. ``provenance``: how the file was made (command, parameters,
    lattice version), or None. ``source``: the input's ``{"format", "metadata"}`` (JSON
    values only), or an empty dict. ``centroids``: float64 ``(N, 3)``, each voxel's mean
    point in world units, or None.
    """

    coords: np.ndarray
    feats: np.ndarray
    stride: np.ndarray
    voxel_size: np.ndarray
    origin: np.ndarray
    feature_names: tuple[str, ...]
    format: str = SPARSE_FORMAT
    schema: tuple[AttributeInfo, ...] | None = None
    provenance: dict | None = None
    source: dict = field(default_factory=dict)
    centroids: np.ndarray | None = None

    @property
    def num_rows(self) -> int:
        """Number of active voxels N."""
        return int(self.coords.shape[0])

    @property
    def num_channels(self) -> int:
        """Number of feature channels C."""
        return int(self.feats.shape[1])


def _triple(value: Any, name: str, kind: str, where: str) -> np.ndarray:
    a = np.asarray(value)
    if a.ndim == 0:
        a = np.full(3, a)
    if a.shape != (3,) or a.dtype.kind not in ("iu" if kind == "int" else "iuf"):
        raise PointCloudError(f"{where}: {name} must be 3 {kind}s, got {value!r}")
    out = a.astype(np.int32 if kind == "int" else np.float64)
    if not np.all(np.isfinite(out)):
        raise PointCloudError(f"{where}: {name} must be finite, got {out.tolist()}")
    return out


def _coords(coords: Any, where: str, rows_unique: bool = False) -> np.ndarray:
    c = np.asarray(coords)
    if c.ndim != 2 or c.shape[1] != 4 or c.dtype.kind not in "iu":
        raise PointCloudError(f"{where}: coords must be an integer (N, 4) array, got {c.dtype} {c.shape}")
    info = np.iinfo(np.int32)
    if c.size and (c.min() < info.min or c.max() > info.max):
        raise PointCloudError(f"{where}: coords do not fit int32 (range {c.min()}..{c.max()})")
    c = c.astype(np.int32, copy=False)
    if c.size and c[:, 0].min() < 0:
        raise PointCloudError(f"{where}: batch indices (coords[:, 0]) must be >= 0, got {c[:, 0].min()}")
    _check_span(c, where)
    if c.shape[0] > 1 and not rows_unique:
        order = np.lexsort(c.T[::-1])
        s = c[order]
        dup = np.flatnonzero((s[1:] == s[:-1]).all(axis=1))
        if dup.size:
            raise PointCloudError(
                f"{where}: coords must be unique, {s[dup[0]].tolist()} appears more than once"
            )
    return c


def _check_span(c: np.ndarray, where: str) -> None:
    """The coordinate tables pack ``(batch, x, y, z)`` into one 64-bit key over the bounding box
    (docs/tensor-model.md): the product of the four extents must stay below 2^64."""
    if not c.size:
        return
    lo, hi = c.min(axis=0).tolist(), c.max(axis=0).tolist()
    if math.prod(b - a + 1 for a, b in zip(lo, hi, strict=True)) >= 2**64 - 1:
        spans = ", ".join(f"{n} {a}..{b}" for n, a, b in zip(("batch", "x", "y", "z"), lo, hi, strict=True))
        raise PointCloudError(
            f"{where}: coordinates span too large ({spans}): the product of the four extents must be "
            "below 2^64 (coordinate tables pack them into one 64-bit key)"
        )


def _check_world(c: np.ndarray, stride, voxel_size, origin, where: str) -> None:
    """Voxel faces ``origin + coords x stride x voxel_size`` must be finite float64 numbers."""
    if not c.size:
        return
    with np.errstate(over="ignore", invalid="ignore"):
        scale = stride * voxel_size
        faces = origin + np.stack([c[:, 1:].min(axis=0), c[:, 1:].max(axis=0) + 1.0]) * scale
    if not np.all(np.isfinite(faces)):
        raise PointCloudError(
            f"{where}: stride {stride.tolist()} x voxel_size {voxel_size.tolist()} puts voxel faces beyond "
            f"float64 (coords {c[:, 1:].min(axis=0).tolist()}..{c[:, 1:].max(axis=0).tolist()})"
        )


def _feats(feats: Any, n: int, where: str) -> np.ndarray:
    f = np.asarray(feats)
    if f.ndim != 2 or f.shape[0] != n or f.dtype.kind not in "biuf":
        raise PointCloudError(f"{where}: feats must be a numeric ({n}, C) array, got {f.dtype} {f.shape}")
    return f


def _names(names: Any, c: int, where: str) -> tuple[str, ...]:
    if names is None:
        return tuple(f"f{i}" for i in range(c))
    if isinstance(names, str):
        names = [names]
    out = tuple(str(n) for n in (np.asarray(names).tolist() if isinstance(names, np.ndarray) else names))
    if len(out) != c or not all(isinstance(n, str) and n for n in out) or len(set(out)) != c:
        raise PointCloudError(f"{where}: feature_names must be {c} unique non-empty strings, got {list(out)}")
    return out


def _schema(schema: Any, names: tuple[str, ...], where: str) -> tuple[AttributeInfo, ...] | None:
    if schema is None:
        return None
    try:
        infos = tuple(schema_from_json(schema) if isinstance(schema, str) else schema)
        ok = all(isinstance(i, AttributeInfo) for i in infos)
    except (ValueError, KeyError, TypeError) as e:
        raise PointCloudError(f"{where}: malformed 'attributes' record: {e}") from e
    if not ok or tuple(i.name for i in infos) != names:
        got = [getattr(i, "name", i) for i in infos] if ok else infos
        raise PointCloudError(
            f"{where}: the 'attributes' record must describe the channels {list(names)}, got {got}"
        )
    return infos


def _json_dict(value: Any, key: str, where: str) -> dict | None:
    if value is None:
        return None
    try:
        d = json.loads(value) if isinstance(value, str) else dict(value)
        json.dumps(d)
    except (ValueError, TypeError) as e:
        raise PointCloudError(f"{where}: malformed {key!r} record (must be a JSON object): {e}") from e
    if not isinstance(d, dict):
        raise PointCloudError(
            f"{where}: malformed {key!r} record (must be a JSON object), got {type(d).__name__}"
        )
    return d


def _validated(raw: SparseFile, where: str, rows_unique: bool = False) -> SparseFile:
    """The checked, normalised ``SparseFile`` of ``raw``: a ``SparseFile`` holding the values as
    given (by ``write_sparse``, a stored file or a producer), not yet checked."""
    c = _coords(raw.coords, where, rows_unique)
    f = _feats(raw.feats, c.shape[0], where)
    s = _triple(raw.stride, "stride", "int", where)
    v = _triple(raw.voxel_size, "voxel_size", "float", where)
    if np.any(s <= 0) or np.any(v <= 0):
        raise PointCloudError(
            f"{where}: stride and voxel_size must be positive, got {s.tolist()} and {v.tolist()}"
        )
    o = _triple(raw.origin, "origin", "float", where)
    _check_world(c, s, v, o, where)
    names = _names(raw.feature_names, f.shape[1], where)
    centroids = raw.centroids
    if centroids is not None:
        centroids = np.asarray(centroids)
        if centroids.shape != (c.shape[0], 3) or centroids.dtype.kind != "f":
            raise PointCloudError(
                f"{where}: centroids must be a float ({c.shape[0]}, 3) array, got {centroids.dtype} {centroids.shape}"
            )
        centroids = centroids.astype(np.float64, copy=False)
    return SparseFile(
        c,
        f,
        s,
        v,
        o,
        names,
        schema=_schema(raw.schema, names, where),
        provenance=_json_dict(raw.provenance, "provenance", where),
        source=_json_dict(raw.source, "source", where) or {},
        centroids=centroids,
    )


def write_sparse(
    path_or_file: PathOrFile,
    coords: Any,
    feats: Any,
    *,
    stride: int | Sequence[int] = (1, 1, 1),
    voxel_size: float | Sequence[float] = (1.0, 1.0, 1.0),
    origin: float | Sequence[float] = (0.0, 0.0, 0.0),
    feature_names: Sequence[str] | None = None,
    compress: bool = False,
    schema: Sequence[AttributeInfo] | None = None,
    provenance: dict | None = None,
    source: dict | None = None,
    centroids: np.ndarray | None = None,
) -> None:
    """Write a sparse tensor's arrays as a ``lattice.sparse/1`` NPZ (atomically for a path).

    ``feature_names`` defaults to ``f0 … f{C-1}``. ``schema`` (one ``AttributeInfo`` per
    channel, named like the channels), ``provenance`` and ``source`` (JSON objects) and
    ``centroids`` (float ``(N, 3)``) are stored when given. Raises ``PointCloudError`` for invalid arrays (duplicate coords,
    wrong shapes, non-positive stride or voxel size) or records.
    """
    where = label_of(path_or_file)
    raw = SparseFile(
        coords,
        feats,
        stride,
        voxel_size,
        origin,
        feature_names,
        schema=schema,
        provenance=provenance,
        source=source,
        centroids=centroids,
    )
    _save(path_or_file, _validated(raw, where), compress)


def _write_table_rows(path_or_file: PathOrFile, sf: SparseFile) -> None:
    """Internal: ``write_sparse`` for a producer whose ``sf.coords`` are the rows of one
    coordinate table (the streaming voxelizer), unique by construction.

    Every check of ``write_sparse`` runs except the uniqueness re-check, which sorts the
    rows and copies them several times (about 10 s at 17 M voxels). Not part of
    the public API (``lattice.io`` does not export it): user arrays go through ``write_sparse``.
    """
    where = label_of(path_or_file)
    _save(path_or_file, _validated(sf, where, rows_unique=True), False)


def _save(path_or_file: PathOrFile, sf: SparseFile, compress: bool) -> None:
    arrays = {
        "format": np.array(SPARSE_FORMAT),
        "coords": sf.coords,
        "feats": sf.feats,
        "stride": sf.stride,
        "voxel_size": sf.voxel_size,
        "origin": sf.origin,
        "feature_names": np.array(sf.feature_names, dtype=str if sf.feature_names else "<U1"),
    }
    if sf.schema is not None:
        arrays["attributes"] = np.array(schema_json(sf.schema))
    if sf.provenance is not None:
        arrays["provenance"] = np.array(json.dumps(sf.provenance))
    if sf.source:
        arrays["source"] = np.array(json.dumps(sf.source))
    if sf.centroids is not None:
        arrays["centroids"] = sf.centroids
    with open_output(path_or_file) as f:
        save_npz(f, arrays, compress=compress)


def _check_stored(arrays: dict[str, np.ndarray], label: str) -> None:
    if "format" not in arrays:
        hint = " (it holds points: use read_points)" if "points" in arrays else ""
        raise PointCloudError(f"{label}: not a lattice sparse-tensor NPZ, it has no 'format' key{hint}")
    tag = arrays["format"]
    if tag.dtype.kind != "U" or tag.size != 1 or str(tag.reshape(())) != SPARSE_FORMAT:
        raise PointCloudError(
            f"{label}: unsupported sparse format tag {tag.tolist()!r}, expected {SPARSE_FORMAT!r}"
        )
    missing = [k for k in _KEYS if k not in arrays]
    if missing:
        raise PointCloudError(f"{label}: sparse NPZ is missing keys {missing}")
    names = arrays["feature_names"]
    if names.dtype.kind != "U" or names.ndim != 1:
        raise PointCloudError(
            f"{label}: feature_names must be a 1-D unicode array, got {names.dtype} {names.shape}"
        )
    if arrays["coords"].dtype != np.int32:
        raise PointCloudError(f"{label}: coords must be int32, got {arrays['coords'].dtype}")
    for key in ("attributes", "provenance", "source"):
        a = arrays.get(key)
        if a is not None and (a.dtype.kind != "U" or a.size != 1):
            raise PointCloudError(f"{label}: {key!r} must be a JSON string, got {a.dtype} {a.shape}")


def _text(arrays: dict[str, np.ndarray], key: str) -> str | None:
    a = arrays.get(key)
    return None if a is None else str(a.reshape(()))


def is_sparse_npz(path_or_file: PathOrFile) -> bool:
    """True when ``path_or_file`` is a zip archive with the sparse tensor's ``format`` member.

    Never raises: anything unreadable is False (the reader then explains). A seekable stream
    is left at its start.
    """
    import zipfile

    try:
        if hasattr(path_or_file, "read"):
            start = path_or_file.tell()
            try:
                with zipfile.ZipFile(path_or_file) as zf:
                    return "format.npy" in zf.namelist()
            finally:
                path_or_file.seek(start)
        from lattice.io import storage

        with storage.open_read(path_or_file) as f, zipfile.ZipFile(f) as zf:  # a URL: ranged reads
            return "format.npy" in zf.namelist()
    except (OSError, AttributeError, *HOSTILE_ERRORS):
        return False


def read_sparse(path_or_file: PathOrFile) -> SparseFile:
    """Read and validate a ``lattice.sparse/1`` NPZ; every problem is a one-line ``PointCloudError``."""
    with open_input(path_or_file) as (f, label), reading(label, "sparse NPZ"):
        arrays = load_npz(f, label)
        _check_stored(arrays, label)
        raw = SparseFile(
            arrays["coords"],
            arrays["feats"],
            arrays["stride"],
            arrays["voxel_size"],
            arrays["origin"],
            arrays["feature_names"].tolist(),
            schema=_text(arrays, "attributes"),
            provenance=_text(arrays, "provenance"),
            source=_text(arrays, "source"),
            centroids=arrays.get("centroids"),
        )
        return _validated(raw, label)
