"""Points in a single NumPy ``.npy`` array (as many ML pipelines save them).

Reading (always ``allow_pickle=False``):

- a numeric ``(N, K)`` array: its columns are named by ``columns=``, else by the width:
  ``N x 3`` x, y, z; ``N x 4`` + ``intensity``; ``N x 6`` + ``red, green, blue``. Values
  keep the array's type (float colours stay float; their kind is colour, at scale 255
  when they reach above 1). Other widths need ``columns=``.
- a structured array with fields ``x``, ``y``, ``z`` (any case): those are the points and
  every other numeric field is an attribute (``r/g/b`` become ``red/green/blue``).
- a 1-D or ``N x 1`` array holds one value per point (labels), not points: an error.

Writing: one ``(N, 3 + A)`` array, columns x, y, z and then every attribute in the cloud's
order (an ``(N, K)`` attribute as ``K`` columns ``name_0 … name_{K-1}``), float64 when the
points or an attribute are float64 (or an integer attribute does not fit float32 exactly),
else float32. A ``.npy`` array cannot store names: reading it back needs ``columns=``
unless it is ``N x 3``, ``N x 4`` with intensity, or ``N x 6`` with red, green, blue.
"""

from __future__ import annotations

import math
import tokenize
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

from lattice.io._common import (
    PointCloudError,
    check_points,
    native,
    one_line,
    opt,
    remaining_bytes,
)
from lattice.io._points import PointCloud, stack_points
from lattice.io.columns import (
    EXAMPLE,
    XYZ,
    check_names,
    default_layout,
    describe_defaults,
    flat_columns,
    normalise_name,
    split_columns,
)
from lattice.io.kinds import decode_colours

MAGIC = b"\x93NUMPY"
WIDTHS = (3, 4, 6)
_FLOAT32_INTS = 2**24  # integers up to this magnitude are exact in float32


@dataclass(frozen=True)
class NpyLayout:
    """How an array's columns (plain array) or fields (structured array) become points and attributes."""

    names: tuple[str, ...]  # one per column, or the normalised field names
    fields: tuple[str, ...] = ()  # the structured array's own field names, in ``names`` order

    @property
    def structured(self) -> bool:
        """True for a structured array (points from fields, not columns)."""
        return bool(self.fields)


def array_header(f: BinaryIO, label: str) -> tuple[tuple[int, ...], bool, np.dtype]:
    """``(shape, fortran order, dtype)`` of the ``.npy`` header at ``f``'s position (left after it).

    NumPy parses the header's dict with ``ast.literal_eval``: hostile bytes raise
    ``SyntaxError`` or a tokenizer error, given here as a ``PointCloudError`` naming ``label``.
    """
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            return np.lib.format.read_array_header_1_0(f)
        if version == (2, 0):
            return np.lib.format.read_array_header_2_0(f)
        try:  # 3.0 (UTF-8 field names) has no public reader
            from numpy.lib._format_impl import _read_array_header
        except ImportError:  # pragma: no cover - NumPy 1
            from numpy.lib.format import _read_array_header
        return _read_array_header(f, version)
    except (SyntaxError, tokenize.TokenError, ValueError, TypeError, KeyError, MemoryError) as e:
        raise PointCloudError(f"{label}: malformed .npy header: {one_line(e)}") from e


def _check_size(f: BinaryIO, label: str) -> None:
    """The header's shape x item size against the bytes after it, and its rows against the ceiling."""
    shape, _, dtype = array_header(f, label)
    nbytes, left = math.prod(shape) * dtype.itemsize, remaining_bytes(f)
    if left is not None and nbytes > left:
        raise PointCloudError(
            f"{label}: truncated or malformed NPY: its header says {dtype} {shape} ({nbytes} bytes) but only {left} bytes follow it"
        )
    if shape:
        check_points(shape[0], label, "NPY header: its row count")


def load_npy(f: BinaryIO, label: str) -> np.ndarray:
    """The array of a ``.npy`` stream, loaded without pickle; errors name ``label``."""
    start = f.tell()
    if f.read(len(MAGIC)) != MAGIC:
        raise PointCloudError(f"{label}: not a NumPy .npy file (no \\x93NUMPY signature)")
    f.seek(start)
    try:
        _check_size(f, label)  # before NumPy allocates the header's shape
        f.seek(start)
        return np.lib.format.read_array(f, allow_pickle=False)
    except PointCloudError:
        raise
    except ValueError as e:
        if "pickle" in str(e) or "Object arrays" in str(e):
            raise PointCloudError(f"{label}: NPY holds Python objects, which are refused ({e})") from e
        raise PointCloudError(f"{label}: truncated or malformed NPY: {e}") from e
    except (EOFError, OSError) as e:
        raise PointCloudError(f"{label}: truncated or malformed NPY: {e}") from e


