"""Headerless float32 LiDAR scans: KITTI velodyne ``.bin`` and nuScenes ``.pcd.bin``.

KITTI: little-endian float32 ``N x 4`` = x, y, z, intensity (remission) -> attribute
``intensity``. nuScenes (``*.pcd.bin`` or ``format="nuscenes"``): float32 ``N x 5`` = x, y,
z, intensity, ring -> attributes ``intensity`` and ``ring`` (kept as float32, as stored).
With ``columns=`` either reads any float32 columns (``x,y,z,red,green,blue``), unchecked.

A raw file has no header, so without ``columns=`` it is checked before it is read
(``check_scan``, on up to 64 evenly spaced runs of 6,000 values): the size must be whole
rows, and the rows must look like the layout. x, y, z must be finite (or all three
non-finite), of sane magnitude, and, judged on 64 rows or more, not a mix of whole and fractional numbers: in real
scans each coordinate has ~0 % whole values, while an N x 6 x, y, z, r, g, b file read as
N x 4 puts its whole-valued colours into every column (33 % / 67 % whole). Intensity must be
finite and in 0..65535, a ring a whole number in 0..65535. A file that fails is refused with
what it looks like instead (nuScenes, KITTI, float32 x, y, z, r, g, b) when one of those
fits. Calibrated on every ``.bin`` of the shared test data: all KITTI/SemanticKITTI scans
and the nuScenes sweep pass as themselves, the ScanNet x, y, z, r, g, b file fails.
"""

from __future__ import annotations

from typing import BinaryIO

import numpy as np

from lattice.io._common import PointCloudError, check_points, opt, read_exact, remaining_bytes
from lattice.io._points import PointCloud
from lattice.io.columns import split_columns

LAYOUTS: dict[str, tuple[str, ...]] = {
    "kitti": ("intensity",),
    "nuscenes": ("intensity", "ring"),
}
RGB = ("x", "y", "z", "red", "green", "blue")
SAMPLE_RUNS = 64
RUN_FLOATS = 6000  # whole rows of 4, 5 and 6 values
_MIXED = (0.1, 0.9)  # a whole-number share of a coordinate in this range means misaligned rows
_MIN_ROWS_FOR_SHARES = 64


def layout_columns(layout: str) -> tuple[str, ...]:
    """``x, y, z`` and the attributes of ``layout`` (``kitti`` or ``nuscenes``)."""
    return ("x", "y", "z", *LAYOUTS[layout])


def sample_runs(f: BinaryIO, size: int) -> list[tuple[int, np.ndarray]]:
    """Up to ``SAMPLE_RUNS`` evenly spaced runs of float32 values from ``f``'s position on,
    each with the index of its first value (the whole file when it is small)."""
    n, here = size // 4, f.tell()
    if n <= SAMPLE_RUNS * RUN_FLOATS:
        starts, length = [0], n
    else:
        starts, length = np.linspace(0, n - RUN_FLOATS, SAMPLE_RUNS).astype(np.int64).tolist(), RUN_FLOATS
    runs = []
    for s in starts:
        f.seek(here + 4 * s)
        runs.append((s, np.frombuffer(f.read(4 * length), dtype="<f4")))
    f.seek(here)
    return runs


def rows_of(runs: list[tuple[int, np.ndarray]], width: int) -> np.ndarray:
    """The whole rows of ``width`` values inside the sampled runs."""
    parts = []
    for start, a in runs:
        first = (-start) % width
        m = max(len(a) - first, 0) // width
        parts.append(a[first : first + m * width].reshape(m, width))
    return np.concatenate(parts) if parts else np.empty((0, width), "<f4")


def layout_problems(rows: np.ndarray, names: tuple[str, ...], *, strict_colours: bool = False) -> list[str]:
    """Why sampled ``rows`` do not look like the float32 columns ``names`` (empty: they do)."""
    rows = rows[np.any(rows != 0, axis=1)]  # zero padding rows say nothing
    if not len(rows):
        return []
    with np.errstate(invalid="ignore"):  # signalling NaNs in hostile bytes: judged below, not warned
        rows = rows.astype(np.float64)
    xyz = rows[:, :3]
    finite = np.isfinite(xyz)
    problems = []
    partial = int((finite.any(axis=1) & ~finite.all(axis=1)).sum())
    if partial:
        problems.append(f"{partial} of {len(rows)} sampled rows have x, y, z only partly finite")
    v = np.abs(xyz[finite])
    if ((v > 1e10) | ((v > 0) & (v < 1e-30))).any():
        problems.append("x, y, z values of absurd magnitude (below 1e-30 or above 1e10)")
    ok = xyz[finite.all(axis=1)]
    if len(ok) >= _MIN_ROWS_FOR_SHARES:  # a share of a handful of rows tells nothing
        whole = ok == np.floor(ok)
        share, nonzero = whole.mean(axis=0), (whole & (ok != 0)).mean(axis=0)
        if any(_MIXED[0] < s < _MIXED[1] and z > _MIXED[0] for s, z in zip(share, nonzero, strict=True)):
            shares = ", ".join(f"{100 * s:.0f}%" for s in share)
            problems.append(
                f"x, y, z mix whole and fractional numbers ({shares} whole), as misaligned rows do"
            )
    for j, name in enumerate(names[3:], 3):
        problems += _column_problems(name, rows[:, j], strict_colours)
    return problems


