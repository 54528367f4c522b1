"""``model_run_file``: read a point cloud, run a model bundle, write the cloud with its predictions.

The output is the input cloud, every attribute kept (colours and an input ``label`` or
``classification`` included), in input order, plus the prediction fields of
:mod:`lattice.pipeline.model_fields`: ``pred_label`` (int32 class id; the bundle's ignore id
for points with a non-finite coordinate), ``pred_class`` names in NPZ,
``pred_prob_<class>`` with ``probabilities``, class colours with ``colorize`` and, for
LAS/LAZ with ``to_classification``, ASPRS codes in ``classification``. Writing over an
input attribute needs ``replace_field``.

Before the network runs, the input is compared with the bundle's training ``domain``
(:func:`lattice.models.check_domain`); the summary lists what is far outside as
``domain_warnings``, and ``strict_domain`` turns any into a :class:`DomainError` with
nothing written.

Also: for LAS/LAZ, a fractional float ``intensity`` (KITTI's remission in [0, 1], which
LAS's uint16 intensity cannot hold) is kept as the extra-bytes dimension ``remission``;
the class table goes to PLY comments ``class <id> <name> <r> <g> <b>`` (in LAS/LAZ, the same
lines in lattice's comments VLR) and, in NPZ, to a
JSON string ``classes`` and ``class_names`` (K,).

Outputs are PLY, NPZ, LAS/LAZ or PCD (KITTI / nuScenes ``.bin`` cannot hold labels),
written atomically. The summary has the time of every stage: read, domain, voxelize,
network, map_back, write.
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
from lattice.io._common import open_output, output_label
from lattice.io.npz import save_npz
from lattice.models import ModelBundle, Prediction, check_domain, load_model, predict_cloud
from lattice.models.spec import Outputs
from lattice.pipeline.model_fields import (
    CLASS_FIELD,
    LAS_FORMATS,
    FieldOptions,
    class_names_of,
    plan_fields,
    prediction_fields,
)
from lattice.pipeline.provenance import make_record, write_sidecar

OUTPUT_FORMATS = ("ply", "npz", "las", "laz", "pcd")
QUANTIZE = {"int8": 8, "int4": 4}
PathOrStream = str | os.PathLike | BinaryIO


class DomainError(ValueError):
    """An input outside the bundle's training domain with ``strict_domain``: nothing was written."""

    def __init__(self, source: str, warnings: tuple[str, ...]):
        self.warnings = warnings
        super().__init__(
            f"{source}: outside the model's training domain ({len(warnings)} statistics far off, "
            f"first: {warnings[0]}); nothing written (--strict-domain)"
        )


def cached_bundle(path: str, quantize: str | None = None) -> ModelBundle:
    """``load_model`` once per process (a batch worker loads a bundle once, not per file) for
    a bundle path, ``quantize`` (``int8``/``int4``/None) and the size and modification time of
    its files: a bundle rewritten at the same path is loaded again."""
    if quantize is not None and quantize not in QUANTIZE:
        raise ValueError(f"quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}")
    return _load_bundle(path, quantize, _bundle_stamp(path))


def _bundle_stamp(path: str) -> tuple:
    stamp = []
    for name in ("model.json", "weights.safetensors"):
        try:
            st = os.stat(os.path.join(path, name))
            stamp.append((st.st_size, st.st_mtime_ns))
        except OSError:
            stamp.append(None)
    return tuple(stamp)


@functools.lru_cache(maxsize=4)
def _load_bundle(path: str, quantize: str | None, stamp: tuple) -> ModelBundle:  # noqa: ARG001 (the key)
    return load_model(path, quantize_bits=None if quantize is None else QUANTIZE[quantize])


