"""Points in text tables: ``.xyz``, ``.txt``, ``.csv``, ``.pts``, ``.asc`` (one point per line).

Reading. The delimiter is sniffed from the first data line (``;``, ``,``, tab, else any
whitespace). Blank lines and comment lines (``#``, ``//``) are skipped. The columns are
named, in this order, by ``columns=``; by a header row (a first line of names:
``X,Y,Z,Intensity`` -> ``x, y, z, intensity``; ``r,g,b`` -> ``red, green, blue``); by a
comment line just before the data that names every column (CloudCompare's
``//X,Y,Z,R,G,B``); else by the width: 3 x, y, z; 4 + intensity; 6 + red, green, blue;
7 + intensity, red, green, blue (Leica PTS). A first line holding only an integer is a PTS
point count: it is skipped and checked against the rows. A header row with no rows after
it is an empty cloud of those columns. Values are parsed by NumPy
(``np.loadtxt``) a block of lines at a time, never value by value in Python.

Types: coordinates and other values are float64 (what the text says, exactly). A colour
channel whose values are all whole numbers in 0..255 is uint8 (0..65535: uint16), and a
categorical id (``label``, ``classification``, ...: ``kinds.attribute_kind``) whose values
are all whole numbers is int32, so their kinds and reductions are right.

Writing: a header row of names, then one row per point: comma-separated for ``.csv``,
space-separated otherwise. float32 values are written with 9 significant digits, float64
with the shortest text that reads back to the same double, integers as integers, and
colour channels as 0..255 integers (``kinds.as_8bit_colours``).
"""

from __future__ import annotations

import codecs
import io
import itertools
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, NoReturn

import numpy as np

from lattice.io._common import PointCloudError, check_points, opt
from lattice.io._points import PointCloud
from lattice.io.columns import (
    SKIP,
    XYZ,
    check_names,
    default_layout,
    flat_columns,
    normalise_name,
    split_columns,
)
from lattice.io.kinds import COLOUR_CHANNELS, as_8bit_colours, attribute_kind

COMMENTS = ("#", "//")
CHUNK_LINES = 1 << 18
_INT32 = (-(2**31), 2**31 - 1)
_WRITE_ROWS = 1 << 16


@dataclass(frozen=True)
class TextLayout:
    """What the head of a text table says: column names, delimiter (None: whitespace), where data start."""

    names: tuple[str, ...]
    delimiter: str | None
    first_line: int  # 1-based number of the first data line
    declared: int | None = None  # a PTS count line's value
    count_line: int | None = None
    quoted: bool = False  # values in double quotes (removed before parsing)


def _delimiter(line: str) -> str | None:
    for d in (";", ",", "\t"):
        if d in line:
            return d
    return None


def _fields(line: str, delimiter: str | None) -> list[str]:
    body = line.split("#", 1)[0].strip()
    parts = body.split() if delimiter is None else body.split(delimiter)
    return [p.strip().strip("\"'") for p in parts]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _names(layout_width: int, columns, header, comment, label: str) -> tuple[str, ...]:
    """The column names, from ``columns=``, a header row, a naming comment, or the width."""
    if columns is not None:
        if len(columns) != layout_width:
            raise PointCloudError(
                f"{label}: {opt('columns')} names {len(columns)} columns ({','.join(columns)}) "
                f"but the rows have {layout_width} values"
            )
        return columns
    if header is not None:
        line, fields = header
        names = tuple(normalise_name(f) for f in fields)
        if len(names) != layout_width:
            raise PointCloudError(
                f"{label}: the header (line {line}) names {len(names)} columns but the rows have {layout_width} values"
            )
        return check_names(names, label, f"the header (line {line}: {','.join(fields)})")
    if comment is not None:
        names = tuple(normalise_name(f) for f in comment)
        if len(names) == layout_width and all(not _is_number(f) for f in comment) and set(XYZ) <= set(names):
            return check_names(names, label, "the naming comment")
    found = f"rows have {layout_width} values and no header row names them"
    return default_layout(layout_width, (3, 4, 6, 7), label, found)


def sniff(lines: Iterator[str], label: str, columns: tuple[str, ...] | None) -> tuple[TextLayout, list[str]]:
    """Read ``lines`` up to the first data line; returns the layout and ``[first data line]``."""
    count = header = comment = None
    lineno = 0
    for line in lines:
        lineno += 1
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith(COMMENTS):
            body = stripped[2:] if stripped.startswith("//") else stripped[1:]
            comment = [f for f in _fields(body.replace("#", " "), _delimiter(body)) if f]
            continue
        fields = _fields(stripped, _delimiter(stripped))
        numeric = [_is_number(f) for f in fields]
        if count is None and header is None and len(fields) == 1 and fields[0].isdigit():
            count = (lineno, int(fields[0]))
        elif header is None and not any(numeric):
            header = (lineno, fields)
        elif not all(numeric):
            bad = numeric.index(False)
            raise PointCloudError(
                f"{label}: line {lineno}, column {bad + 1}: {fields[bad]!r} is not a number"
            )
        else:
            return _layout(lineno, fields, stripped, count, header, comment, label, columns), [line]
    if header is not None:  # a header row and no rows: an empty table of those columns
        names = _names(len(header[1]), columns, header, None, label)
        declared, count_line = (count[1], count[0]) if count is not None else (None, None)
        return TextLayout(names, None, lineno + 1, declared, count_line), []
    _no_data(label, lineno, count)