def _column_problems(name: str, col: np.ndarray, strict_colours: bool) -> list[str]:
    if name not in ("intensity", "ring", "red", "green", "blue"):
        return []
    if not np.isfinite(col).all():
        return [f"{name} has non-finite values"]
    lo, hi = float(col.min()), float(col.max())
    colour = name in ("red", "green", "blue")
    top = 255 if colour else 65535
    if lo < 0 or hi > top:
        return [f"{name} values {lo:.6g}..{hi:.6g} are outside 0..{top}"]
    if (name == "ring" or (colour and strict_colours)) and not (col == np.floor(col)).all():
        return [f"{name} values are not whole numbers"]
    return []


def _looks_like(runs, size: int, layout: str | None) -> str:
    """A hint: the first other layout the sampled values fit, else how to name the columns."""
    candidates = [
        (RGB, f"float32 x, y, z, red, green, blue (colours 0..255): pass {opt('columns', ','.join(RGB))}")
    ]
    for other in LAYOUTS:
        if other != layout:
            cols = layout_columns(other)
            candidates.append((cols, f"{other} float32 {', '.join(cols)}: pass {opt('format', other)}"))
    for names, hint in candidates:
        width = len(names)
        if (
            size
            and size % (4 * width) == 0
            and not layout_problems(rows_of(runs, width), names, strict_colours=True)
        ):
            return f"it looks like {hint}"
    return f"pass {opt('format')} for another layout, or {opt('columns', 'x,y,z,intensity')} naming each float32 column"


def check_scan(f: BinaryIO, label: str, layout: str = "kitti") -> int:
    """The number of points of the raw ``layout`` scan at ``f``'s position, once it looks right.

    Raises ``PointCloudError`` when the size is not whole rows or the sampled rows do not
    look like ``layout`` (see the module docs); ``f``'s position is kept.
    """
    names = layout_columns(layout)
    width = len(names)
    size = remaining_bytes(f) or 0
    runs = sample_runs(f, size - size % 4)
    if size % (4 * width):
        raise PointCloudError(
            f"{label}: {size} bytes is not a whole number of {layout} points "
            f"(float32 {', '.join(names)} = {4 * width} bytes each); {_looks_like(runs, size, layout)}"
        )
    problems = layout_problems(rows_of(runs, width), names)
    if problems:
        raise PointCloudError(
            f"{label}: does not look like a {layout} scan (float32 {', '.join(names)}): "
            f"{'; '.join(problems)}; {_looks_like(runs, size, layout)}"
        )
    return size // (4 * width)


def read_float_scan(f: BinaryIO, label: str, layout: str = "kitti") -> PointCloud:
    """Read a headerless float32 scan with columns x, y, z + ``LAYOUTS[layout]``, checked first."""
    n = check_scan(f, label, layout)
    return read_float_columns(f, label, layout_columns(layout), layout, count=n)


def read_float_columns(
    f: BinaryIO, label: str, columns: tuple[str, ...], layout: str = "kitti", count: int | None = None
) -> PointCloud:
    """Read headerless float32 rows named ``columns`` (x, y, z among them), without the layout check."""
    width = len(columns)
    size = remaining_bytes(f) or 0
    if count is None and size % (4 * width):
        raise PointCloudError(
            f"{label}: {size} bytes is not a whole number of rows of {width} float32 values "
            f"({opt('columns', ','.join(columns))} = {4 * width} bytes each)"
        )
    n = size // (4 * width) if count is None else count
    check_points(n, label, f"a float32 scan of {size} bytes in rows of {width}")
    raw = read_exact(f, np.dtype("<f4"), n * width, label, "scan").reshape(-1, width)
    points, attrs = split_columns(raw.astype(np.float32, copy=False), columns)
    return PointCloud(points, attrs, format=layout, source=label)


def read_kitti(f: BinaryIO, label: str, columns: tuple[str, ...] | None = None) -> PointCloud:
    """Read a KITTI velodyne ``.bin`` (float32 x, y, z, intensity), or the float32 ``columns``."""
    if columns is not None:
        return read_float_columns(f, label, columns, "kitti")
    return read_float_scan(f, label, "kitti")


def read_nuscenes(f: BinaryIO, label: str, columns: tuple[str, ...] | None = None) -> PointCloud:
    """Read a nuScenes LiDAR ``.pcd.bin`` (float32 x, y, z, intensity, ring), or the float32 ``columns``."""
    if columns is not None:
        return read_float_columns(f, label, columns, "nuscenes")
    return read_float_scan(f, label, "nuscenes")


def write_float_scan(f: BinaryIO, cloud: PointCloud, layout: str = "kitti") -> None:
    """Write x, y, z + ``LAYOUTS[layout]`` as float32; the cloud must have exactly those attributes."""
    extra = LAYOUTS[layout]
    have = set(cloud.attributes)
    if have != set(extra):
        raise PointCloudError(
            f"{layout} .bin stores x, y, z, {', '.join(extra)} only; the cloud has attributes "
            f"{sorted(have)} (missing {sorted(set(extra) - have)}, extra {sorted(have - set(extra))}); "
            "add or drop attributes, or choose another format"
        )
    for name in extra:
        if cloud.attributes[name].ndim != 1:
            raise PointCloudError(
                f"{layout} attribute {name!r} must be 1-D, got {cloud.attributes[name].shape}"
            )
    cols = [cloud.points] + [cloud.attributes[name][:, None] for name in extra]
    f.write(np.concatenate(cols, axis=1).astype("<f4").tobytes())


def write_kitti(f: BinaryIO, cloud: PointCloud) -> None:
    """Write a KITTI velodyne ``.bin``: the cloud must have exactly one attribute, ``intensity``."""
    write_float_scan(f, cloud, "kitti")


def write_nuscenes(f: BinaryIO, cloud: PointCloud) -> None:
    """Write a nuScenes ``.pcd.bin``: the cloud must have exactly ``intensity`` and ``ring``."""
    write_float_scan(f, cloud, "nuscenes")
