"""ASPRS LAS / LAZ through ``laspy`` (LAZ needs its ``lazrs`` backend).

Reading: scaled x, y, z as float64 points; every other dimension (standard and extra
bytes) as an attribute named in lower case (``intensity``, ``classification``,
``return_number``, ``gps_time``, ``red``, ...). Writing: standard dimension names go to
the standard fields (values must fit their type: a float ``intensity`` in [0, 1] is
refused rather than truncated), any other attribute becomes an extra-bytes dimension.
"""

from __future__ import annotations

import math
from typing import BinaryIO

import numpy as np

from lattice.io._common import PointCloudError
from lattice.io._points import PointCloud

_LAZ_HINT = "reading or writing LAZ needs the lazrs backend: pip install 'laspy[lazrs]'"
_FORMAT_PREFERENCE = (0, 1, 2, 3, 6, 7, 8, 4, 5, 9, 10)


def _laspy():
    try:
        import laspy
    except ImportError as e:
        raise PointCloudError(
            "reading and writing LAS/LAZ needs the 'laspy' package: pip install 'laspy[lazrs]'"
        ) from e
    return laspy


def read_las(f: BinaryIO, label: str) -> PointCloud:
    """Read a LAS or LAZ file from the binary stream ``f``."""
    laspy = _laspy()
    try:
        las = laspy.read(f, closefd=False)
    except laspy.errors.LaspyException as e:
        if "LazBackend" in str(e) or "laz" in str(e).lower():
            raise PointCloudError(f"{label}: {_LAZ_HINT} ({e})") from e
        raise PointCloudError(f"{label}: malformed LAS: {e}") from e
    except (ValueError, EOFError, OSError, OverflowError) as e:
        raise PointCloudError(f"{label}: truncated or malformed LAS: {e}") from e
    n = len(las.points)
    if n != las.header.point_count:
        raise PointCloudError(
            f"{label}: truncated LAS: header declares {las.header.point_count} points but {n} are present"
        )
    points = np.stack([np.asarray(las.x), np.asarray(las.y), np.asarray(las.z)], axis=1).astype(np.float64)
    attrs = {}
    for name in las.point_format.dimension_names:
        if name in ("X", "Y", "Z") or name.lower() in ("x", "y", "z"):
            continue
        attrs[name.lower()] = np.ascontiguousarray(np.asarray(las[name]))
    meta = {
        "point_format": int(las.header.point_format.id),
        "version": str(las.header.version),
        "scales": tuple(float(s) for s in las.header.scales),
        "offsets": tuple(float(o) for o in las.header.offsets),
    }
    fmt = "laz" if las.header.are_points_compressed else "las"
    return PointCloud(points, attrs, format=fmt, source=label, metadata=meta)


def _standard_names(laspy, fmt: int) -> set[str]:
    return {n for n in laspy.PointFormat(fmt).dimension_names if n not in ("X", "Y", "Z")}


def _all_standard(laspy) -> set[str]:
    return set().union(*(_standard_names(laspy, f) for f in _FORMAT_PREFERENCE))


def _choose_point_format(laspy, names: set[str]) -> int:
    """The first format (in preference order) covering the most standard-named attributes."""
    return max(
        _FORMAT_PREFERENCE,
        key=lambda f: (len(names & _standard_names(laspy, f)), -_FORMAT_PREFERENCE.index(f)),
    )


def _scales_offsets(points: np.ndarray, meta: dict) -> tuple[np.ndarray, np.ndarray]:
    if not np.isfinite(points).all():
        raise PointCloudError(
            "LAS cannot store NaN or infinite coordinates; drop them first (cloud.drop_nan())"
        )
    lo = points.min(axis=0) if len(points) else np.zeros(3)
    hi = points.max(axis=0) if len(points) else np.zeros(3)
    if "scales" in meta and "offsets" in meta:
        scales, offsets = np.asarray(meta["scales"], float), np.asarray(meta["offsets"], float)
        if np.all(np.abs(np.stack([lo, hi]) - offsets) / scales < 2**31 - 1):
            return scales, offsets
    offsets = np.floor(lo)
    span = float(np.max(hi - offsets)) if len(points) else 0.0
    scale = 0.001 if span / 0.001 < 2**31 - 1 else 10.0 ** math.ceil(math.log10(span / 2e9))
    return np.full(3, scale), offsets


