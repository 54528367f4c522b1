"""Sparse-tensor files in, sparse-tensor files out: local pooling and upsampling.

``pool_sparse`` / ``upsample_sparse`` take and return ``lattice.io.SparseFile`` (NumPy
arrays plus stride, voxel size, origin and feature names) and call one op of
``lattice.ops`` on a ``SparseTensor``; ``pool_file`` / ``upsample_file`` add the reading
and the (atomic) writing, in the format of the output's extension (``lattice.pipeline.export``).

Channels the file's schema marks categorical (class ids) are never averaged: pooling
gives each coarse voxel the mode of the fine voxels that reach it (ties to the smallest
value), whatever ``mode``; upsampling gives each fine voxel its coarse parent's value
(``floor(coords / stride)``), or the op's result rounded where an explicit target row has
no parent. The schema, source record and provenance travel with the result.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from typing import BinaryIO

import mlx.core as mx
import numpy as np

from lattice.core import SparseTensor
from lattice.io import SparseFile, read_sparse
from lattice.pipeline.export import output_format as output_format_of
from lattice.pipeline.export import write_result
from lattice.pipeline.provenance import make_record

POOL_MODES = ("sum", "max", "avg")
UPSAMPLE_METHODS = ("trilinear", "transpose")
PathOrStream = str | os.PathLike | BinaryIO


def _ints(value, name: str) -> tuple[int, int, int]:
    a = np.asarray(value).reshape(-1)
    if a.size == 1:
        a = np.repeat(a, 3)
    if a.size != 3 or a.dtype.kind not in "iu" or np.any(a <= 0):
        raise ValueError(f"{name} must be one or three positive integers, got {np.asarray(value).tolist()}")
    return tuple(int(v) for v in a)


def to_tensor(sf: SparseFile) -> SparseTensor:
    """A float32 ``SparseTensor`` with the file's coordinates, features and stride."""
    return SparseTensor(mx.array(sf.coords), mx.array(sf.feats.astype(np.float32)), tuple(sf.stride.tolist()))


def from_tensor(t: SparseTensor, like: SparseFile) -> SparseFile:
    """A ``SparseFile`` of ``t``'s live rows, with ``like``'s voxel size, origin, feature names,
    schema and source record (centroids do not survive a change of support)."""
    n = t.active_count
    return SparseFile(
        np.asarray(t.coords[:n]).astype(np.int32),
        np.asarray(t.feats[:n]).astype(np.float32),
        np.asarray(t.stride, np.int32),
        like.voxel_size.copy(),
        like.origin.copy(),
        like.feature_names,
        schema=like.schema,
        source=like.source,
    )


def _categorical(sf: SparseFile) -> list[int]:
    """The channels the schema marks categorical."""
    return [j for j, info in enumerate(sf.schema or ()) if info.kind == "categorical"]


def _pool_modes(x: SparseTensor, out: SparseFile, sf: SparseFile, k, s) -> SparseFile:
    """``out`` with every categorical channel the mode over the pooling relation's edges."""
    from lattice.core.modes import ModeAccumulator
    from lattice.ops import kernel_relation

    cats = _categorical(sf)
    if not cats or out.num_rows == 0:
        return out
    rel = kernel_relation(x, kernel_size=k, stride=s)
    if not np.array_equal(np.asarray(rel.out_table), out.coords):
        raise RuntimeError("[pool] the pooling relation's output rows differ from the pooled tensor's")
    edges = rel.grouped_edges
    rows_in, rows_out = np.asarray(edges.in_rows), np.asarray(edges.out_rows)
    feats = out.feats.copy()
    for j in cats:
        acc = ModeAccumulator(sf.feats.dtype)
        acc.add(rows_out, sf.feats[rows_in, j], out.num_rows)
        feats[:, j] = acc.result(out.num_rows)
    return replace(out, feats=feats)


