"""Pictures of point clouds: a top-down and a perspective view side by side, coloured by
label, height, intensity, RGB or any numeric attribute, with a legend for labels.

``label`` (the default) colours by the first of ``LABEL_FIELDS`` the cloud has:
``pred_label`` (``lattice model-run`` output), then ``label``, then ``classification``.

Rasterised with NumPy (square splats in painter's order, far to near), drawn and written
with Pillow.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lattice.io import PointCloud

COLOR_MODES = ("label", "height", "intensity", "rgb")
LABEL_FIELDS = ("pred_label", "label", "classification")


@dataclass(frozen=True)
class LabelInfo:
    """Label id -> (name, RGB colour), read from ``class ID NAME R G B`` PLY comments."""

    names: dict[int, str]
    colors: dict[int, tuple[int, int, int]]


def label_info(cloud: PointCloud) -> LabelInfo:
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


def _ramp(values: np.ndarray) -> np.ndarray:
    """A blue -> green -> yellow ramp of values scaled to [0, 1] by their 2..98 percentiles."""
    v = np.asarray(values, dtype=np.float64)
    finite = v[np.isfinite(v)]
    lo, hi = np.percentile(finite, [2, 98]) if finite.size else (0.0, 1.0)
    t = np.nan_to_num(np.clip((v - lo) / (hi - lo if hi > lo else 1.0), 0, 1), nan=0.0)
    stops = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], float)
    x = t * (len(stops) - 1)
    i = np.minimum(x.astype(int), len(stops) - 2)
    f = (x - i)[:, None]
    return (stops[i] * (1 - f) + stops[i + 1] * f).astype(np.uint8)


def _palette(labels: np.ndarray, info: LabelInfo) -> np.ndarray:
    rng = np.random.default_rng(7)
    table = {int(k): np.array(c, np.uint8) for k, c in info.colors.items()}
    out = np.empty((len(labels), 3), np.uint8)
    for lab in np.unique(labels):
        color = table.get(int(lab))
        if color is None:
            color = rng.integers(40, 256, 3).astype(np.uint8)
            table[int(lab)] = color
        out[labels == lab] = color
    return out


def point_colors(cloud: PointCloud, mode: str) -> tuple[np.ndarray, list[tuple[str, tuple[int, int, int]]]]:
    """Per-point RGB uint8 colours and the legend entries for ``mode``."""
    attrs = cloud.attributes
    if mode == "label":
        field = label_field(cloud)
        if field is None:
            raise ValueError(
                f"[render] --color label needs one of the attributes {', '.join(LABEL_FIELDS)} "
                f"(e.g. lattice model-run output); this cloud has {sorted(attrs) or 'none'}"
            )
        labels = np.asarray(attrs[field]).astype(np.int64).reshape(-1)
        info = label_info(cloud)
        colors = _palette(labels, info)
        legend = []
        for lab, count in zip(*np.unique(labels, return_counts=True), strict=True):
            name = info.names.get(int(lab), f"label {int(lab)}")
            legend.append((f"{name} ({count})", tuple(int(c) for c in colors[labels == lab][0])))
        return colors, legend
    if mode == "height":
        return _ramp(cloud.points[:, 2]), []
    if mode == "intensity":
        for name in ("intensity", "remission", "reflectance"):
            if name in attrs:
                return _ramp(attrs[name]), []
        raise ValueError("[render] --color intensity needs an 'intensity' attribute")
    if mode == "rgb":
        rgb = cloud.colors()
        if rgb is None:
            raise ValueError("[render] --color rgb needs red/green/blue (or rgb) attributes")
        return (np.clip(rgb, 0, 1) * 255).astype(np.uint8), []
    if mode.startswith("feature:"):
        names = [k for k, v in attrs.items() if np.asarray(v).ndim == 1 and np.asarray(v).dtype.kind in "iuf"]
        try:
            name = names[int(mode.split(":", 1)[1])]
        except (ValueError, IndexError):
            raise ValueError(f"[render] {mode}: numeric attributes are {names}") from None
        return _ramp(attrs[name]), []
    raise ValueError(f"[render] --color must be one of {COLOR_MODES} or feature:N, got {mode!r}")


def _project(points: np.ndarray, view: str, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """Pixel coordinates (N, 2) and depth (N,) (smaller is nearer) of points in one view."""
    c = points - np.median(points, axis=0)
    if view == "top":
        uv, depth = c[:, :2] * [1, -1], -c[:, 2]
    else:
        az, el = np.radians(-35.0), np.radians(35.0)
        rz = np.array([[np.cos(az), -np.sin(az), 0], [np.sin(az), np.cos(az), 0], [0, 0, 1]])
        p = c @ rz.T
        y = p[:, 1] * np.cos(el) - p[:, 2] * np.sin(el)  # towards the camera
        z = p[:, 1] * np.sin(el) + p[:, 2] * np.cos(el)  # up on screen
        extent = np.percentile(np.abs(p), 98) * 2.2 + 1e-9
        depth = extent - y
        depth = np.maximum(depth, extent * 0.05)
        uv = np.stack([p[:, 0], -z], axis=1) * (extent / depth)[:, None]
    span = np.percentile(np.abs(uv), 99, axis=0) * 2.05 + 1e-9
    scale = min(width / span[0], height / span[1])
    pix = uv * scale + [width / 2, height / 2]
    return pix, depth


def _rasterise(pix, depth, colors, width, height, splat=2) -> np.ndarray:
    img = np.full((height, width, 3), 255, np.uint8)
    order = np.argsort(-depth, kind="stable")  # painter's order: far first, near points overwrite
    px = np.round(pix[order]).astype(np.int64)
    col = colors[order]
    for dx in range(splat):
        for dy in range(splat):
            x, y = px[:, 0] + dx, px[:, 1] + dy
            ok = (x >= 0) & (x < width) & (y >= 0) & (y < height)
            img[y[ok], x[ok]] = col[ok]
    return img


def default_title(points: int, shown: str) -> str:
    """The picture's title: point count and what the colours show (``label (pred_label)``, ``height``)."""
    return f"{points:,} points, colour: {shown}   (left: top-down, right: perspective)"


def render_cloud(
    cloud: PointCloud, *, color: str = "label", width: int = 1600, height: int = 800, title: str | None = None
):
    """A Pillow image: top-down view on the left, perspective on the right, legend for labels."""
    from PIL import Image, ImageDraw

    mask = cloud.finite_mask()
    pts = cloud.points[mask]
    if len(pts) == 0:
        raise ValueError("[render] the cloud has no finite points")
    colors, legend = point_colors(cloud, color)
    colors = colors[mask]
    panel_w = width // 2
    panels = []
    for view in ("top", "perspective"):
        pix, depth = _project(pts.astype(np.float64), view, panel_w, height)
        panels.append(_rasterise(pix, depth, colors, panel_w, height))
    img = Image.fromarray(np.concatenate(panels, axis=1))
    draw = ImageDraw.Draw(img)
    shown = f"label ({label_field(cloud)})" if color == "label" else color
    draw.text(
        (10, 8),
        title or default_title(len(pts), shown),
        fill=(0, 0, 0),
    )
    for i, (name, rgb) in enumerate(legend[:40]):
        y = 30 + 16 * i
        draw.rectangle([10, y, 22, y + 11], fill=rgb, outline=(0, 0, 0))
        draw.text((28, y), name, fill=(0, 0, 0))
    return img
