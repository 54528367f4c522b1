"""The ``PointCloud`` value object returned by ``read_points`` and taken by ``write_points``."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from lattice.io.kinds import KINDS, AttributeInfo, colour_scale, infos_for

_RESERVED = ("x", "y", "z")
_NORMAL_NAMES = (("nx", "ny", "nz"), ("normal_x", "normal_y", "normal_z"))
_COLOR_NAMES = (("red", "green", "blue"), ("r", "g", "b"))


def _as_points(points: Any) -> np.ndarray:
    a = np.asarray(points)
    if a.ndim != 2 or a.shape[1] != 3:
        raise ValueError(f"[PointCloud] points must have shape (N, 3), got {a.shape}")
    if a.dtype in (np.float32, np.float64):
        return a
    if a.dtype.kind not in "biuf":
        raise ValueError(f"[PointCloud] points must be numeric, got dtype {a.dtype}")
    return a.astype(np.float64)


def stack_points(columns) -> np.ndarray:
    """The ``(N, 3)`` points of a reader's x, y, z columns (each ``(N,)`` or ``(N, 1)``):
    float32 when all three are float32, float64 otherwise; contiguous, native byte order."""
    dtype = np.float32 if all(np.dtype(c.dtype) == np.float32 for c in columns) else np.float64
    return np.ascontiguousarray(np.column_stack(columns).astype(dtype, copy=False))


def _as_attribute(name: Any, value: Any, n: int) -> np.ndarray:
    if not isinstance(name, str) or not name:
        raise ValueError(f"[PointCloud] attribute names must be non-empty strings, got {name!r}")
    if name in _RESERVED:
        raise ValueError(f"[PointCloud] attribute name {name!r} is reserved for the coordinates")
    a = np.asarray(value)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"[PointCloud] attribute {name!r} must be numeric or bool, got dtype {a.dtype}")
    if a.ndim not in (1, 2) or a.shape[0] != n:
        raise ValueError(f"[PointCloud] attribute {name!r} must have shape ({n},) or ({n}, K), got {a.shape}")
    return a


@dataclass(frozen=True, eq=False)
class PointCloud:
    """Points with per-point attributes, as read from or written to a file.

    ``points``: float32 or float64 ``(N, 3)`` xyz (other numeric dtypes become float64).
    ``attributes``: name -> ``(N,)`` or ``(N, K)`` numeric array, named as in the file
    (PLY property names, PCD field names, LAS dimension names in lower case).
    ``format``: the format it was read from (``"ply"``, ``"pcd"``, ...), or None.
    ``source``: the path or stream name it was read from, or None.
    ``metadata``: format details a writer of the same format reuses when it can
    (PCD ``width``/``height``/``viewpoint``, LAS ``scales``/``offsets``/``point_format``
    and CRS records, PLY ``comments``).
    ``kinds``: explicit attribute kinds (``lattice.io.kinds.KINDS``) for names whose kind
    the name and type do not tell; every other attribute's kind is inferred
    (``attribute_info()``).

    Normalised views: ``colors()`` and ``normals()``. NaN points are kept;
    ``drop_nan()`` removes them.
    """

    points: np.ndarray
    attributes: dict[str, np.ndarray] = field(default_factory=dict)
    format: str | None = None
    source: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        points = _as_points(self.points)
        n = points.shape[0]
        attrs = {name: _as_attribute(name, value, n) for name, value in dict(self.attributes).items()}
        object.__setattr__(self, "points", points)
        object.__setattr__(self, "attributes", attrs)
        object.__setattr__(self, "metadata", dict(self.metadata))
        kinds = {str(k): str(v) for k, v in dict(self.kinds).items() if k in attrs}
        bad = {k: v for k, v in kinds.items() if v not in KINDS}
        if bad:
            raise ValueError(f"[PointCloud] kinds must be one of {', '.join(KINDS)}, got {bad}")
        object.__setattr__(self, "kinds", kinds)

    def __len__(self) -> int:
        return int(self.points.shape[0])

    @property
    def num_points(self) -> int:
        """Number of points N."""
        return len(self)

    def __repr__(self) -> str:
        attrs = ", ".join(f"{k}:{v.dtype}{list(v.shape[1:]) or ''}" for k, v in self.attributes.items())
        return (
            f"PointCloud(num_points={len(self)}, dtype={self.points.dtype}, attributes=[{attrs}], "
            f"format={self.format!r}, source={self.source!r})"
        )

    def select(self, index: Any) -> PointCloud:
        """A new cloud with the rows ``index`` (a boolean mask or integer indices) of everything.

        Organised-cloud metadata (PCD ``width``/``height``) is dropped, since rows no longer
        form the grid.
        """
        idx = np.asarray(index)
        meta = {k: v for k, v in self.metadata.items() if k not in ("width", "height")}
        return replace(
            self,
            points=self.points[idx],
            attributes={k: v[idx] for k, v in self.attributes.items()},
            metadata=meta,
            kinds=self.kinds,
        )

    def attribute_info(self) -> dict[str, AttributeInfo]:
        """Every attribute's kind, stored type, default reduction and colour scale (``lattice.io.kinds``)."""
        return infos_for(self.attributes, format=self.format, kinds=self.kinds)

    def finite_mask(self) -> np.ndarray:
        """Boolean ``(N,)``: true where x, y and z are all finite."""
        return np.isfinite(self.points).all(axis=1)

    def drop_nan(self) -> PointCloud:
        """The cloud without points whose x, y or z is NaN or infinite."""
        mask = self.finite_mask()
        return self if mask.all() else self.select(mask)

    def normals(self) -> np.ndarray | None:
        """``(N, 3)`` normals from ``nx/ny/nz`` or ``normal_x/normal_y/normal_z``, or None."""
        for names in _NORMAL_NAMES:
            if all(n in self.attributes for n in names):
                return np.stack([self.attributes[n] for n in names], axis=1)
        return None

    def colors(self) -> np.ndarray | None:
        """``(N, 3)`` float32 colours in [0, 1], or None when the cloud has none.

        Sources, in order: ``red/green/blue`` (or ``r/g/b``), packed ``rgb``/``rgba``
        (PCL layout: ``0xAARRGGBB`` in a uint32 or the bits of a float32), or an ``(N, 3)``
        ``rgb`` array. Channels are divided by their full scale
        (``lattice.io.kinds.colour_scale``: 255 for 8-bit values, 65535 for 16-bit LAS
        colour, 1 for unit floats).
        """
        for names in _COLOR_NAMES:
            if all(n in self.attributes for n in names):
                return _unit_colors(np.stack([self.attributes[n] for n in names], axis=1))
        for name in ("rgb", "rgba"):
            a = self.attributes.get(name)
            if a is None:
                continue
            if a.ndim == 2 and a.shape[1] in (3, 4):
                return _unit_colors(a[:, :3])
            if a.ndim == 1 and a.dtype.itemsize == 4:
                return unpack_rgb(a).astype(np.float32) / np.float32(255)
        return None


def unpack_rgb(packed: np.ndarray) -> np.ndarray:
    """Split PCL-packed colours (uint32 or float32 bit pattern ``0xAARRGGBB``) into ``(N, 3)`` uint8."""
    bits = np.ascontiguousarray(packed).view(np.uint32)
    shifts = np.array([16, 8, 0], dtype=np.uint32)
    return ((bits[:, None] >> shifts) & np.uint32(0xFF)).astype(np.uint8)


def pack_rgb(rgb: np.ndarray, *, as_float: bool = True) -> np.ndarray:
    """Pack ``(N, 3)`` uint8 colours into PCL's ``rgb`` field (float32 bits, or uint32)."""
    c = np.asarray(rgb).astype(np.uint32)
    bits = (c[:, 0] << 16) | (c[:, 1] << 8) | c[:, 2]
    return bits.view(np.float32) if as_float else bits


def _unit_colors(c: np.ndarray) -> np.ndarray:
    c = np.asarray(c)
    return c.astype(np.float32) / np.float32(colour_scale(c))
