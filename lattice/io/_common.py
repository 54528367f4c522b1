"""Shared pieces of the readers and writers: the error type, input opening, exact reads, and
the budgets a reader checks a header against before it allocates (``max_points``, ``reading``)."""

from __future__ import annotations

import io
import os
import struct
import zipfile
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import numpy as np

from lattice import settings

PathOrFile = str | os.PathLike | BinaryIO


_OPT = "\x00"  # brackets an option marker made by ``opt`` inside a message


def opt(name: str, value: object = None) -> str:
    """An option named in an error message, rendered for whoever reads it.

    The library's text names the Python parameter (``format='nuscenes'``); the CLI's
    (``PointCloudError.cli_message``) names its flag (``--format nuscenes``). Flags are the
    parameter with ``_`` as ``-``.

    >>> str(PointCloudError(f"x.bin: pass {opt('format', 'nuscenes')}"))
    "x.bin: pass format='nuscenes'"
    """
    return f"{_OPT}{name}{_OPT}{'' if value is None else value}{_OPT}"


def _render(text: str, cli: bool) -> str:
    parts = text.split(_OPT)
    if len(parts) < 4:
        return text
    out = [parts[0]]
    for i in range(1, len(parts) - 2, 3):
        name, value, rest = parts[i], parts[i + 1], parts[i + 2]
        if cli:
            flag = "--" + name.replace("_", "-")
            out.append(f"{flag} {value}" if value else flag)
        else:
            out.append(f"{name}={value!r}" if value else f"{name}=")
        out.append(rest)
    return "".join(out)


class PointCloudError(ValueError):
    """A point-cloud or sparse-tensor file could not be read or written.

    The message is one line and starts with the file it is about. Options it suggests are
    named as the library's parameters in ``str(err)`` and as the CLI's flags in
    ``err.cli_message`` (see ``opt``).
    """

    def __str__(self) -> str:
        return _render(str(self.args[0]) if self.args else "", cli=False)

    @property
    def cli_message(self) -> str:
        """The message with the CLI's flag names (``--format``) instead of parameters."""
        return _render(str(self.args[0]) if self.args else "", cli=True)

    @property
    def template(self) -> str:
        """The raw message, option markers included: wrap it (``f"{label}: {err.template}"``)
        to add context without losing the two renderings."""
        return str(self.args[0]) if self.args else ""


MAX_POINTS_ENV = settings.MAX_POINTS


def max_points() -> int:
    """The most points a reader accepts from a header: ``LATTICE_MAX_POINTS`` (read by
    ``lattice.settings`` at every call, so a test or a wrapper can lower it), default 2^31 - 1.
    A header that declares more is refused before anything is allocated; see docs/io.md,
    "Hostile input"."""
    try:
        return settings.max_points()
    except ValueError as e:
        raise PointCloudError(str(e)) from None


def check_points(n: int, label: str, what: str) -> int:
    """``n`` (a count a header declares), unless it is negative or above ``max_points()``.

    ``what`` says who declares it: ``"PCD header: POINTS"`` gives
    ``scan.pcd: PCD header: POINTS is -1, not a count``.
    """
    if n < 0:
        raise PointCloudError(f"{label}: {what} is {n}, not a count")
    ceiling = max_points()
    if n > ceiling:
        raise PointCloudError(
            f"{label}: {what} is {n} points, above the ceiling of {ceiling} ({MAX_POINTS_ENV})"
        )
    return n


def one_line(err: BaseException, limit: int = 160) -> str:
    """An exception's message on one line of at most ``limit`` characters (its type name when
    it has none): hostile bytes echoed by a library's message must not flood the terminal."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


# What parsing hostile bytes raises from NumPy, plyfile, laspy, zipfile, zlib, struct and the
# tokenizers (UnicodeDecodeError is a ValueError). Not TypeError / AttributeError: those are bugs.
HOSTILE_ERRORS = (
    ValueError,
    ArithmeticError,  # OverflowError, and ZeroDivisionError from a laspy extra-bytes record of 0 elements
    EOFError,
    IndexError,
    KeyError,
    NotImplementedError,
    struct.error,
    zipfile.BadZipFile,
    zlib.error,
)


@contextmanager
def reading(label: str, what: str) -> Iterator[None]:
    """Inside this block, whatever a reader raises on hostile bytes is a one-line ``PointCloudError``
    naming ``label``: ``MemoryError`` as ``not enough memory to read this <what> file``, the
    ``HOSTILE_ERRORS`` as ``malformed <what>: <their message>``. ``PointCloudError`` passes through."""
    try:
        yield
    except PointCloudError:
        raise
    except MemoryError:
        raise PointCloudError(f"{label}: not enough memory to read this {what} file") from None
    except HOSTILE_ERRORS as e:
        raise PointCloudError(f"{label}: malformed {what}: {one_line(e)}") from e


def is_file_like(obj: object) -> bool:
    """True for an object with a ``read`` or ``write`` method (a stream), false for paths."""
    return hasattr(obj, "read") or hasattr(obj, "write")


def label_of(path_or_file: PathOrFile) -> str:
    """The name used in error messages: the path, a stream's ``name``, or ``<stream>``."""
    if is_file_like(path_or_file):
        name = getattr(path_or_file, "name", None)
        return name if isinstance(name, str) else "<stream>"
    return os.fspath(path_or_file)