def _layout(lineno, fields, line, count, header, comment, label, columns) -> TextLayout:
    width = len(fields)
    if width < 3:
        raise PointCloudError(
            f"{label}: line {lineno} holds {width} value{'s' if width > 1 else ''} per row (labels or values?), "
            "not points: a point needs x, y, z"
        )
    names = _names(width, columns, header, comment, label)
    declared, count_line = (count[1], count[0]) if count is not None else (None, None)
    return TextLayout(names, _delimiter(line), lineno, declared, count_line, '"' in line)


def _no_data(label: str, lines: int, count) -> NoReturn:
    if count is not None:
        raise PointCloudError(f"{label}: only a point-count line (line {count[0]}), no data rows")
    what = "the file is empty" if lines == 0 else f"no data rows in {lines} lines (blank or comments)"
    raise PointCloudError(f"{label}: {what}")


class TextTable:
    """A text table opened for reading (a context manager): ``layout``, then ``blocks(k)``."""

    def __init__(self, f: BinaryIO, label: str, columns: tuple[str, ...] | None = None):
        self.label = label
        self._text = io.TextIOWrapper(f, encoding="utf-8-sig", newline=None)
        head_lines = self._guard(self._text)
        try:
            self.layout, head = sniff(head_lines, label, columns)
        except BaseException:
            head_lines.close()
            self._text.detach()
            raise
        head_lines.close()  # the rest is read straight from the wrapper (no Python step per line)
        self._rest = itertools.chain(head, self._text)

    def __enter__(self) -> TextTable:
        return self

    def __exit__(self, *exc) -> None:
        self._text.detach()  # leave the caller's binary file open

    def _guard(self, text: io.TextIOWrapper) -> Iterator[str]:
        try:
            for line in text:  # noqa: UP028 (``yield from`` would close ``text`` on close())
                yield line
        except UnicodeDecodeError as e:
            raise self._not_utf8(e) from e

    def _not_utf8(self, e: UnicodeDecodeError) -> PointCloudError:
        line = _bad_utf8_line(self._text.buffer)
        return PointCloudError(f"{self.label}: line {line} is not UTF-8 text ({e.reason})")

    def blocks(self, chunk_lines: int = CHUNK_LINES) -> Iterator[np.ndarray]:
        """Yield float64 ``(n, width)`` tables of up to ``chunk_lines`` lines each (comments skipped)."""
        lineno, rows = self.layout.first_line, 0
        while True:
            try:
                block = list(itertools.islice(self._rest, chunk_lines))
            except UnicodeDecodeError as e:
                raise self._not_utf8(e) from e
            if not block:
                return
            table = _parse(block, lineno, self.layout, self.label)
            lineno += len(block)
            rows += len(table)
            check_points(rows, self.label, f"the table (through line {lineno - 1})")
            if len(table):
                yield table


def _bad_utf8_line(f: BinaryIO) -> int:
    """The line holding the first byte that is not UTF-8 (a block scan from the start, on error only)."""
    f.seek(0)
    decoder = codecs.getincrementaldecoder("utf-8")()
    lines = 1
    while block := f.read(1 << 20):
        try:
            decoder.decode(block)
        except UnicodeDecodeError as e:
            return lines + block.count(b"\n", 0, max(e.start, 0))
        lines += block.count(b"\n")
    return lines


def _parse(block: list[str], lineno: int, layout: TextLayout, label: str) -> np.ndarray:
    width = len(layout.names)
    lines = [line.replace('"', "") for line in block] if layout.quoted else block
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data": comments only
            # one comment marker keeps NumPy's C parser on its fast path; "//" needs the general one
            comments = COMMENTS if "//" in "".join(lines) else "#"
            table = np.loadtxt(
                lines, dtype=np.float64, delimiter=layout.delimiter, comments=comments, ndmin=2
            )
    except ValueError as e:
        _diagnose(block, lineno, layout, label, str(e))
    if table.shape[0] == 0:
        return np.empty((0, width))
    if table.shape[1] != width:
        _diagnose(block, lineno, layout, label, f"rows have {table.shape[1]} values")
    return table


