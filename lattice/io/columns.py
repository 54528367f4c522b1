"""Column names for formats that do not name their own fields: ``.npy`` arrays, text tables and
raw float32 ``.bin`` files.

A layout is a tuple of names, one per column, taken from ``columns=`` (a list or a comma
string), a text header row, or the default for the width (``default_columns``). Names are
lower-cased and PLY-style ``r/g/b/a`` become ``red/green/blue/alpha``
(``kinds.canonical_name``); ``x``, ``y`` and ``z`` must be among them and become the
points; ``_`` skips a column; every other column becomes a 1-D attribute.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from lattice.io._common import PointCloudError, opt
from lattice.io.kinds import canonical_name

SKIP = "_"
XYZ = ("x", "y", "z")
# Defaults for an unnamed table of this many columns (text also has PTS's 7-column layout).
DEFAULT_COLUMNS: dict[int, tuple[str, ...]] = {
    3: XYZ,
    4: (*XYZ, "intensity"),
    6: (*XYZ, "red", "green", "blue"),
    7: (*XYZ, "intensity", "red", "green", "blue"),
}
EXAMPLE = "x,y,z,red,green,blue"


def normalise_name(name: str) -> str:
    """A column name as lattice stores it: stripped, lower case, spaces as ``_``, ``r`` -> ``red``."""
    return canonical_name("_".join(str(name).strip().strip("\"'").lower().split()))


def parse_columns(columns: str | Sequence[str] | None, label: str) -> tuple[str, ...] | None:
    """``columns=`` as a tuple of normalised names (None stays None); errors name ``label``.

    >>> parse_columns("X,Y,Z,r,g,b", "a.bin")
    ('x', 'y', 'z', 'red', 'green', 'blue')
    """
    if columns is None:
        return None
    raw = columns.split(",") if isinstance(columns, str) else list(columns)
    if not all(isinstance(c, str) for c in raw):
        raise PointCloudError(f"{label}: {opt('columns')} must be names (strings), got {columns!r}")
    names = tuple(normalise_name(c) for c in raw)
    return check_names(names, label, f"{opt('columns')} {','.join(raw)!r}")


def check_names(names: tuple[str, ...], label: str, where: str) -> tuple[str, ...]:
    """``names`` if they are non-empty, unique (``_`` aside) and include x, y, z; ``where`` says
    where they came from in the error (``columns= 'a,b'``, ``the header (line 1)``)."""
    if not names or any(not n for n in names):
        raise PointCloudError(f"{label}: {where} has an empty column name")
    named = [n for n in names if n != SKIP]
    dup = sorted({n for n in named if named.count(n) > 1})
    if dup:
        raise PointCloudError(f"{label}: {where} names {', '.join(dup)} more than once")
    missing = [a for a in XYZ if a not in named]
    if missing:
        raise PointCloudError(
            f"{label}: {where} has no {', '.join(missing)} column; the points need x, y and z "
            f"(name the columns with {opt('columns', EXAMPLE)}, one name per column, _ to skip one)"
        )
    return names


def default_columns(width: int, widths: Sequence[int] = (3, 4, 6, 7)) -> tuple[str, ...] | None:
    """The default names of an unnamed table ``width`` columns wide (None when there is none)."""
    return DEFAULT_COLUMNS[width] if width in widths else None


def describe_defaults(widths: Sequence[int]) -> str:
    """``3 (x,y,z), 4 (x,y,z,intensity), ...`` for error messages."""
    return ", ".join(f"{w} ({','.join(DEFAULT_COLUMNS[w])})" for w in widths)


def default_layout(width: int, widths: Sequence[int], label: str, found: str) -> tuple[str, ...]:
    """The default names of an unnamed table ``width`` columns wide, or a ``PointCloudError``
    saying which widths are understood without names; ``found`` says what the table is
    (``NPY array has 5 columns``)."""
    names = default_columns(width, widths)
    if names is None:
        raise PointCloudError(
            f"{label}: {found}; without names only {describe_defaults(widths)} columns are understood: "
            f"name each column with {opt('columns', EXAMPLE)} (_ skips one)"
        )
    return names


def split_columns(
    table: np.ndarray, names: tuple[str, ...], dtypes: dict[str, np.dtype] | None = None
) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """``(points (n, 3), {name: (n,)})`` from a ``(n, len(names))`` table.

    ``dtypes``: the type of each attribute (default: the table's); ``_`` columns are dropped.
    """
    index = {n: i for i, n in enumerate(names)}
    points = np.ascontiguousarray(table[:, [index[a] for a in XYZ]])
    attrs = {}
    for i, name in enumerate(names):
        if name in XYZ or name == SKIP:
            continue
        column = table[:, i]
        dt = (dtypes or {}).get(name, column.dtype)
        attrs[name] = np.ascontiguousarray(column.astype(dt, copy=False))
    return points, attrs


def flat_columns(attributes: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    """Every attribute as 1-D columns: ``(N,)`` as itself, ``(N, K)`` as ``name_0 … name_{K-1}``."""
    out = []
    for name, a in attributes.items():
        if a.ndim == 1:
            out.append((name, a))
        else:
            flat = a.reshape(len(a), math.prod(a.shape[1:]))  # -1 fails on 0 rows
            out += [(f"{name}_{k}", flat[:, k]) for k in range(flat.shape[1])]
    return out


__all__ = [
    "DEFAULT_COLUMNS",
    "SKIP",
    "XYZ",
    "check_names",
    "default_columns",
    "describe_defaults",
    "flat_columns",
    "normalise_name",
    "parse_columns",
    "split_columns",
]
