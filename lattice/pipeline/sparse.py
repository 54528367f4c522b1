"""Sparse-tensor files in, sparse-tensor files out: local pooling and upsampling.

``pool_sparse`` / ``upsample_sparse`` take and return ``lattice.io.SparseFile`` (NumPy
arrays plus stride, voxel size, origin and feature names) and call one op of
``lattice.ops`` on a ``SparseTensor``; ``pool_file`` / ``upsample_file`` add the reading
and the (atomic) writing.
"""

from __future__ import annotations

import os
import time
from typing import BinaryIO

import mlx.core as mx
import numpy as np

from lattice.core import SparseTensor
from lattice.io import SparseFile, read_sparse
from lattice.pipeline.voxelize import write_sparse_file

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
    """A ``SparseFile`` of ``t``'s live rows, with ``like``'s voxel size, origin and feature names."""
    n = t.active_count
    return SparseFile(
        np.asarray(t.coords[:n]).astype(np.int32),
        np.asarray(t.feats[:n]).astype(np.float32),
        np.asarray(t.stride, np.int32),
        like.voxel_size.copy(),
        like.origin.copy(),
        like.feature_names,
    )


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
    y = pool3d(to_tensor(sf), mode=mode, kernel_size=k, stride=s)
    out = from_tensor(y, sf)
    return out, _summary("pool", sf, out, t0, mode=mode, kernel_size=list(k), stride=list(s))


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
    out = from_tensor(y, sf)
    extra = {"method": method, "stride": list(s), "target": target is not None}
    if method == "transpose":
        extra["kernel_size"] = list(k)
    return out, _summary("upsample", sf, out, t0, **extra)


def pool_file(src: PathOrStream, dst: PathOrStream, *, mode: str, kernel_size=2, stride=2) -> dict:
    """Read a sparse NPZ, pool it (``pool_sparse``), write the result; returns the summary."""
    sf = read_sparse(src)
    out, summary = pool_sparse(sf, mode, kernel_size, stride)
    summary["input"] = _label(src)
    summary["output"] = write_sparse_file(dst, out)
    return summary


def upsample_file(
    src: PathOrStream,
    dst: PathOrStream,
    *,
    stride=2,
    target: str | os.PathLike | None = None,
    method: str = "trilinear",
    kernel_size=None,
) -> dict:
    """Read a sparse NPZ (and a target), upsample (``upsample_sparse``), write; returns the summary."""
    sf = read_sparse(src)
    tgt = read_sparse(target) if target is not None else None
    out, summary = upsample_sparse(sf, stride, target=tgt, method=method, kernel_size=kernel_size)
    summary["input"] = _label(src)
    summary["output"] = write_sparse_file(dst, out)
    return summary


def _label(src: PathOrStream) -> str:
    return "-" if hasattr(src, "read") else os.fspath(src)


__all__ = [
    "POOL_MODES",
    "UPSAMPLE_METHODS",
    "from_tensor",
    "pool_file",
    "pool_sparse",
    "to_tensor",
    "upsample_file",
    "upsample_sparse",
]
