"""ASPRS LAS / LAZ through ``laspy`` (LAZ needs its ``lazrs`` backend).

Reading: scaled x, y, z as float64 points; every other dimension (standard and extra
bytes) as an attribute named in lower case (``intensity``, ``classification``,
``return_number``, ``gps_time``, ``red``, ...); the header, its VLRs/EVLRs (byte for byte)
and the parsed CRS in ``PointCloud.metadata`` (``lattice.io.las_records``).

Writing: standard dimension names go to the standard fields (values must fit their type:
a float ``intensity`` in [0, 1] is refused rather than truncated; a float class id with
integral values, such as a voxel mode, fits), any other attribute becomes an extra-bytes
dimension. When the cloud's metadata holds a LAS header (whatever ``cloud.format`` is) the
writer keeps its point format where the attributes fit, its version, scale and offset,
system id, creation date, global encoding, file source id, project id and every VLR/EVLR
except the ones laspy writes itself (extra bytes, LAZ). ``generating_software`` is always
``lattice <version>``: lattice wrote the file (PDAL also writes its own name). Colours go to
the uint16 fields: uint16 values as they are, other types converted from their full scale
(``lattice.io.kinds``) to 65535 (uint8 x 257).
"""

from __future__ import annotations

import math
import warnings
from datetime import date
from typing import BinaryIO
from uuid import UUID

import numpy as np

from lattice.io._common import PointCloudError, one_line
from lattice.io._points import PointCloud
from lattice.io.kinds import colour_scale, convert_colour
from lattice.io.las_header import check_las_header
from lattice.io.las_records import COMMENTS, comments_record, is_las_metadata, las_metadata, records_of

_LAZ_HINT = "reading or writing LAZ needs the lazrs backend: pip install 'laspy[lazrs]'"
_FORMAT_PREFERENCE = (0, 1, 2, 3, 6, 7, 8, 4, 5, 9, 10)
_VERSIONS = ("1.2", "1.3", "1.4")
_I32 = (-(2**31), 2**31 - 1)
_COLOUR_FIELDS = ("red", "green", "blue")
_WAVEFORM_BITS, _WKT_BIT = 0b110, 0b1_0000


class LasFallbackWarning(UserWarning):
    """The source's LAS scale or offset could not hold the coordinates; another was used."""


def _laspy():
    try:
        import laspy
    except ImportError as e:
        raise PointCloudError(
            "reading and writing LAS/LAZ needs the 'laspy' package: pip install 'laspy[lazrs]'"
        ) from e
    return laspy


def _lazrs_errors() -> tuple[type[BaseException], ...]:
    """The LAZ backend's error type (a truncated or corrupt LAZ), when the backend is installed."""
    try:
        import lazrs
    except ImportError:
        return ()
    return (lazrs.LazrsError,)


def read_las(f: BinaryIO, label: str) -> PointCloud:
    """Read a LAS or LAZ file from the binary stream ``f``."""
    laspy = _laspy()
    check_las_header(f, label)  # laspy trusts the header's counts and offsets; lattice does not
    try:
        las = laspy.read(f, closefd=False)
    except laspy.errors.LaspyException as e:
        if "LazBackend" in str(e) or "laz" in str(e).lower():
            raise PointCloudError(f"{label}: {_LAZ_HINT} ({e})") from e
        raise PointCloudError(f"{label}: malformed LAS: {e}") from e
    except UnicodeDecodeError as e:
        raise PointCloudError(
            f"{label}: malformed LAS: a VLR's user id or description is not text ({e.reason})"
        ) from e
    except (ValueError, EOFError, OSError, OverflowError, *_lazrs_errors()) as e:
        raise PointCloudError(f"{label}: truncated or malformed LAS: {one_line(e)}") from e
    except BaseException as e:  # lazrs panics on some corrupt chunks: a pyo3 PanicException (BaseException)
        if type(e).__name__ != "PanicException":
            raise
        raise PointCloudError(f"{label}: corrupt LAZ: the decoder gave up ({one_line(e)})") from None
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
    fmt = "laz" if las.header.are_points_compressed else "las"
    return PointCloud(points, attrs, format=fmt, source=label, metadata=las_metadata(las, f))


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


def _version_key(v: str) -> tuple[int, ...]:
    try:
        return tuple(int(p) for p in str(v).split("."))
    except ValueError:
        return (0,)


def _version(laspy, fmt: int, wanted: str | None) -> str:
    """``wanted`` when it supports ``fmt``, else the first of 1.2 / 1.3 / 1.4 that does (never older)."""
    compatible = laspy.point.dims.is_point_fmt_compatible_with_version
    if wanted and str(wanted) in laspy.point.dims.VERSION_TO_POINT_FMT and compatible(fmt, str(wanted)):
        return str(wanted)
    floor = _version_key(wanted) if wanted else (0,)
    return next(v for v in _VERSIONS if compatible(fmt, v) and _version_key(v) >= floor)


