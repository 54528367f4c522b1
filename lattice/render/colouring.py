"""What a picture's colours show, chosen from the data or asked for with ``--color``.

``auto`` (the default) takes the first that the cloud has, skipping one whose values are
all the same when another is left:

1. a class field, the first of ``LABEL_FIELDS`` (``pred_label`` of ``lattice model-run``
   output, ``label``, LAS ``classification``), with class names and colours: from the model
   bundle's table (the ``class ID NAME R G B`` comments ``model-run`` writes to PLY), the
   ASPRS standard names and palette for ``classification``, the SemanticKITTI palette for
   its class names, else the ids with a qualitative palette;
2. colours (``red``/``green``/``blue``, packed ``rgb``);
3. ``intensity`` (or ``remission``, ``reflectance``);
4. height along the up axis.

Other specs: ``label``, ``rgb``, ``intensity``, ``height``, ``feature:NAME`` (any numeric
attribute or sparse-tensor channel; a categorical one is drawn as classes, others on a
colour ramp), ``feature:N`` (the N-th numeric attribute), or a bare attribute name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lattice.io import ASPRS_CLASSES, PointCloud, asprs_class_name
from lattice.io.kinds import info_for
from lattice.render.palettes import ASPRS_COLOURS, RGB, SEMANTICKITTI, class_colours, ramp

COLOR_MODES = ("auto", "label", "rgb", "intensity", "height")
LABEL_FIELDS = ("pred_label", "label", "classification")
INTENSITY_FIELDS = ("intensity", "remission", "reflectance")
MAX_CLASSES = 1024  # a categorical attribute with more distinct values is drawn on a ramp


@dataclass(frozen=True)
class LabelInfo:
    """Label id -> (name, RGB colour), read from ``class ID NAME R G B`` PLY comments."""

    names: dict[int, str]
    colors: dict[int, RGB]


@dataclass(frozen=True)
class LegendEntry:
    """One class of the legend: its id, name, colour and the number of points drawn."""

    id: int
    name: str
    color: RGB
    count: int


@dataclass(frozen=True, eq=False)
class Colouring:
    """Per-point colours and what they mean.

    ``kind``: ``"classes"`` (a legend), ``"scalar"`` (a colour bar from ``lo`` to ``hi``) or
    ``"rgb"`` (the file's colours). ``shown``: the text of titles and summaries
    (``label (pred_label)``, ``height (z)``). ``source``: where class names come from.
    """

    kind: str
    field: str
    shown: str
    colors: np.ndarray
    legend: tuple[LegendEntry, ...] = ()
    source: str = ""
    lo: float | None = None
    hi: float | None = None


def label_info(cloud: PointCloud) -> LabelInfo:
    """The class table of ``class ID NAME R G B`` comments (``lattice model-run`` PLY output)."""
    names, colors = {}, {}
    for line in cloud.metadata.get("comments", []) if cloud.metadata else []:
        parts = str(line).split()
        if len(parts) == 6 and parts[0] == "class" and parts[1].lstrip("-").isdigit():
            i = int(parts[1])
            names[i] = parts[2]
            colors[i] = tuple(int(v) for v in parts[3:6])
    return LabelInfo(names, colors)


def label_field(cloud: PointCloud) -> str | None:
    """The attribute ``--color label`` draws: the first of ``LABEL_FIELDS`` present, or None."""
    return next((name for name in LABEL_FIELDS if name in cloud.attributes), None)


def numeric_attributes(cloud: PointCloud) -> list[str]:
    """The 1-D numeric attributes (what ``feature:NAME`` can draw), in the file's order."""
    return [k for k, v in cloud.attributes.items() if v.ndim == 1 and v.dtype.kind in "biuf"]


def available(cloud: PointCloud) -> str:
    """What ``--color`` can draw for this cloud, for error messages."""
    field = label_field(cloud)
    out = [f"label ({field})"] if field else []
    out += ["rgb"] if cloud.colors() is not None else []
    out += [f"intensity ({n})" for n in INTENSITY_FIELDS if n in cloud.attributes][:1]
    out += ["height"]
    names = numeric_attributes(cloud)
    if names:
        out.append("feature:NAME for NAME in " + ", ".join(names))
    return "; ".join(out)


def _class_table(cloud: PointCloud, field: str) -> tuple[dict[int, str], dict[int, RGB], str]:
    """Names, colours and their source for the ids of ``field``."""
    info = label_info(cloud)
    comments = " ".join(str(c) for c in cloud.metadata.get("comments", []) or [])
    model = "lattice model-run labels:" in comments
    if info.names and field in ("pred_label", "label") and (model or field == "label"):
        colors = dict(info.colors)
        for i, name in info.names.items():
            if i not in colors and name in SEMANTICKITTI:
                colors[i] = SEMANTICKITTI[name]
        return info.names, colors, "model classes" if model else "file classes"
    if field == "classification":
        return dict(ASPRS_CLASSES), dict(ASPRS_COLOURS), "ASPRS classes"
    return {}, {}, "ids"


def _classes(cloud: PointCloud, field: str, shown: str) -> Colouring:
    values = np.asarray(cloud.attributes[field]).reshape(-1)
    ids_all = np.rint(np.nan_to_num(values.astype(np.float64), nan=-1)).astype(np.int64)
    ids, inverse, counts = np.unique(ids_all, return_inverse=True, return_counts=True)
    names, table, source = _class_table(cloud, field)
    palette = class_colours(ids, table)
    lut = np.array([palette[int(i)] for i in ids], np.uint8).reshape(-1, 3)
    legend = []
    for i, count in zip(ids.tolist(), counts.tolist(), strict=True):
        name = names.get(i) or (asprs_class_name(i) if field == "classification" else None)
        legend.append(LegendEntry(i, name or f"{field} {i}", palette[i], count))
    return Colouring("classes", field, shown, lut[inverse.reshape(-1)], tuple(legend), source)


def scalar(values: np.ndarray, field: str, shown: str) -> Colouring:
    """``values`` on the viridis ramp, scaled by their 2nd..98th percentiles."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    finite = v[np.isfinite(v)]
    lo, hi = (float(x) for x in np.percentile(finite, [2, 98])) if finite.size else (0.0, 1.0)
    if hi <= lo:
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
        if hi <= lo:
            lo, hi = lo - 0.5, lo + 0.5
    return Colouring("scalar", field, shown, ramp((v - lo) / (hi - lo)), lo=lo, hi=hi)


def _attribute(cloud: PointCloud, name: str, shown: str) -> Colouring:
    a = cloud.attributes[name]
    kind = cloud.kinds.get(name) or info_for(name, a, format=cloud.format).kind
    if kind == "categorical" and len(np.unique(a)) <= MAX_CLASSES:
        return _classes(cloud, name, shown)
    return scalar(a, name, shown)


def _constant(a: np.ndarray) -> bool:
    a = np.asarray(a)
    return a.size == 0 or bool(np.all(a == a[:1]))


def _auto(cloud: PointCloud, up: np.ndarray) -> Colouring:
    field = label_field(cloud)
    rgb = cloud.colors()
    inten = next((n for n in INTENSITY_FIELDS if n in cloud.attributes), None)
    if field and not _constant(cloud.attributes[field]):
        return _classes(cloud, field, f"label ({field})")
    if rgb is not None and not _constant(rgb):
        return choose_colouring(cloud, "rgb", up)
    if inten and not _constant(cloud.attributes[inten]):
        return choose_colouring(cloud, "intensity", up)
    if field:
        return _classes(cloud, field, f"label ({field})")
    return choose_colouring(cloud, "height", up)


def _missing(spec: str, what: str, cloud: PointCloud) -> ValueError:
    return ValueError(f"[render] --color {spec} needs {what}; this file has: {available(cloud)}")


def choose_colouring(cloud: PointCloud, spec: str = "auto", up: np.ndarray | None = None) -> Colouring:
    """The colouring ``spec`` of ``cloud`` (see the module docs); ``up``: unit up vector for height."""
    up = np.array([0.0, 0.0, 1.0]) if up is None else np.asarray(up, np.float64)
    attrs = cloud.attributes
    if spec == "auto":
        return _auto(cloud, up)
    if spec == "label":
        field = label_field(cloud)
        if field is None:
            raise _missing(spec, f"one of the attributes {', '.join(LABEL_FIELDS)}", cloud)
        return _classes(cloud, field, f"label ({field})")
    if spec == "rgb":
        rgb = cloud.colors()
        if rgb is None:
            raise _missing(spec, "red/green/blue (or rgb) attributes", cloud)
        return Colouring(
            "rgb", "rgb", "rgb (red/green/blue)", (np.clip(rgb, 0, 1) * 255 + 0.5).astype(np.uint8)
        )
    if spec == "intensity":
        name = next((n for n in INTENSITY_FIELDS if n in attrs), None)
        if name is None:
            raise _missing(spec, "an intensity (or remission, reflectance) attribute", cloud)
        return scalar(attrs[name], name, f"intensity ({name})")
    if spec == "height":
        return scalar(cloud.points.astype(np.float64) @ up, "height", f"height ({_axis_name(up)})")
    name = spec.split(":", 1)[1] if spec.startswith("feature:") else spec
    names = numeric_attributes(cloud)
    if name not in names and spec.startswith("feature:") and name.isdigit() and int(name) < len(names):
        name = names[int(name)]
    if name in names:
        return _attribute(cloud, name, f"feature:{name}" if spec.startswith("feature:") else name)
    if spec.startswith("feature:"):
        raise _missing(spec, f"a numeric attribute or channel {name!r}", cloud)
    raise ValueError(
        f"[render] --color must be one of {', '.join(COLOR_MODES)}, feature:NAME or an attribute name, "
        f"got {spec!r}; this file has: {available(cloud)}"
    )


def _axis_name(up: np.ndarray) -> str:
    i = int(np.argmax(np.abs(up)))
    return ("-" if up[i] < 0 else "") + "xyz"[i]


def point_colors(cloud: PointCloud, mode: str) -> tuple[np.ndarray, list[tuple[str, RGB]]]:
    """Per-point RGB uint8 colours and the legend entries ``("name (count)", rgb)`` for ``mode``."""
    c = choose_colouring(cloud, mode)
    return c.colors, [(f"{e.name} ({e.count})", e.color) for e in c.legend]