def _fit(name: str, values: np.ndarray, target: np.dtype) -> np.ndarray:
    """``values`` cast to the LAS field type ``target``, refusing lossy casts."""
    if target.kind in "iu" and values.dtype.kind == "f":
        if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
            raise PointCloudError(
                f"attribute {name!r} has fractional values ({values.dtype}) but LAS stores {name} as "
                f"{target}; rescale or rename it (other names become extra-bytes dimensions)"
            )
    if target.kind in "iu" and values.size:
        info = np.iinfo(target)
        if values.min() < info.min or values.max() > info.max:
            raise PointCloudError(
                f"attribute {name!r} has values in [{values.min()}, {values.max()}], outside LAS {name} ({target})"
            )
    return values.astype(target)


def _extra_values(a: np.ndarray) -> np.ndarray:
    """Values in a type LAS extra bytes can hold (bool -> uint8, float16 -> float32)."""
    return a.astype(np.uint8) if a.dtype == np.bool_ else a.astype(np.float32) if a.dtype == np.float16 else a


def _new_header(laspy, cloud: PointCloud):
    meta = cloud.metadata if cloud.format in ("las", "laz") else {}
    names = set(cloud.attributes)
    wanted = names & _all_standard(laspy)
    fmt = meta.get("point_format")
    if fmt is None or not wanted <= _standard_names(laspy, fmt):
        fmt = _choose_point_format(laspy, names)
    same = fmt == meta.get("point_format")
    version = meta["version"] if same and meta.get("version") else ("1.4" if fmt >= 6 else "1.2")
    header = laspy.LasHeader(point_format=fmt, version=version)
    extra = [n for n in cloud.attributes if n not in _standard_names(laspy, fmt)]
    params = []
    for n in extra:
        a = _extra_values(cloud.attributes[n])
        dt = a.dtype.newbyteorder("<")
        params.append(laspy.ExtraBytesParams(name=n, type=dt if a.ndim == 1 else np.dtype((dt, a.shape[1]))))
    if params:
        header.add_extra_dims(params)
    header.scales, header.offsets = _scales_offsets(cloud.points, meta)
    return header, set(extra)


def write_las(f: BinaryIO, cloud: PointCloud, *, compress: bool = False) -> None:
    """Write ``cloud`` as LAS (or LAZ when ``compress``; that needs ``lazrs``)."""
    laspy = _laspy()
    try:
        header, extra = _new_header(laspy, cloud)
    except (laspy.errors.LaspyException, ValueError, TypeError) as e:
        if isinstance(e, PointCloudError):
            raise
        raise PointCloudError(f"cannot describe these attributes in a LAS header: {e}") from e
    las = laspy.LasData(header)
    las.points = laspy.ScaleAwarePointRecord.zeros(len(cloud), header=header)
    pts = cloud.points.astype(np.float64)
    las.x, las.y, las.z = pts[:, 0], pts[:, 1], pts[:, 2]
    for name, values in cloud.attributes.items():
        try:
            if name in extra:
                las[name] = _extra_values(values)
            else:
                las[name] = _fit(name, values, np.asarray(las[name]).dtype)
        except (OverflowError, ValueError) as e:
            if isinstance(e, PointCloudError):
                raise
            raise PointCloudError(f"attribute {name!r} does not fit LAS dimension {name}: {e}") from e
    try:
        las.write(f, do_compress=compress)
    except laspy.errors.LaspyException as e:
        raise PointCloudError(f"{_LAZ_HINT} ({e})" if compress else f"could not write LAS: {e}") from e
