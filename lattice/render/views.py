"""The up axis, the four views (top, side, front, perspective) and the point rasteriser.

Points are first turned into an east / north / up frame (``frame``) so every view is
written once: ``top`` looks down the up axis (east to the right, north up the page),
``front`` looks north, ``side`` looks west, ``perspective`` orbits 35 degrees round and
30 degrees above the front view.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lattice.io import PointCloud

VIEWS = ("top", "side", "front", "perspective")
UP_AXES = ("z", "y", "x", "-z", "-y", "-x")
GEO_FORMATS = frozenset({"las", "laz", "kitti", "nuscenes"})
FLAT = 0.65  # data whose z extent is below FLAT x the x and y extents is a scene: z is up


@dataclass(frozen=True)
class Up:
    """The up axis (``z``, ``-y``, ...) and why it was chosen (``"given"``, ``"LAS"``, ...)."""

    axis: str
    reason: str

    @property
    def vector(self) -> np.ndarray:
        v = np.zeros(3)
        v["xyz".index(self.axis[-1])] = -1.0 if self.axis.startswith("-") else 1.0
        return v


def _scan_header(cloud: PointCloud) -> bool:
    """True for a PLY whose header a scanner or mesh tool wrote (``obj_info`` lines, or comments
    other than lattice's own ``class ...`` / ``lattice ...`` ones)."""
    meta = cloud.metadata or {}
    comments = [str(c) for c in meta.get("comments") or []]
    own = [c for c in comments if c.startswith(("class ", "lattice"))]
    return bool(meta.get("obj_info")) or len(comments) > len(own)


def detect_up(cloud: PointCloud, points: np.ndarray | None = None) -> Up:
    """The up axis of ``cloud``: z for LAS/LAZ and LiDAR scans; -y for an organised camera frame
    (PCD ``height`` > 1); y for a PLY from a scanner or mesh tool (the convention of scanned
    objects: the Stanford bunny, the dragon); z when the data is flat in z (a scene, terrain);
    y for other PLY files; else z."""
    fmt = (cloud.format or "").lower()
    if fmt in GEO_FORMATS:
        return Up("z", f"{fmt.upper()} convention")
    if fmt == "pcd" and int(cloud.metadata.get("height", 1) or 1) > 1:
        return Up("-y", "organised camera frame")
    if fmt == "ply" and _scan_header(cloud):
        return Up("y", "PLY scanned-object convention")
    pts = cloud.points if points is None else points
    finite = pts[np.isfinite(pts).all(axis=1)]
    if len(finite) >= 3:
        lo, hi = np.percentile(finite, [1, 99], axis=0)
        ext = hi - lo
        if ext[2] < FLAT * min(ext[0], ext[1]):
            return Up("z", "flat in z")
    if fmt == "ply":
        return Up("y", "PLY convention")
    return Up("z", "default")


def frame(up: str) -> np.ndarray:
    """3x3 matrix whose rows are the east, north and up directions for ``up`` (right-handed)."""
    e = np.eye(3)
    x, y, z = e
    rows = {
        "z": (x, y, z),
        "-z": (x, -y, -z),
        "y": (x, -z, y),
        "-y": (x, z, -y),
        "x": (y, z, x),
        "-x": (z, y, -x),
    }
    if up not in rows:
        raise ValueError(f"[render] up must be one of {', '.join(UP_AXES)}, got {up!r}")
    return np.array(rows[up])


@dataclass(frozen=True, eq=False)
class Projection:
    """Pixel coordinates ``(N, 2)`` inside a ``width x height`` area, depth (smaller is nearer)
    and, for the orthographic views, pixels per world unit (None for ``perspective``)."""

    pix: np.ndarray
    depth: np.ndarray
    scale: float | None


def _screen(enu: np.ndarray, view: str) -> tuple[np.ndarray, np.ndarray]:
    """Screen coordinates (right, up) and depth of east/north/up points for ``view``."""
    e, n, u = enu[:, 0], enu[:, 1], enu[:, 2]
    if view == "top":
        return np.stack([e, n], 1), -u
    if view == "front":
        return np.stack([e, u], 1), n
    if view == "side":
        return np.stack([n, u], 1), -e
    if view != "perspective":
        raise ValueError(f"[render] view must be one of {', '.join(VIEWS)}, got {view!r}")
    az, el = np.radians(-35.0), np.radians(30.0)
    rx = e * np.cos(az) - n * np.sin(az)
    ry = e * np.sin(az) + n * np.cos(az)  # away from the camera
    toward = -ry * np.cos(el) + u * np.sin(el)  # towards the camera (south of the data, above it)
    upward = ry * np.sin(el) + u * np.cos(el)
    extent = np.percentile(np.abs(enu), 98) * 2.5 + 1e-12
    depth = np.maximum(extent - toward, extent * 0.05)
    return np.stack([rx, upward], 1) * (extent / depth)[:, None], depth


def project(points: np.ndarray, up: str, view: str, width: int, height: int) -> Projection:
    """Project finite ``points`` (N, 3) for ``view`` into a ``width x height`` pixel area. Every
    point is framed, unless an axis has far outliers (its full range over 1.5 x its 0.5..99.5
    percentile range): then that percentile range fills the area and the outliers fall outside."""
    centre = np.median(points, axis=0) if len(points) else np.zeros(3)
    enu = (points - centre) @ frame(up).T
    uv, depth = _screen(enu, view)
    lo, hi = np.percentile(uv, [0.5, 99.5], axis=0) if len(uv) else (np.zeros(2), np.ones(2))
    full_lo, full_hi = (uv.min(axis=0), uv.max(axis=0)) if len(uv) else (lo, hi)
    whole = (full_hi - full_lo) <= 1.5 * (hi - lo)  # no far outliers on that axis: frame every point
    lo, hi = np.where(whole, full_lo, lo), np.where(whole, full_hi, hi)
    span = np.maximum(hi - lo, 1e-12) * 1.06
    scale = float(min(width / span[0], height / span[1]))
    mid = (lo + hi) / 2
    pix = np.empty_like(uv)
    pix[:, 0] = (uv[:, 0] - mid[0]) * scale + width / 2
    pix[:, 1] = height / 2 - (uv[:, 1] - mid[1]) * scale
    return Projection(pix, depth, None if view == "perspective" else scale)


def rasterise(pix: np.ndarray, depth: np.ndarray, colors: np.ndarray, width: int, height: int, size: int):
    """An RGB ``(height, width, 3)`` uint8 picture: white, with ``size``-pixel square splats in
    painter's order (far first, near points drawn over them). Returns it and the number of
    points that landed inside."""
    img = np.full((height, width, 3), 255, np.uint8)
    order = np.argsort(-depth, kind="stable")
    px = np.floor(pix[order]).astype(np.int64) - (size - 1) // 2
    col = colors[order]
    inside = (px[:, 0] > -size) & (px[:, 0] < width) & (px[:, 1] > -size) & (px[:, 1] < height)
    for dx in range(size):
        for dy in range(size):
            x, y = px[:, 0] + dx, px[:, 1] + dy
            ok = (x >= 0) & (x < width) & (y >= 0) & (y < height)
            img[y[ok], x[ok]] = col[ok]
    return img, int(inside.sum())