def _fits(lo: np.ndarray, hi: np.ndarray, scales: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Per axis: do ``lo`` and ``hi`` become int32 records through ``scales`` / ``offsets``?"""
    with np.errstate(all="ignore"):
        a, b = np.round((lo - offsets) / scales), np.round((hi - offsets) / scales)
    return np.isfinite(a) & np.isfinite(b) & (a >= _I32[0]) & (b <= _I32[1])


def _default_scales_offsets(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Scale 0.001 (coarser by powers of 10 for huge spans) and offset ``floor(min)``."""
    offsets = np.floor(lo)
    span = float(np.max(hi - offsets))
    scale = 0.001 if span / 0.001 < _I32[1] else 10.0 ** math.ceil(math.log10(span / 2e9))
    return np.full(3, scale), offsets


def _kept_scales_offsets(lo, hi, meta: dict) -> tuple[np.ndarray, np.ndarray] | None:
    """The source's scale and offset, or its scale with a new offset on its grid, or None."""
    try:
        scales = np.asarray(meta["scales"], np.float64).reshape(3)
        offsets = np.asarray(meta["offsets"], np.float64).reshape(3)
    except (TypeError, ValueError):
        return None
    if not (np.all(np.isfinite(scales)) and np.all(scales > 0) and np.all(np.isfinite(offsets))):
        return None
    ok = _fits(lo, hi, scales, offsets)
    if ok.all():
        return scales, offsets
    moved = np.where(ok, offsets, np.floor(lo / scales) * scales)
    if not _fits(lo, hi, scales, moved).all():
        return None
    warnings.warn(
        f"LAS offsets {offsets.tolist()} cannot hold coordinates in {lo.tolist()}..{hi.tolist()} at scale "
        f"{scales.tolist()} in int32 records; kept the scale, wrote offsets {moved.tolist()}",
        LasFallbackWarning,
        stacklevel=4,
    )
    return scales, moved


def _scales_offsets(points: np.ndarray, meta: dict) -> tuple[np.ndarray, np.ndarray]:
    if not np.isfinite(points).all():
        raise PointCloudError(
            "LAS cannot store NaN or infinite coordinates; drop them first (cloud.drop_nan())"
        )
    lo = points.min(axis=0).astype(np.float64) if len(points) else np.zeros(3)
    hi = points.max(axis=0).astype(np.float64) if len(points) else np.zeros(3)
    if is_las_metadata(meta):
        kept = _kept_scales_offsets(lo, hi, meta)
        if kept is not None:
            return kept
        scales, offsets = _default_scales_offsets(lo, hi)
        warnings.warn(
            f"LAS scales {meta['scales']} / offsets {meta['offsets']} cannot hold coordinates in "
            f"{lo.tolist()}..{hi.tolist()} in int32 records; wrote scales {scales.tolist()}, "
            f"offsets {offsets.tolist()}",
            LasFallbackWarning,
            stacklevel=3,
        )
        return scales, offsets
    return _default_scales_offsets(lo, hi)


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


def _colour_field(values: np.ndarray, scale: float | None) -> np.ndarray:
    """A colour channel for LAS's uint16 fields: uint16 kept, anything else scaled to 65535."""
    if values.dtype == np.uint16:
        return values
    return convert_colour(values, scale or colour_scale(values), 65535.0, np.uint16)


def _extra_values(a: np.ndarray) -> np.ndarray:
    """Values in a type LAS extra bytes can hold (bool -> uint8, float16 -> float32)."""
    return a.astype(np.uint8) if a.dtype == np.bool_ else a.astype(np.float32) if a.dtype == np.float16 else a


def _extra_params(laspy, cloud: PointCloud, names: list[str], meta: dict) -> tuple[list, dict[str, str]]:
    """ExtraBytesParams for the attributes ``names`` (source names and descriptions kept)."""
    stored = {d.get("attribute"): d for d in meta.get("extra_dims") or [] if isinstance(d, dict)}
    params, field_of = [], {}
    for n in names:
        src = stored.get(n) or {}
        field = str(src.get("name") or n)
        if field.lower() != n or field in field_of.values():
            field = n
        a = _extra_values(cloud.attributes[n])
        dt = a.dtype.newbyteorder("<")
        kind = dt if a.ndim == 1 else np.dtype((dt, a.shape[1]))
        params.append(
            laspy.ExtraBytesParams(name=field, type=kind, description=str(src.get("description", "")))
        )
        field_of[n] = field
    return params, field_of


def _global_encoding(meta: dict, version: str, has_wkt: bool) -> int:
    """The source's bits, without waveform packets (not written); WKT bit when a WKT record is kept."""
    value = int(meta.get("global_encoding") or 0) & ~_WAVEFORM_BITS & 0xFFFF
    if _version_key(version) >= (1, 4) and has_wkt:
        return value | _WKT_BIT
    return value & ~_WKT_BIT


def _keep_header_fields(laspy, header, meta: dict, version: str) -> None:
    """System id, creation date, encoding, file source id, project id and (E)VLRs of ``meta``."""
    from lattice._version import __version__

    header.generating_software = f"lattice {__version__}"
    if not is_las_metadata(meta):
        return
    header.system_identifier = str(meta.get("system_identifier", header.system_identifier))
    created = meta.get("creation_date")
    header.creation_date = date.fromisoformat(created) if isinstance(created, str) else None
    header.file_source_id = int(meta.get("file_source_id") or 0)
    if meta.get("guid"):
        header.uuid = UUID(str(meta["guid"]))
    try:
        vlrs, evlrs = records_of(meta, "vlrs"), records_of(meta, "evlrs")
    except ValueError as e:
        raise PointCloudError(f"metadata: {e}") from e
    for r in vlrs:
        desc = r.description.encode("ascii", "replace")
        header.vlrs.append(laspy.VLR(r.user_id, r.record_id, desc, r.data))
    has_wkt = any(r.user_id == "LASF_Projection" and r.record_id == 2112 for r in vlrs + evlrs)
    header.global_encoding = laspy.header.GlobalEncoding(_global_encoding(meta, version, has_wkt))
    if evlrs:
        header.evlrs = laspy.vlrs.vlrlist.VLRList(
            [
                laspy.VLR(r.user_id, r.record_id, r.description.encode("ascii", "replace"), r.data)
                for r in evlrs
            ]
        )


def _new_header(laspy, cloud: PointCloud):
    meta = cloud.metadata if is_las_metadata(cloud.metadata) else {}
    names = set(cloud.attributes)
    wanted = names & _all_standard(laspy)
    fmt = meta.get("point_format")
    if not isinstance(fmt, int) or fmt not in _FORMAT_PREFERENCE or not wanted <= _standard_names(laspy, fmt):
        fmt = _choose_point_format(laspy, names)
    version = _version(laspy, fmt, meta.get("version"))
    header = laspy.LasHeader(point_format=fmt, version=version)
    _keep_header_fields(laspy, header, meta, version)
    text = comments_record((cloud.metadata or {}).get("comments"))
    if text is not None:
        header.vlrs.append(laspy.VLR(COMMENTS[0], COMMENTS[1], b"comments", text))
    extra = [n for n in cloud.attributes if n not in _standard_names(laspy, fmt)]
    params, field_of = _extra_params(laspy, cloud, extra, meta)
    if params:
        header.add_extra_dims(params)
    header.scales, header.offsets = _scales_offsets(cloud.points, meta)
    return header, field_of


def _records(points: np.ndarray, header) -> np.ndarray:
    """Integer X/Y/Z records of ``points`` through the header's scale and offset."""
    return np.round((points.astype(np.float64) - header.offsets) / header.scales).astype(np.int32)


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
    xyz = _records(cloud.points, header)
    las.X, las.Y, las.Z = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    infos = cloud.attribute_info()
    for name, values in cloud.attributes.items():
        try:
            if name in extra:
                las[extra[name]] = _extra_values(values)
            elif name in _COLOUR_FIELDS:
                las[name] = _colour_field(values, infos[name].scale)
            else:
                las[name] = _fit(name, values, np.asarray(las[name]).dtype)
        except (OverflowError, ValueError) as e:
            if isinstance(e, PointCloudError):
                raise
            raise PointCloudError(f"attribute {name!r} does not fit LAS dimension {name}: {e}") from e
    start = f.tell()
    try:
        las.write(f, do_compress=compress)
    except laspy.errors.LaspyException as e:
        raise PointCloudError(f"{_LAZ_HINT} ({e})" if compress else f"could not write LAS: {e}") from e
    if is_las_metadata(cloud.metadata) and cloud.metadata.get("creation_date", "") is None:
        _clear_creation_date(f, start)


def _clear_creation_date(f: BinaryIO, start: int) -> None:
    """Day and year 0, as in a source without a creation date (laspy always writes one)."""
    end = f.tell()
    f.seek(start + 90)
    f.write(b"\0\0\0\0")
    f.seek(end)
