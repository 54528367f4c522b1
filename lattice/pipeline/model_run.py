"""``model_run_file``: read a point cloud, run a model bundle, write one label per point.

The output is the input cloud (points and attributes, in input order) plus:

- ``label`` int32 ``(N,)``: the class id of every point (the bundle's ignore id for
  points with a non-finite coordinate);
- ``red``/``green``/``blue``: the class colour (uint8; uint16 scaled by 257 for LAS/LAZ),
  replacing any input colour, unless ``colors=False``;
- ``probabilities`` float32 ``(N, K)`` with ``probabilities=True`` (PLY writes it as
  ``probabilities_0 … probabilities_{K-1}``, in the order of the bundle's classes);
- for LAS/LAZ, a fractional float ``intensity`` (KITTI's remission in [0, 1], which
  LAS's uint16 intensity cannot hold) is kept as the extra-bytes dimension ``remission``;
- the class table: PLY comments ``class <id> <name> <r> <g> <b>``; in NPZ a JSON string
  ``classes`` and ``class_names`` (K,). LAS and PCD carry the labels and colours only.

Outputs are PLY, NPZ, LAS/LAZ or PCD (KITTI / nuScenes ``.bin`` cannot hold labels),
written atomically. The summary has the time of every stage: read, voxelize, network,
map_back, write.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np

from lattice.io import PointCloud, format_from_name, read_points, write_points
from lattice.io._common import open_output
from lattice.io.npz import save_npz
from lattice.models import ModelBundle, Prediction, load_model, predict_cloud
from lattice.models.spec import Outputs

OUTPUT_FORMATS = ("ply", "npz", "las", "laz", "pcd")
QUANTIZE = {"int8": 8, "int4": 4}
PathOrStream = str | os.PathLike | BinaryIO


@functools.lru_cache(maxsize=4)
def cached_bundle(path: str, quantize: str | None = None) -> ModelBundle:
    """``load_model`` once per process for a bundle path and ``quantize`` (``int8``/``int4``/None)."""
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}")
    return load_model(path, quantize_bits=None if quantize is None else QUANTIZE[quantize])


def labelled_cloud(
    cloud: PointCloud, pred: Prediction, outputs: Outputs, *, colors: bool = True, fmt: str = "ply"
) -> PointCloud:
    """``cloud`` with ``label``, class colours and (if predicted) ``probabilities`` attributes."""
    attrs = dict(cloud.attributes)
    for name in ("label", "probabilities"):
        attrs.pop(name, None)
    attrs["label"] = pred.labels
    if colors:
        table = {c.id: c.color for c in (*outputs.classes, outputs.ignore)}
        ids = np.array(sorted(table), np.int64)
        palette = np.array([table[i] for i in ids], np.uint16)
        rgb = palette[np.searchsorted(ids, pred.labels)]
        rgb = rgb * 257 if fmt in ("las", "laz") else rgb.astype(np.uint8)
        for key in ("rgb", "rgba", "r", "g", "b"):
            attrs.pop(key, None)
        attrs.update(red=rgb[:, 0], green=rgb[:, 1], blue=rgb[:, 2])
    if pred.probabilities is not None:
        attrs["probabilities"] = pred.probabilities
    if fmt in ("las", "laz") and "remission" not in attrs:
        v = np.asarray(attrs.get("intensity", np.zeros(0, np.uint16)))
        if v.dtype.kind == "f" and np.any(v != np.round(v)):  # KITTI's float remission: not LAS's uint16
            attrs["remission"] = attrs.pop("intensity")
    meta = dict(cloud.metadata) if cloud.format == fmt else {}
    if fmt == "ply":
        rows = [
            f"class {c.id} {c.name} {' '.join(map(str, c.color))}" for c in (*outputs.classes, outputs.ignore)
        ]
        meta["comments"] = [*meta.get("comments", []), "lattice model-run labels", *rows]
    return PointCloud(cloud.points, attrs, format=fmt, metadata=meta)


def resolve_output_format(dst: PathOrStream, requested: str | None) -> str:
    """The format to write: ``requested``, else the path's extension, else NPZ for a stream."""
    fmt = requested
    if fmt is None and not hasattr(dst, "write"):
        fmt = format_from_name(os.fspath(dst))
        if fmt is None:
            raise ValueError(
                f"{os.fspath(dst)}: cannot tell the output format from the extension; "
                f"use one of .{', .'.join(OUTPUT_FORMATS)} or --output-format"
            )
    fmt = (fmt or "npz").lower()
    if fmt not in OUTPUT_FORMATS:
        raise ValueError(
            f"model-run writes {', '.join(OUTPUT_FORMATS)} (formats that hold per-point labels), got {fmt!r}"
        )
    return fmt