def _diagnose(block: list[str], lineno: int, layout: TextLayout, label: str, reason: str) -> None:
    """Find the first bad line of ``block`` (a slow loop, only once parsing has failed) and raise."""
    width = len(layout.names)
    for i, line in enumerate(block):
        stripped = line.strip()
        if not stripped or stripped.startswith(COMMENTS):
            continue
        fields = _fields(stripped.split("//", 1)[0], layout.delimiter)
        if len(fields) != width:
            raise PointCloudError(
                f"{label}: line {lineno + i} has {len(fields)} values, expected {width} ({','.join(layout.names)})"
            )
        for j, f in enumerate(fields):
            if not _is_number(f):
                raise PointCloudError(f"{label}: line {lineno + i}, column {j + 1}: {f!r} is not a number")
    last = lineno + len(block) - 1
    raise PointCloudError(
        f"{label}: lines {lineno}-{last}: cannot parse the values ({reason.splitlines()[0]})"
    )


class ColumnStats:
    """Per column, over every row seen: all whole numbers? and the finite minimum / maximum."""

    def __init__(self, width: int):
        self.rows = 0
        self.whole = np.ones(width, bool)
        self.lo = np.full(width, np.inf)
        self.hi = np.full(width, -np.inf)

    def add(self, table: np.ndarray) -> None:
        """Take in the rows of a ``(n, width)`` float64 table."""
        if not len(table):
            return
        finite = np.isfinite(table)
        with np.errstate(invalid="ignore"):
            self.whole &= np.all(finite & (table == np.floor(table)), axis=0)
        self.lo = np.minimum(self.lo, np.where(finite, table, np.inf).min(axis=0))
        self.hi = np.maximum(self.hi, np.where(finite, table, -np.inf).max(axis=0))
        self.rows += len(table)

    def dtypes(self, names: tuple[str, ...]) -> dict[str, np.dtype]:
        """The type of each attribute column: integers for whole colours and ids, else float64."""
        out = {}
        for j, name in enumerate(names):
            if name in XYZ or name == SKIP:
                continue
            lo, hi, whole = self.lo[j], self.hi[j], bool(self.whole[j])
            dt = np.dtype(np.float64)
            if whole and name in COLOUR_CHANNELS and lo >= 0 and hi <= 65535:
                dt = np.dtype(np.uint8 if hi <= 255 else np.uint16)
            elif (
                whole
                and attribute_kind(name, np.float64) == "categorical"
                and _INT32[0] <= lo <= hi <= _INT32[1]
            ):
                dt = np.dtype(np.int32)
            out[name] = dt
        return out


def check_count(layout: TextLayout, rows: int, label: str) -> None:
    """A PTS count line must match the rows that follow it."""
    if layout.declared is not None and layout.declared != rows:
        raise PointCloudError(
            f"{label}: line {layout.count_line} declares {layout.declared} points "
            f"but {rows} data row{'' if rows == 1 else 's'} follow{'s' if rows == 1 else ''}"
        )


def read_text(f: BinaryIO, label: str, columns: tuple[str, ...] | None = None) -> PointCloud:
    """Read a text table of points from the binary stream ``f`` (see the module docs)."""
    with TextTable(f, label, columns) as table:
        blocks = list(table.blocks())
        layout = table.layout
    data = (
        np.concatenate(blocks)
        if len(blocks) > 1
        else blocks[0]
        if blocks
        else np.empty((0, len(layout.names)))
    )
    check_count(layout, len(data), label)
    stats = ColumnStats(data.shape[1])
    stats.add(data)
    points, attrs = split_columns(data, layout.names, stats.dtypes(layout.names))
    return PointCloud(points, attrs, format="text", source=label)


# ---- writing ---------------------------------------------------------------------------


def _value_format(a: np.ndarray) -> str:
    if a.dtype.kind in "biu":
        return "%d"
    return {np.dtype(np.float32): "%.9g", np.dtype(np.float16): "%.5g"}.get(a.dtype, "%r")


def write_text(f: BinaryIO, cloud: PointCloud, delimiter: str = " ") -> None:
    """Write ``cloud`` as a header row of names and one ``delimiter``-separated row per point."""
    attrs = {**cloud.attributes, **as_8bit_colours(cloud.attributes, cloud.attribute_info())}
    cols = [(a, cloud.points[:, i]) for i, a in enumerate(XYZ)] + flat_columns(attrs)
    names = [n for n, _ in cols]
    for n in names:
        if not n or any(c.isspace() or c in ",;#\"'" for c in n) or n.startswith("//") or _is_number(n):
            raise PointCloudError(f"attribute name {n!r} cannot be a text column name; rename it")
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise PointCloudError(f"text columns would repeat the names {', '.join(dup)}; rename attributes")
    row = delimiter.join(_value_format(a) for _, a in cols) + "\n"
    f.write((delimiter.join(names) + "\n").encode())
    n = len(cloud)
    for s in range(0, n, _WRITE_ROWS):
        m = min(_WRITE_ROWS, n - s)
        values = np.empty((m, len(cols)), object)
        for j, (_, a) in enumerate(cols):
            values[:, j] = a[s : s + m]
        f.write(((row * m) % tuple(values.ravel().tolist())).encode())


__all__ = [
    "COMMENTS",
    "ColumnStats",
    "TextLayout",
    "TextTable",
    "check_count",
    "read_text",
    "sniff",
    "write_text",
]