def _parent_values(out: SparseFile, sf: SparseFile, stride) -> SparseFile:
    """``out`` with every categorical channel its coarse parent's value (rounded op result without one)."""
    cats = _categorical(sf)
    if not cats or out.num_rows == 0:
        return out
    parents = out.coords.copy()
    parents[:, 1:] = np.floor_divide(parents[:, 1:], np.asarray(stride, np.int32))
    order = np.lexsort(sf.coords.T[::-1])
    keys = sf.coords[order]
    pos = _find_rows(keys, parents)
    found = pos >= 0
    feats = out.feats.copy()
    for j in cats:
        col = np.rint(feats[:, j])
        col[found] = sf.feats[order[pos[found]], j]
        feats[:, j] = col
    return replace(out, feats=feats)


def _find_rows(sorted_rows: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """Index of each query row in the lexicographically sorted ``sorted_rows``, or -1."""
    if len(sorted_rows) == 0:
        return np.full(len(queries), -1, np.int64)
    view = lambda a: np.ascontiguousarray(a.astype(np.int64)).view([("", np.int64)] * 4).ravel()  # noqa: E731
    s, q = view(sorted_rows), view(queries)
    pos = np.searchsorted(s, q)
    pos = np.minimum(pos, len(s) - 1)
    return np.where(s[pos] == q, pos, -1)


def _summary(op: str, sf: SparseFile, out: SparseFile, t0: float, **extra) -> dict:
    return {
        "op": op,
        "rows_in": sf.num_rows,
        "rows_out": out.num_rows,
        "channels": out.num_channels,
        "feature_names": list(out.feature_names),
        "stride_in": sf.stride.tolist(),
        "stride_out": out.stride.tolist(),
        **extra,
        "seconds": round(time.perf_counter() - t0, 4),
    }


def pool_sparse(sf: SparseFile, mode: str = "max", kernel_size=2, stride=2) -> tuple[SparseFile, dict]:
    """Local sparse pooling (``lattice.ops.pool3d``); the output stride is ``sf.stride * stride``."""
    from lattice.ops import pool3d

    if mode not in POOL_MODES:
        raise ValueError(f"pool mode must be one of {', '.join(POOL_MODES)}, got {mode!r}")
    k, s = _ints(kernel_size, "kernel size"), _ints(stride, "stride")
    t0 = time.perf_counter()
    x = to_tensor(sf)
    y = pool3d(x, mode=mode, kernel_size=k, stride=s)
    out = _pool_modes(x, from_tensor(y, sf), sf, k, s)
    cats = [sf.feature_names[j] for j in _categorical(sf)]
    return out, _summary(
        "pool", sf, out, t0, mode=mode, kernel_size=list(k), stride=list(s), mode_channels=cats
    )


def upsample_sparse(
    sf: SparseFile,
    stride=2,
    *,
    target: SparseFile | None = None,
    method: str = "trilinear",
    kernel_size=None,
) -> tuple[SparseFile, dict]:
    """Upsample to stride ``sf.stride / stride`` onto generated support or ``target``'s rows.

    ``trilinear``: ``lattice.ops.trilinear_upsample3d`` (normalised separable linear
    interpolation). ``transpose``: ``lattice.ops.pool_transpose3d`` (contributor average;
    ``kernel_size`` defaults to ``stride``). A target must have the same voxel size and
    origin; its features are ignored, its rows and their order are kept.
    """
    from lattice.ops import pool_transpose3d, trilinear_upsample3d

    if method not in UPSAMPLE_METHODS:
        raise ValueError(f"upsample method must be one of {', '.join(UPSAMPLE_METHODS)}, got {method!r}")
    s = _ints(stride, "stride")
    k = s if kernel_size is None else _ints(kernel_size, "kernel size")
    if method == "trilinear" and kernel_size is not None:
        raise ValueError("kernel size applies to the transpose method only (trilinear uses 2 * stride - 1)")
    tgt = None
    if target is not None:
        if not (np.allclose(target.voxel_size, sf.voxel_size) and np.allclose(target.origin, sf.origin)):
            raise ValueError(
                f"target voxel size {target.voxel_size.tolist()} and origin {target.origin.tolist()} differ "
                f"from the input's {sf.voxel_size.tolist()} and {sf.origin.tolist()}"
            )
        tgt = SparseTensor(
            mx.array(target.coords), mx.zeros((target.num_rows, 1)), tuple(target.stride.tolist())
        )
    t0 = time.perf_counter()
    x = to_tensor(sf)
    if method == "trilinear":
        y = trilinear_upsample3d(x, tgt, stride=s)
    else:
        y = pool_transpose3d(x, tgt, kernel_size=k, stride=s)
    out = _parent_values(from_tensor(y, sf), sf, s)
    extra = {"method": method, "stride": list(s), "target": target is not None}
    extra["parent_channels"] = [sf.feature_names[j] for j in _categorical(sf)]
    if method == "transpose":
        extra["kernel_size"] = list(k)
    return out, _summary("upsample", sf, out, t0, **extra)


def pool_parameters(mode: str, kernel_size, stride, position: str = "centre", output_format: str = "npz"):
    """What a ``pool_file`` output records as its parameters (a batch re-run compares them)."""
    k, s = _ints(kernel_size, "kernel size"), _ints(stride, "stride")
    return {"mode": mode, "kernel_size": list(k), "stride": list(s), "position": position,
            "output_format": output_format}  # fmt: skip


def pool_file(
    src: PathOrStream,
    dst: PathOrStream,
    *,
    mode: str,
    kernel_size=2,
    stride=2,
    output_format: str | None = None,
    position: str = "centre",
    sidecar: bool = False,
) -> dict:
    """Read a sparse NPZ, pool it (``pool_sparse``), write the result by ``dst``'s extension
    (or ``output_format``; see ``lattice.pipeline.export``); returns the summary."""
    fmt = output_format_of(dst, output_format)
    sf = read_sparse(src)
    out, summary = pool_sparse(sf, mode, kernel_size, stride)
    params = pool_parameters(mode, kernel_size, stride, position, fmt)
    return _write_recorded("pool", params, out, summary, src, dst, fmt, position, sidecar)


def upsample_file(
    src: PathOrStream,
    dst: PathOrStream,
    *,
    stride=2,
    target: str | os.PathLike | None = None,
    method: str = "trilinear",
    kernel_size=None,
    output_format: str | None = None,
    position: str = "centre",
    sidecar: bool = False,
) -> dict:
    """Read a sparse NPZ (and a target), upsample (``upsample_sparse``), write by ``dst``'s
    extension (or ``output_format``); returns the summary."""
    fmt = output_format_of(dst, output_format)
    sf = read_sparse(src)
    tgt = read_sparse(target) if target is not None else None
    out, summary = upsample_sparse(sf, stride, target=tgt, method=method, kernel_size=kernel_size)
    params = upsample_parameters(stride, target, method, kernel_size, position, fmt)
    return _write_recorded("upsample", params, out, summary, src, dst, fmt, position, sidecar)


def upsample_parameters(
    stride, target=None, method: str = "trilinear", kernel_size=None, position="centre", output_format="npz"
) -> dict:
    """What an ``upsample_file`` output records as its parameters."""
    k = None if kernel_size is None else list(_ints(kernel_size, "kernel size"))
    return {
        "stride": list(_ints(stride, "stride")),
        "target": None if target is None else _absolute(target),
        "method": method,
        "kernel_size": k,
        "position": position,
        "output_format": output_format,
    }


def _write_recorded(command, params, out, summary, src, dst, fmt, position, sidecar) -> dict:
    """Writes ``out`` to ``dst`` as ``fmt`` with its provenance (``command`` run with ``params``
    on ``src``) and completes ``summary`` with the input, the output and its format."""
    out = replace(out, provenance=make_record(command, params, src))
    summary["input"] = _label(src)
    summary["output"] = write_result(dst, out, format=fmt, position=position, sidecar=sidecar)
    summary["output_format"] = fmt
    return summary


def _absolute(location: str | os.PathLike) -> str:
    from lattice.io import storage

    return os.fspath(location) if storage.is_url(location) else os.path.abspath(storage.local_path(location))


def _label(src: PathOrStream) -> str:
    return "-" if hasattr(src, "read") else os.fspath(src)


__all__ = [
    "POOL_MODES",
    "UPSAMPLE_METHODS",
    "from_tensor",
    "pool_file",
    "pool_parameters",
    "pool_sparse",
    "to_tensor",
    "upsample_file",
    "upsample_parameters",
    "upsample_sparse",
]
