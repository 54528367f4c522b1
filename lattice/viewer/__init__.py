"""``lattice view``: one self-contained HTML page with an interactive WebGL view of a cloud.

>>> from lattice.viewer import write_view
>>> write_view("scan.las", "scan.html")   # open it in any browser, offline

The page (``page.html`` beside this module) holds everything: the data as JSON (positions
in the east/north/up frame of the detected up axis, quantised to uint16 per axis; each
colouring as uint8 class indices, uint8 ramp levels or RGB) and a small purpose-written
WebGL viewer (``gl.POINTS`` from two vertex buffers). It needs no network and no plotting
library: a Plotly ``Scatter3d`` page grows about 40 bytes per point as JSON text and
becomes sluggish past a few hundred thousand points, while this page is ~6 bytes per point
plus 1-3 per colouring and redraws 2 M points at interactive rates in software WebGL.

Orbit (drag), pan (shift- or right-drag), zoom (wheel), colour-by over the file's
attributes (the default is ``lattice render``'s choice), class legend with toggles, point
size, reset. Clouds above ``max_points`` are evenly subsampled (fixed seed), with a note.
"""

from __future__ import annotations

import base64
import json
import os
from importlib import resources
from typing import Any, BinaryIO

import numpy as np

from lattice.io import PointCloud
from lattice.render import About, choose_colouring, detect_up, read_for_render, subsample
from lattice.render.colouring import label_field, numeric_attributes
from lattice.render.views import UP_AXES, Up, frame

DEFAULT_MAX_POINTS = 2_000_000
MAX_COLOURINGS = 16


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(a).tobytes()).decode("ascii")


def _entry(cloud: PointCloud, spec: str, label: str, up: np.ndarray) -> dict | None:
    """One colour-by choice as the page's JSON, or None when it shows nothing (constant values)."""
    c = choose_colouring(cloud, spec, up)
    if c.kind == "rgb":
        return {"label": label, "kind": "rgb", "dtype": "u8", "data": _b64(c.colors), "about": c.shown}
    if c.kind == "classes":
        if len(c.legend) < 2 and spec not in ("auto", "label"):
            return None
        ids = np.array([e.id for e in c.legend], np.int64)
        values = np.asarray(cloud.attributes[c.field]).reshape(-1).astype(np.float64)
        index = np.searchsorted(ids, np.rint(np.nan_to_num(values, nan=-1)).astype(np.int64))
        dtype = np.uint8 if len(ids) <= 256 else np.uint16
        classes = [{"id": e.id, "name": e.name, "color": list(e.color), "count": e.count} for e in c.legend]
        about = f"{c.field}: {c.source}" if c.source else c.field
        return {"label": label, "kind": "classes", "dtype": "u8" if dtype == np.uint8 else "u16",
                "data": _b64(index.astype(dtype)), "classes": classes, "about": about}  # fmt: skip
    if c.hi - c.lo <= 0 or (spec != "height" and np.ptp(_values(cloud, c.field)) == 0):
        return None
    v = _values(cloud, c.field) if c.field != "height" else cloud.points.astype(np.float64) @ up
    level = np.clip(np.rint((v - c.lo) / (c.hi - c.lo) * 255), 0, 255)
    return {"label": label, "kind": "scalar", "dtype": "u8", "data": _b64(np.nan_to_num(level).astype(np.uint8)),
            "lo": c.lo, "hi": c.hi, "about": f"{c.shown}: 2nd..98th percentile"}  # fmt: skip


def _values(cloud: PointCloud, name: str) -> np.ndarray:
    if name == "height":
        return np.zeros(1)
    return np.asarray(cloud.attributes[name], np.float64).reshape(-1)


