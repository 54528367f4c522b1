"""Pictures of point clouds and sparse tensors: views side by side (default: top-down and
perspective), coloured by what the data holds, with a legend or colour bar beside the data
and a scale bar in world units.

>>> from lattice.render import read_for_render, render_picture
>>> cloud, about = read_for_render("scan.las")       # points, or voxel centres of a sparse NPZ
>>> pic = render_picture(cloud, about=about)          # colour "auto", up axis detected
>>> pic.image.save("scan.png"); pic.title             # what was drawn, coloured by what

The colouring (``lattice.render.colouring``), the up axis and the views
(``lattice.render.views``) and the layout (``lattice.render.figure``) are chosen once
and stated in the title. Rasterised with NumPy (square splats in painter's order), drawn
with Pillow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from lattice.io import PointCloud
from lattice.render.colouring import (
    COLOR_MODES,
    LABEL_FIELDS,
    Colouring,
    LabelInfo,
    LegendEntry,
    available,
    choose_colouring,
    label_field,
    label_info,
    point_colors,
)
from lattice.render.figure import Box, Layout, draw_colorbar, draw_legend, draw_scalebar, draw_title, layout
from lattice.render.views import UP_AXES, VIEWS, Up, detect_up, project, rasterise

DEFAULT_VIEWS = ("top", "perspective")
DEFAULT_MAX_POINTS = 2_000_000
PICTURE_FORMATS = {".png": "PNG", ".jpg": "JPEG", ".jpeg": "JPEG"}
_UNITS = {"metre": "m", "meter": "m", "foot": "ft", "us survey foot": "US ft", "foot_us": "US ft"}


@dataclass(frozen=True)
class About:
    """What was read: ``name`` (file name), ``kind`` (``points`` or ``voxels``), ``voxel``
    (the voxel edge in world units, for voxels) and the length ``unit`` of the coordinates."""

    name: str = ""
    kind: str = "points"
    voxel: float | None = None
    unit: str = ""


@dataclass(frozen=True, eq=False)
class Picture:
    """A drawn picture: the Pillow ``image``, its ``title`` lines, the ``colouring``, the ``up``
    axis, the ``layout`` boxes (``legend``/``colorbar``: the boxes actually used), the number of
    points ``drawn`` (finite, after subsampling) of ``total``, and the ``point_size`` in pixels."""

    image: Any
    title: tuple[str, ...]
    colouring: Colouring
    up: Up
    layout: Layout
    legend: Box | None
    colorbar: Box | None
    drawn: int
    total: int
    point_size: int


def read_for_render(
    src: str | os.PathLike | BinaryIO, *, format: str | None = None, columns: Any = None
) -> tuple[PointCloud, About]:
    """The cloud to draw from a points file, or a sparse-tensor NPZ's voxel centres (world units,
    one point per voxel, every channel an attribute)."""
    import io

    from lattice.io import read_points, read_sparse
    from lattice.io.sparse import is_sparse_npz

    label = getattr(src, "name", "<stdin>") if hasattr(src, "read") else os.fspath(src)
    if hasattr(src, "read"):
        data = io.BytesIO(src.read())
        data.name = label
        src = data
    if format in (None, "npz") and is_sparse_npz(src):
        from lattice.pipeline.export import sparse_to_cloud

        sf = read_sparse(src)
        cloud = sparse_to_cloud(sf)
        edge = float(np.max(sf.voxel_size * sf.stride))
        return cloud, About(os.path.basename(label), "voxels", edge, _unit(cloud))
    cloud = read_points(src, format=format, columns=columns)
    if cloud.format == "npz":
        cloud = _with_npz_classes(cloud, src)
    return cloud, About(os.path.basename(label), "points", None, _unit(cloud))


def _with_npz_classes(cloud: PointCloud, src) -> PointCloud:
    """``cloud`` with the class table of a ``model-run`` NPZ (its JSON ``classes`` member) as the
    ``class ID NAME R G B`` comments a ``model-run`` PLY carries, so both draw the same legend."""
    import json
    import zipfile
    from dataclasses import replace

    try:
        if hasattr(src, "seek"):
            src.seek(0)
        with zipfile.ZipFile(src) as zf, zf.open("classes.npy") as f:
            table = json.loads(str(np.lib.format.read_array(f, allow_pickle=False).reshape(())))
        rows = [f"class {int(c['id'])} {str(c['name']).replace(' ', '_')} {' '.join(str(int(v)) for v in c['color'])}"
                for c in table]  # fmt: skip
    except (KeyError, OSError, ValueError, TypeError, zipfile.BadZipFile):
        return cloud
    field = "pred_label" if "pred_label" in cloud.attributes else "label"
    comments = [*cloud.metadata.get("comments", []), f"lattice model-run labels: {field}", *rows]
    return replace(cloud, metadata={**cloud.metadata, "comments": comments})


def _unit(cloud: PointCloud) -> str:
    crs = cloud.metadata.get("crs") if cloud.metadata else None
    units = str((crs or {}).get("units") or "").lower() if isinstance(crs, dict) else ""
    if units:
        return _UNITS.get(units, units)
    return "m" if (cloud.format or "") in ("kitti", "nuscenes") else ""


def subsample(n: int, max_points: int | None, seed: int = 0) -> np.ndarray | None:
    """Sorted indices of an even random subsample of ``max_points`` of ``n`` rows (fixed seed), or
    None when all fit."""
    if max_points is None or n <= max_points:
        return None
    if max_points < 1:
        raise ValueError(f"[render] max_points must be positive, got {max_points}")
    return np.sort(np.random.default_rng(seed).choice(n, size=max_points, replace=False))


def _auto_size(n: int, area: int, voxel_px: float | None) -> int:
    if voxel_px is not None:
        return int(min(max(np.ceil(voxel_px - 0.05), 1), 16))
    return int(min(max(round(0.9 * np.sqrt(area / max(n, 1))), 1), 4))


def render_picture(
    cloud: PointCloud,
    *,
    color: str = "auto",
    width: int = 1600,
    height: int = 800,
    views: tuple[str, ...] = DEFAULT_VIEWS,
    up: str | None = None,
    point_size: int | None = None,
    max_points: int | None = DEFAULT_MAX_POINTS,
    about: About | None = None,
    title: str | None = None,
) -> Picture:
    """Draw ``cloud`` (see the module docs); ``up=None`` detects the up axis, ``point_size=None``
    sizes splats from the density (for voxels: the voxel's size on the page)."""
    from PIL import Image, ImageDraw

    about = about or About(os.path.basename(cloud.source or ""), unit=_unit(cloud))
    views = tuple(views) or DEFAULT_VIEWS
    bad = [v for v in views if v not in VIEWS]
    if bad:
        raise ValueError(f"[render] views must be among {', '.join(VIEWS)}, got {', '.join(bad)}")
    total = len(cloud)
    finite = cloud.drop_nan()
    if len(finite) == 0:
        raise ValueError("[render] the cloud has no finite points")
    pick = subsample(len(finite), max_points)
    shown = finite if pick is None else finite.select(pick)
    upa = Up(up, "given") if up else detect_up(cloud, finite.points)
    if upa.axis not in UP_AXES:
        raise ValueError(f"[render] up must be one of {', '.join(UP_AXES)}, got {upa.axis!r}")
    colouring = choose_colouring(shown, color, upa.vector)
    lines = _title(about, shown, total, len(finite), pick is not None, colouring, upa, views, title)
    lay = layout(width, height, views, colouring.kind != "rgb", len(lines))
    img = Image.new("RGB", (width, height), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    pts = shown.points.astype(np.float64)
    size = point_size
    for view in views:
        box = lay.data[view]
        proj = project(pts, upa.axis, view, box.width, box.height)
        voxel_px = about.voxel * proj.scale if about.voxel and proj.scale else None
        size = point_size or _auto_size(len(pts), box.width * box.height, voxel_px)
        panel, _ = rasterise(proj.pix, proj.depth, colouring.colors, box.width, box.height, size)
        img.paste(Image.fromarray(panel), (box.x0, box.y0))
        caption = "perspective" if view == "perspective" else f"{view} (orthographic)"
        draw.text((lay.labels[view].x0, lay.labels[view].y0), caption, fill=(90, 90, 90), font=_font(lay))
        if proj.scale:
            draw_scalebar(draw, lay.scalebars[view], proj.scale, about.unit, lay.font_size)
    draw_title(draw, lay.title, list(lines), lay.font_size)
    legend = colorbar = None
    if colouring.kind == "classes":
        legend = draw_legend(draw, lay.side, colouring, lay.font_size)
    elif colouring.kind == "scalar":
        colorbar = draw_colorbar(draw, lay.side, colouring, lay.font_size)
    return Picture(img, lines, colouring, upa, lay, legend, colorbar, len(shown), total, int(size or 1))


def _font(lay: Layout):
    from lattice.render.figure import font

    return font(lay.font_size)


def _title(about, shown, total, finite, sub, colouring, upa, views, title) -> tuple[str, ...]:
    what = "voxels" if about.kind == "voxels" else "points"
    first = f"{about.name + ': ' if about.name else ''}{len(shown):,} {what} drawn"
    if sub:
        first += f" (even subsample of {finite:,}, seed 0)"
    if total > finite:
        first += f", {total - finite:,} non-finite left out"
    if about.voxel:
        first += f", voxel {about.voxel:g} {about.unit}".rstrip()
    second = f"colour: {colouring.shown}"
    if colouring.source and colouring.source != "ids":
        second += f", {colouring.source}"
    second += f"  ·  up: {upa.axis} ({upa.reason})  ·  views: {', '.join(views)}"
    return (title, second) if title else (first, second)


def default_title(points: int, shown: str) -> str:
    """A one-line title: point count and what the colours show."""
    return f"{points:,} points, colour: {shown}"


def render_cloud(
    cloud: PointCloud,
    *,
    color: str = "auto",
    width: int = 1600,
    height: int = 800,
    title: str | None = None,
    **kw,
):
    """The Pillow image of :func:`render_picture`."""
    return render_picture(cloud, color=color, width=width, height=height, title=title, **kw).image


def picture_format(path: str | os.PathLike) -> str:
    """``PNG`` or ``JPEG`` from the extension of ``path``; ValueError for anything else."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    if ext not in PICTURE_FORMATS:
        raise ValueError(f"the picture must be .png, .jpg or .jpeg, got {os.fspath(path)!r}")
    return PICTURE_FORMATS[ext]


__all__ = [
    "COLOR_MODES",
    "DEFAULT_VIEWS",
    "LABEL_FIELDS",
    "UP_AXES",
    "VIEWS",
    "About",
    "Box",
    "Colouring",
    "LabelInfo",
    "LegendEntry",
    "Picture",
    "Up",
    "available",
    "choose_colouring",
    "default_title",
    "detect_up",
    "label_field",
    "label_info",
    "picture_format",
    "point_colors",
    "read_for_render",
    "render_cloud",
    "render_picture",
    "subsample",
]