def labelled_cloud(
    cloud: PointCloud, pred: Prediction, outputs: Outputs, opts: FieldOptions, fmt: str = "ply"
) -> PointCloud:
    """``cloud`` with the numeric prediction fields added (the caller checked them with ``plan_fields``)."""
    attrs = {**cloud.attributes, **prediction_fields(cloud, pred, outputs, opts, fmt)}
    if fmt in LAS_FORMATS and "remission" not in attrs:
        v = np.asarray(attrs.get("intensity", np.zeros(0, np.uint16)))
        if v.dtype.kind == "f" and np.any(v != np.round(v)):  # KITTI's float remission: not LAS's uint16
            attrs = {("remission" if k == "intensity" else k): a for k, a in attrs.items()}
    same = cloud.format == fmt or {cloud.format, fmt} <= {"las", "laz"}  # a LAS header fits LAZ too
    meta = dict(cloud.metadata) if same else {}
    if fmt == "ply" or fmt in LAS_FORMATS:  # PLY comments; LAS: lattice's comments VLR
        meta["comments"] = with_class_table(meta.get("comments", []), opts.label_field, outputs)
    kinds = {k: v for k, v in cloud.kinds.items() if k in attrs}
    return PointCloud(cloud.points, attrs, format=fmt, metadata=meta, kinds=kinds)


def with_class_table(comments: list, field: str, outputs: Outputs) -> list[str]:
    """``comments`` with the class table of ``field`` (``lattice model-run labels: FIELD`` and a
    ``class ID NAME R G B`` row per class) at the end; an earlier table of that field, as a
    re-run over its own output carries, is replaced rather than repeated."""
    head = f"lattice model-run labels: {field}"
    kept, in_old = [], False
    for line in map(str, comments):
        in_old = line == head or (in_old and line.startswith("class "))
        if not in_old:
            kept.append(line)
    rows = [
        f"class {c.id} {c.name} {' '.join(map(str, c.color))}" for c in (*outputs.classes, outputs.ignore)
    ]
    return [*kept, head, *rows]


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


def write_labelled(
    dst: PathOrStream, cloud: PointCloud, outputs: Outputs, fmt: str, class_names: np.ndarray | None = None
) -> str:
    """Write a :func:`labelled_cloud` result atomically; NPZ also gets ``pred_class`` and the class table."""
    if fmt == "npz":
        classes = [c.to_json() for c in (*outputs.classes, outputs.ignore)]
        names = {} if class_names is None else {CLASS_FIELD: class_names}
        arrays = {
            "points": cloud.points,
            **cloud.attributes,
            **names,
            "classes": np.array(json.dumps(classes)),
            "class_names": np.array(outputs.names),
        }
        with open_output(dst) as f:
            save_npz(f, arrays)
    else:
        write_points(dst, cloud, format=fmt)
    return output_label(dst)


def class_counts(labels: np.ndarray, outputs: Outputs) -> dict[str, int]:
    """Points per class name, most frequent first (classes with no points left out)."""
    names = {c.id: c.name for c in (*outputs.classes, outputs.ignore)}
    ids, counts = np.unique(labels, return_counts=True)
    order = np.argsort(-counts, kind="stable")
    return {names.get(int(ids[i]), str(int(ids[i]))): int(counts[i]) for i in order}


def _run(bundle: ModelBundle, cloud: PointCloud, dst, fmt, opts, strict_domain, label, **predict_kw):
    """Plan the fields, check the domain, predict, write; returns (summary parts, timings)."""
    plan = plan_fields(cloud, bundle.outputs, opts, fmt)
    t0 = time.perf_counter()
    warnings = check_domain(cloud, bundle.domain, bundle.preprocessing)
    t_domain = time.perf_counter() - t0
    if warnings and strict_domain:
        raise DomainError(label, warnings)
    pred = predict_cloud(bundle, cloud, probabilities=opts.probabilities, **predict_kw)
    t0 = time.perf_counter()
    out = labelled_cloud(cloud, pred, bundle.outputs, opts, fmt)
    names = class_names_of(pred.labels, bundle.outputs) if fmt == "npz" else None
    written = write_labelled(dst, out, bundle.outputs, fmt, names)
    timings = {"domain": t_domain, **pred.timings, "write": time.perf_counter() - t0}
    parts = {
        "output": written,
        "voxels": pred.num_voxels,
        "nonfinite_points": pred.nonfinite,
        "label_field": opts.label_field,
        "replaced_field": opts.label_field if opts.label_field in plan.replaced else None,
        "written_fields": list(plan.written),
        "replaced_fields": list(plan.replaced),
        "domain_checked": bundle.domain is not None,
        "domain_warnings": list(warnings),
        "classes": class_counts(pred.labels, bundle.outputs),
    }
    return parts, timings