def output_label(dst: PathOrFile) -> str:
    """How summaries name an output: ``-`` for stdout, a stream's file name (a FIFO, a device),
    else the path."""
    if is_file_like(dst):
        name = getattr(dst, "name", None)
        return name if isinstance(name, str) and not name.startswith("<") else "-"
    return os.fspath(dst)


def check_readable_path(path: str | os.PathLike, label: str | None = None) -> Path | str:
    """Raise ``PointCloudError`` unless ``path`` is an existing, non-empty regular file (a URL:
    an object); the errors name ``label`` (default: the path as a ``Path`` prints it). Returns
    the ``Path``, or the URL as given."""
    from lattice.io import storage

    if storage.is_url(path):
        label = os.fspath(path) if label is None else label
        size = storage.file_size(path)
        if size is None:
            raise PointCloudError(
                f"{label}: " + ("is a prefix, expected a file" if storage.is_dir(path) else "no such file")
            )
        if size == 0:
            raise PointCloudError(f"{label}: file is empty")
        return os.fspath(path)
    p = Path(storage.local_path(path))
    label = str(p) if label is None else label
    if not p.exists():
        raise PointCloudError(f"{label}: no such file")
    if p.is_dir():
        raise PointCloudError(f"{label}: is a directory, expected a file")
    if p.stat().st_size == 0:
        raise PointCloudError(f"{label}: file is empty")
    return p


@contextmanager
def open_input(path_or_file: PathOrFile) -> Iterator[tuple[BinaryIO, str]]:
    """Yield ``(binary file, label)`` for a path or a readable binary stream.

    Paths are checked (missing, directory, empty) and opened; a stream is read to the
    end into memory (so pipes work with readers that seek) and must not be empty.
    """
    label = label_of(path_or_file)
    if is_file_like(path_or_file):
        data = path_or_file.read()
        if isinstance(data, str):
            raise PointCloudError(f"{label}: expected a binary stream, got a text stream")
        if not data:
            raise PointCloudError(f"{label}: input is empty")
        yield io.BytesIO(data), label
        return
    from lattice.io import storage

    path = check_readable_path(path_or_file)
    with storage.open_read(path) as f:
        yield f, label


def read_exact(f: BinaryIO, dtype: np.dtype, count: int, label: str, what: str) -> np.ndarray:
    """Read exactly ``count`` items of ``dtype`` from ``f`` into a new array (one copy, no loop).

    Raises ``PointCloudError`` naming ``what`` when fewer bytes are present than declared.
    """
    dtype = np.dtype(dtype)
    if count < 0:
        raise PointCloudError(f"{label}: {what}: the header declares {count} items, not a count")
    available = remaining_bytes(f)
    if available is not None and available < count * dtype.itemsize:  # before allocating
        raise PointCloudError(
            f"{label}: truncated {what}: header declares {count} items ({count * dtype.itemsize} bytes) "
            f"but only {available} bytes are present"
        )
    out = np.empty(count, dtype=dtype)
    raw = out.view(np.uint8) if out.size else np.empty(0, np.uint8)
    got = f.readinto(memoryview(raw)) if raw.size else 0
    got = got or 0
    while 0 < got < raw.size:  # streams may return short reads before EOF
        more = f.readinto(memoryview(raw)[got:])
        if not more:
            break
        got += more
    if got < raw.size:
        raise PointCloudError(
            f"{label}: truncated {what}: header declares {count} items ({raw.size} bytes) "
            f"but only {got} bytes are present"
        )
    return out


def remaining_bytes(f: BinaryIO) -> int | None:
    """Bytes left after the current position of a seekable file, or None when unknown."""
    try:
        here = f.tell()
        end = f.seek(0, io.SEEK_END)
        f.seek(here)
    except (OSError, AttributeError, ValueError):
        return None
    return end - here


def native(a: np.ndarray) -> np.ndarray:
    """``a`` as a contiguous array in native byte order (copying only when needed)."""
    a = np.asarray(a)
    if a.dtype.byteorder not in ("=", "|"):
        a = a.astype(a.dtype.newbyteorder("="))
    return np.ascontiguousarray(a)


@contextmanager
def open_output(path_or_file: PathOrFile) -> Iterator[BinaryIO]:
    """Yield a binary file to write to: an atomic temp file for a path, a buffer for a stream.

    A path is replaced only when the block succeeds (see ``atomic_write``). For a stream
    the data are collected in memory and written in one piece at the end, so writers may
    seek and a failure writes nothing.
    """
    if is_file_like(path_or_file):
        buf = io.BytesIO()
        yield buf
        try:
            path_or_file.write(buf.getbuffer())
            if hasattr(path_or_file, "flush"):
                path_or_file.flush()
        except BrokenPipeError:
            raise
        except OSError as e:  # a full disk behind stdout: say where, exit 1
            raise OSError(e.errno, f"cannot write: {e.strerror}", label_of(path_or_file)) from e
        return
    from lattice.io.atomic import atomic_write

    with atomic_write(path_or_file) as f:
        yield f
