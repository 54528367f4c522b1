"""What ``model-run`` adds to a cloud: prediction fields beside the input's own, never over them.

Fields (``FieldOptions`` chooses which):

- ``pred_label`` int32 (``label_field`` renames it): the class id of every point;
- ``pred_class`` (NPZ only, the one format here with strings): the class name of every point;
- ``pred_prob_<class>`` float32, one per class, with ``probabilities`` (the class name with
  every character other than a letter, digit or ``_`` made ``_``: ``pred_prob_other_vehicle``);
- with ``colorize``: the class colour as ``pred_red``/``pred_green``/``pred_blue`` uint8, or as
  ``red``/``green``/``blue`` when the input has no colour (uint16 x 257 in LAS/LAZ);
- with ``to_classification`` (LAS/LAZ only): ``classification``, the ASPRS code of each
  point's class (``Outputs.asprs_map``; 1, unclassified, for a class without a code).

Every input attribute is kept. A field that already exists in the input is written over
only with ``replace_field`` (``classification`` only with ``to_classification``, which asks
for it by name); otherwise :func:`plan_fields` raises a one-line ``ValueError``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from lattice.io import PointCloud
from lattice.models import Outputs, Prediction

DEFAULT_LABEL_FIELD = "pred_label"
CLASS_FIELD = "pred_class"
PROB_PREFIX = "pred_prob_"
PRED_COLOURS = ("pred_red", "pred_green", "pred_blue")
RGB = ("red", "green", "blue")
LAS_FORMATS = ("las", "laz")
_RESERVED = ("x", "y", "z", "points", "classes", "class_names")


@dataclass(frozen=True)
class FieldOptions:
    """Which prediction fields ``model-run`` writes and whether it may write over input attributes."""

    label_field: str = DEFAULT_LABEL_FIELD
    replace_field: bool = False
    probabilities: bool = False
    colorize: bool = False
    to_classification: bool = False

    def __post_init__(self) -> None:
        name = self.label_field
        if not isinstance(name, str) or not name or any(ch.isspace() for ch in name) or name in _RESERVED:
            raise ValueError(
                f"--label-field must be a non-empty name without spaces, not one of {list(_RESERVED)}, "
                f"got {name!r}"
            )


@dataclass(frozen=True)
class FieldPlan:
    """The fields a run writes (in order) and those of them that replace an input attribute."""

    written: tuple[str, ...]
    replaced: tuple[str, ...]


def prob_field(class_name: str) -> str:
    """``pred_prob_<class>`` with the class name made a portable field name."""
    return PROB_PREFIX + re.sub(r"[^0-9A-Za-z_]", "_", class_name)


def has_colour(cloud: PointCloud) -> bool:
    """True when the input carries any colour channel (then class colours go to ``pred_*``)."""
    return any(c in cloud.attributes for c in RGB)


def plan_fields(cloud: PointCloud, outputs: Outputs, opts: FieldOptions, fmt: str) -> FieldPlan:
    """The fields to write for ``cloud``; a ``ValueError`` if one exists and may not be replaced."""
    if opts.to_classification and fmt not in LAS_FORMATS:
        raise ValueError(f"--to-classification writes the LAS/LAZ classification field; the output is {fmt}")
    names = [opts.label_field]
    if fmt == "npz":
        names.append(CLASS_FIELD)
    if opts.probabilities:
        names += [prob_field(n) for n in outputs.names]
    if opts.colorize:
        names += PRED_COLOURS if has_colour(cloud) else RGB
    if opts.to_classification:
        names.append("classification")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"model-run would write {repeated} twice; choose another --label-field")
    replaced = tuple(n for n in names if n in cloud.attributes)
    blocked = [n for n in replaced if not (n == "classification" and opts.to_classification)]
    if blocked and not opts.replace_field:
        raise ValueError(
            f"the input already has {', '.join(repr(n) for n in blocked)}; model-run adds fields and writes over "
            f"an input attribute only with --replace-field (or choose another name with --label-field NAME)"
        )
    return FieldPlan(tuple(names), replaced)


def class_colours(labels: np.ndarray, outputs: Outputs) -> np.ndarray:
    """uint8 ``(N, 3)``: the colour of each label's class (the ignore class's for unknown ids)."""
    table = {c.id: c.color for c in (*outputs.classes, outputs.ignore)}
    ids = np.array(sorted(table), np.int64)
    palette = np.array([table[i] for i in ids], np.uint8)
    pos = np.clip(np.searchsorted(ids, labels), 0, len(ids) - 1)
    known = ids[pos] == labels
    return np.where(known[:, None], palette[pos], np.array(outputs.ignore.color, np.uint8))


def asprs_classes(labels: np.ndarray, outputs: Outputs) -> np.ndarray:
    """uint8 ``(N,)``: the ASPRS LAS code of each label's class (1, unclassified, for unknown ids)."""
    table = outputs.asprs_map
    ids = np.array(sorted(table), np.int64)
    codes = np.array([table[i] for i in ids], np.uint8)
    pos = np.clip(np.searchsorted(ids, labels), 0, len(ids) - 1)
    return np.where(ids[pos] == labels, codes[pos], np.uint8(1)).astype(np.uint8)


def class_names_of(labels: np.ndarray, outputs: Outputs) -> np.ndarray:
    """Unicode ``(N,)``: the class name of each label (``pred_class``; the id as text if unknown)."""
    names = {c.id: c.name for c in (*outputs.classes, outputs.ignore)}
    ids, inverse = np.unique(labels, return_inverse=True)
    return np.array([names.get(int(i), str(int(i))) for i in ids], dtype=str)[inverse.reshape(-1)]


def prediction_fields(
    cloud: PointCloud, pred: Prediction, outputs: Outputs, opts: FieldOptions, fmt: str
) -> dict[str, np.ndarray]:
    """The numeric fields of :func:`plan_fields` (everything but ``pred_class``), by name."""
    out: dict[str, np.ndarray] = {opts.label_field: pred.labels.astype(np.int32)}
    if opts.probabilities and pred.probabilities is not None:
        for k, name in enumerate(outputs.names):
            out[prob_field(name)] = np.ascontiguousarray(pred.probabilities[:, k], dtype=np.float32)
    if opts.colorize:
        rgb = class_colours(pred.labels, outputs)
        if has_colour(cloud):
            out.update(zip(PRED_COLOURS, np.ascontiguousarray(rgb.T), strict=True))
        else:
            rgb = rgb.astype(np.uint16) * 257 if fmt in LAS_FORMATS else rgb
            out.update(zip(RGB, np.ascontiguousarray(rgb.T), strict=True))
    if opts.to_classification:
        out["classification"] = asprs_classes(pred.labels, outputs)
    return out


__all__ = [
    "CLASS_FIELD",
    "DEFAULT_LABEL_FIELD",
    "LAS_FORMATS",
    "PRED_COLOURS",
    "PROB_PREFIX",
    "FieldOptions",
    "FieldPlan",
    "asprs_classes",
    "class_colours",
    "class_names_of",
    "has_colour",
    "plan_fields",
    "prediction_fields",
    "prob_field",
]