def npy_layout(
    dtype: np.dtype, shape: tuple[int, ...], label: str, columns: tuple[str, ...] | None
) -> NpyLayout:
    """The layout of an array of ``dtype`` and ``shape`` (``columns``: parsed names, or None)."""
    what = f"{dtype} array of shape {shape}"
    if dtype.names is not None:
        if columns is not None:
            raise PointCloudError(
                f"{label}: a structured array names its own fields ({', '.join(dtype.names)}); "
                f"drop {opt('columns')}"
            )
        return _structured_layout(dtype, shape, label, what)
    if dtype.kind not in "biuf":
        raise PointCloudError(f"{label}: NPY {what} is not numeric")
    if len(shape) == 1 or (len(shape) == 2 and shape[1] == 1):
        raise PointCloudError(
            f"{label}: NPY {what} holds one column per row (per-point labels or values?), not points: "
            f"a points array is N x K with x, y, z among its columns, named with {opt('columns', EXAMPLE)} "
            f"unless K is {describe_defaults(WIDTHS)}"
        )
    if len(shape) != 2:
        raise PointCloudError(f"{label}: NPY {what}: expected an N x K table of points (K >= 3)")
    width = shape[1]
    if columns is not None:
        if len(columns) != width:
            raise PointCloudError(
                f"{label}: {opt('columns')} names {len(columns)} columns ({','.join(columns)}) "
                f"but the NPY array has {width} ({what})"
            )
        return NpyLayout(columns)
    return NpyLayout(default_layout(width, WIDTHS, label, f"NPY {what} has {width} columns"))


def _structured_layout(dtype: np.dtype, shape: tuple[int, ...], label: str, what: str) -> NpyLayout:
    if len(shape) != 1:
        raise PointCloudError(f"{label}: NPY structured {what}: expected one record per point (1-D)")
    fields, names = [], []
    for field in dtype.names:
        sub = dtype.fields[field][0]
        name = normalise_name(field)
        if sub.base.kind in "biuf" and sub.base.names is None and len(sub.shape) <= (0 if name in XYZ else 1):
            fields.append(field)
            names.append(name)
    names_t = check_names(tuple(names), label, f"the NPY fields ({', '.join(dtype.names)})")
    return NpyLayout(names_t, tuple(fields))


def npy_parts(table: np.ndarray, layout: NpyLayout) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(points, attributes)`` of the rows ``table`` (a slice of the array) under ``layout``."""
    if not layout.structured:
        points, attrs = split_columns(native(table), layout.names)
    else:
        by_name = dict(zip(layout.names, layout.fields, strict=True))
        cols = {a: native(table[by_name[a]]) for a in XYZ}
        points = stack_points([cols[a] for a in XYZ])
        attrs = {n: native(table[f]) for n, f in by_name.items() if n not in XYZ}
        attrs, _ = decode_colours(attrs)
    if points.dtype not in (np.float32, np.float64):
        points = points.astype(np.float64)
    return points, attrs


def read_npy(f: BinaryIO, label: str, columns: tuple[str, ...] | None = None) -> PointCloud:
    """Read a points ``.npy`` from the binary stream ``f`` (see the module docs for the layouts)."""
    array = load_npy(f, label)
    layout = npy_layout(array.dtype, array.shape, label, columns)
    points, attrs = npy_parts(array, layout)
    return PointCloud(points, attrs, format="npy", source=label)


def npy_table(cloud: PointCloud) -> tuple[tuple[str, ...], np.ndarray]:
    """The column names and the ``(N, 3 + A)`` float table ``write_npy`` writes."""
    cols = flat_columns(cloud.attributes)
    names = (*XYZ, *(n for n, _ in cols))
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PointCloudError(f"NPY columns would repeat the names {', '.join(dup)}; rename attributes")
    wide = cloud.points.dtype == np.float64 or any(_needs_float64(a) for _, a in cols)
    table = np.empty((len(cloud), len(names)), np.float64 if wide else np.float32)
    table[:, :3] = cloud.points
    for i, (_, a) in enumerate(cols):
        table[:, 3 + i] = a
    return names, table


def _needs_float64(a: np.ndarray) -> bool:
    if a.dtype == np.float64:
        return True
    if a.dtype.kind in "iu" and a.dtype.itemsize > 2 and a.size:
        return bool(max(abs(int(a.min())), abs(int(a.max()))) > _FLOAT32_INTS)
    return False


def write_npy(f: BinaryIO, cloud: PointCloud) -> None:
    """Write ``cloud`` as one float ``.npy`` array: x, y, z, then every attribute (module docs)."""
    _, table = npy_table(cloud)
    np.lib.format.write_array(f, table, allow_pickle=False)


__all__ = [
    "MAGIC",
    "NpyLayout",
    "array_header",
    "load_npy",
    "npy_layout",
    "npy_parts",
    "npy_table",
    "read_npy",
    "write_npy",
]