def write_labelled(dst: PathOrStream, cloud: PointCloud, outputs: Outputs, fmt: str) -> str:
    """Write a :func:`labelled_cloud` result atomically; NPZ also gets the class table."""
    if fmt == "npz":
        classes = [c.to_json() for c in (*outputs.classes, outputs.ignore)]
        arrays = {
            "points": cloud.points,
            **cloud.attributes,
            "classes": np.array(json.dumps(classes)),
            "class_names": np.array(outputs.names),
        }
        with open_output(dst) as f:
            save_npz(f, arrays)
    else:
        write_points(dst, cloud, format=fmt)
    return "-" if hasattr(dst, "write") else os.fspath(dst)


def class_counts(labels: np.ndarray, outputs: Outputs) -> dict[str, int]:
    """Points per class name, most frequent first (classes with no points left out)."""
    names = {c.id: c.name for c in (*outputs.classes, outputs.ignore)}
    ids, counts = np.unique(labels, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return {names.get(int(ids[i]), str(int(ids[i]))): int(counts[i]) for i in order}


def model_run_file(
    src: PathOrStream,
    dst: PathOrStream,
    *,
    model: ModelBundle | str | os.PathLike,
    quantize: str | None = None,
    format: str | None = None,
    columns: str | Sequence[str] | None = None,
    output_format: str | None = None,
    probabilities: bool = False,
    colors: bool = True,
    interpolation: str | None = None,
    device: str | None = None,
) -> dict:
    """Read ``src``, run the bundle (a ``ModelBundle`` or a bundle path), write ``dst``; returns the summary."""
    t_start = time.perf_counter()
    bundle = model if isinstance(model, ModelBundle) else cached_bundle(os.fspath(model), quantize)
    fmt = resolve_output_format(dst, output_format)
    t0 = time.perf_counter()
    cloud = read_points(src, format=format, columns=columns)
    t_read = time.perf_counter() - t0
    pred = predict_cloud(
        bundle, cloud, probabilities=probabilities, interpolation=interpolation, device=device
    )
    t0 = time.perf_counter()
    out = labelled_cloud(cloud, pred, bundle.outputs, colors=colors, fmt=fmt)
    written = write_labelled(dst, out, bundle.outputs, fmt)
    t_write = time.perf_counter() - t0
    timings = {"read": t_read, **pred.timings, "write": t_write, "total": time.perf_counter() - t_start}
    return {
        "input": "-" if hasattr(src, "read") else os.fspath(src),
        "output": written,
        "output_format": fmt,
        "model": bundle.name,
        "quantization": None if bundle.quantization is None else f"int{bundle.quantization.bits}",
        "points": len(cloud),
        "voxels": pred.num_voxels,
        "nonfinite_points": pred.nonfinite,
        "interpolation": interpolation or bundle.outputs.interpolation,
        "probabilities": probabilities,
        "classes": class_counts(pred.labels, bundle.outputs),
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "seconds": round(timings["total"], 4),
    }


__all__ = [
    "OUTPUT_FORMATS",
    "QUANTIZE",
    "cached_bundle",
    "class_counts",
    "labelled_cloud",
    "model_run_file",
    "resolve_output_format",
    "write_labelled",
]