def _choices(cloud: PointCloud, up: np.ndarray) -> tuple[list[dict], int]:
    """Every colouring the page offers, and the index of the default (``render``'s auto choice)."""
    auto = choose_colouring(cloud, "auto", up)
    specs: list[tuple[str, str]] = []
    field = label_field(cloud)
    if field:
        specs.append((field, field))
    if cloud.colors() is not None:
        specs.append(("rgb", "colour (rgb)"))
    specs.append(("height", "height"))
    colour_names = {"red", "green", "blue", "alpha"}
    for name in numeric_attributes(cloud):
        if name != field and name not in colour_names:
            specs.append((name, name))
    out, default = [], 0
    for spec, label in specs[:MAX_COLOURINGS]:
        entry = _entry(cloud, spec, label, up)
        if entry is None:
            continue
        key = "rgb" if spec == "rgb" else spec
        if key == ("rgb" if auto.kind == "rgb" else auto.field):
            default = len(out)
        out.append(entry)
    return out, default


def build_page(
    cloud: PointCloud,
    *,
    about: About | None = None,
    max_points: int | None = DEFAULT_MAX_POINTS,
    up: str | None = None,
    point_size: int | None = None,
) -> tuple[str, dict]:
    """The HTML text of the page for ``cloud`` and a summary (points shown, up axis, colourings)."""
    about = about or About(os.path.basename(cloud.source or "cloud"))
    total = len(cloud)
    finite = cloud.drop_nan()
    if len(finite) == 0:
        raise ValueError("[view] the cloud has no finite points")
    if up is not None and up not in UP_AXES:
        raise ValueError(f"[view] up must be one of {', '.join(UP_AXES)}, got {up!r}")
    upa = Up(up, "given") if up else detect_up(cloud, finite.points)
    pick = subsample(len(finite), max_points)
    shown = finite if pick is None else finite.select(pick)
    enu = (shown.points.astype(np.float64) - np.median(shown.points, axis=0)) @ frame(upa.axis).T
    lo, hi = enu.min(axis=0), enu.max(axis=0)
    span = np.maximum(hi - lo, 1e-12)
    q = np.clip(np.rint((enu - lo) / span * 65535), 0, 65535).astype(np.uint16)
    lo_, hi_ = np.percentile(enu, [1, 99], axis=0)
    radius = float(np.linalg.norm(hi_ - lo_) / 2) or 1.0
    choices, default = _choices(shown, upa.vector)
    note = ""
    if pick is not None:
        note = (
            f"Showing an even subsample of {len(shown):,} of {len(finite):,} points (seed 0; --max-points)."
        )
    if total > len(finite):
        note += f" {total - len(finite):,} points with non-finite coordinates are left out."
    n = len(shown)
    size = point_size or (1 if n > 500_000 else 2 if n > 20_000 else 3)
    data = {
        "name": about.name, "kind": about.kind, "n": n, "total": total, "note": note.strip(),
        "up": f"{upa.axis} ({upa.reason})", "lo": lo.tolist(), "span": span.tolist(), "radius": radius,
        "positions": _b64(q), "attributes": choices, "default": default, "point_size": size,
    }  # fmt: skip
    text = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    template = resources.files(__package__).joinpath("page.html").read_text(encoding="utf-8")
    title = f"{about.name} - lattice view".replace("&", "&amp;").replace("<", "&lt;")
    html = template.replace("__TITLE__", title).replace("__DATA__", text)
    summary = {"points": total, "shown": n, "up": upa.axis, "up_reason": upa.reason,
               "colourings": [c["label"] for c in choices], "default": choices[default]["label"] if choices else None}  # fmt: skip
    return html, summary


def write_view(
    src: str | os.PathLike | BinaryIO,
    dst: str | os.PathLike,
    *,
    format: str | None = None,
    columns: Any = None,
    max_points: int | None = DEFAULT_MAX_POINTS,
    up: str | None = None,
    point_size: int | None = None,
) -> dict:
    """Read ``src`` (points or a sparse-tensor NPZ) and write its page to ``dst`` atomically."""
    from lattice.io import atomic_write

    cloud, about = read_for_render(src, format=format, columns=columns)
    html, summary = build_page(cloud, about=about, max_points=max_points, up=up, point_size=point_size)
    with atomic_write(dst) as f:
        f.write(html.encode("utf-8"))
    return {"file": os.fspath(src) if not hasattr(src, "read") else "-", "output": os.fspath(dst),
            "bytes": len(html.encode("utf-8")), "kind": about.kind, **summary}  # fmt: skip


__all__ = ["DEFAULT_MAX_POINTS", "build_page", "write_view"]