_RECORDED = (  # the model_run_file options that change an output (its provenance records them)
    "quantize", "probabilities", "label_field", "replace_field", "colorize", "to_classification",
    "strict_domain", "interpolation", "device",
)  # fmt: skip


def model_run_parameters(*, model: str | os.PathLike, output_format: str = "npz", **options) -> dict:
    """What a ``model_run_file`` output records as its parameters: the bundle (its path and the
    weights' sha256 from model.json, so a retrained bundle at the same path is not mistaken for
    the old one) and every option that changes the output."""
    path = os.path.abspath(os.fspath(model))
    try:
        with open(os.path.join(path, "model.json"), encoding="utf-8") as f:
            weights = json.load(f).get("weights", {})
        digest = weights.get("sha256") if isinstance(weights, dict) else None
    except (OSError, ValueError, AttributeError):
        digest = None
    return {
        "model": path,
        "weights_sha256": digest,
        "output_format": output_format,
        **dict(sorted(options.items())),
    }


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
    label_field: str = "pred_label",
    replace_field: bool = False,
    colorize: bool = False,
    to_classification: bool = False,
    strict_domain: bool = False,
    interpolation: str | None = None,
    device: str | None = None,
    sidecar: bool = False,
) -> dict:
    """Read ``src``, run the bundle (a ``ModelBundle`` or a bundle path), write ``dst``; returns the summary.

    ``sidecar`` (batch mode): record the parameters beside the output
    (``<dst>.lattice.json``, see ``lattice.pipeline.provenance``), so a re-run with the same
    bundle and options skips it.

    Raises ``ValueError`` for a field that exists without ``replace_field``, for
    ``to_classification`` with a non-LAS output, and :class:`DomainError` for an input
    outside the training domain with ``strict_domain`` (nothing is written then).
    """
    t_start = time.perf_counter()
    bundle = model if isinstance(model, ModelBundle) else cached_bundle(os.fspath(model), quantize)
    fmt = resolve_output_format(dst, output_format)
    opts = FieldOptions(label_field, replace_field, probabilities, colorize, to_classification)
    label = "-" if hasattr(src, "read") else os.fspath(src)
    t0 = time.perf_counter()
    cloud = read_points(src, format=format, columns=columns)
    t_read = time.perf_counter() - t0
    parts, stage_times = _run(
        bundle, cloud, dst, fmt, opts, strict_domain, label, interpolation=interpolation, device=device
    )
    timings = {"read": t_read, **stage_times, "total": time.perf_counter() - t_start}
    if sidecar and not hasattr(dst, "write") and not isinstance(model, ModelBundle):
        arguments = locals()  # this call's own arguments, by name
        options = {k: arguments[k] for k in _RECORDED}
        params = model_run_parameters(model=os.fspath(model), output_format=fmt, **options)
        write_sidecar(dst, make_record("model-run", params, src))
    return {
        "input": label,
        "output_format": fmt,
        "model": bundle.name,
        "quantization": None if bundle.quantization is None else f"int{bundle.quantization.bits}",
        "points": len(cloud),
        "interpolation": interpolation or bundle.outputs.interpolation,
        "probabilities": probabilities,
        **parts,
        "timings": {k: round(v, 4) for k, v in timings.items()},
        "seconds": round(timings["total"], 4),
    }


__all__ = [
    "OUTPUT_FORMATS",
    "QUANTIZE",
    "DomainError",
    "cached_bundle",
    "class_counts",
    "labelled_cloud",
    "model_run_file",
    "model_run_parameters",
    "resolve_output_format",
    "write_labelled",
]
