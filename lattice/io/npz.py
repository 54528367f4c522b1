"""Points in NumPy ``.npz`` archives: ``points`` (N, 3) plus per-point arrays as attributes.

Archives are always opened with ``allow_pickle=False``: object arrays are an error, never
unpickled. Arrays whose first dimension is not N, or that are not 1-D/2-D, are ignored.
"""

from __future__ import annotations

import zipfile
from typing import BinaryIO

import numpy as np

from lattice.io._common import PointCloudError
from lattice.io._points import PointCloud
from lattice.io.kinds import decode_colours

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")


def load_npz(f: BinaryIO, label: str) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` archive, loaded without pickle; errors name ``label``."""
    start = f.tell()
    magic = f.read(4)
    f.seek(start)
    if magic not in _ZIP_MAGIC:
        raise PointCloudError(f"{label}: not an NPZ archive (no zip signature)")
    try:
        with np.load(f, allow_pickle=False) as z:
            return {key: z[key] for key in z.files}
    except ValueError as e:
        if "pickle" in str(e):
            raise PointCloudError(f"{label}: NPZ contains pickled objects, which are refused ({e})") from e
        raise PointCloudError(f"{label}: malformed NPZ: {e}") from e
    except (zipfile.BadZipFile, EOFError, OSError, KeyError) as e:
        raise PointCloudError(f"{label}: truncated or malformed NPZ: {e}") from e


def read_npz(f: BinaryIO, label: str) -> PointCloud:
    """Read a points NPZ from the binary stream ``f``."""
    arrays = load_npz(f, label)
    if "points" not in arrays:
        hint = " (it is a lattice sparse tensor: use read_sparse)" if "coords" in arrays else ""
        raise PointCloudError(f"{label}: NPZ has no 'points' array{hint}; keys: {sorted(arrays)}")
    points = arrays.pop("points")
    if points.ndim != 2 or points.shape[1] != 3 or points.dtype.kind not in "biuf":
        raise PointCloudError(
            f"{label}: NPZ 'points' must be a numeric (N, 3) array, got {points.dtype} {points.shape}"
        )
    n = points.shape[0]
    attrs = {
        k: v
        for k, v in arrays.items()
        if v.ndim in (1, 2) and v.shape[0] == n and v.dtype.kind in "biuf" and k not in ("x", "y", "z")
    }
    attrs, _ = decode_colours(attrs)
    return PointCloud(points, attrs, format="npz", source=label)


def write_npz(f: BinaryIO, cloud: PointCloud, *, compress: bool = False) -> None:
    """Write ``cloud`` as ``points`` plus one array per attribute (zip-deflated if ``compress``)."""
    if "points" in cloud.attributes:
        raise PointCloudError("attribute name 'points' clashes with the NPZ coordinate array")
    save_npz(f, {"points": cloud.points, **cloud.attributes}, compress=compress)


def save_npz(f: BinaryIO, arrays: dict[str, np.ndarray], *, compress: bool = False) -> None:
    """Write ``arrays`` as an ``.npz`` archive without pickle (any key names, unlike ``np.savez``)."""
    mode = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(f, "w", compression=mode, allowZip64=True) as zf:
        for name, a in arrays.items():
            with zf.open(f"{name}.npy", "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asanyarray(a), allow_pickle=False)
