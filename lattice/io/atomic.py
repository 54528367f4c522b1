"""Atomic file replacement: write to a temporary file next to the target, then rename."""

from __future__ import annotations

import functools
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO


@functools.cache
def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _final_mode(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        return 0o666 & ~_umask()


@contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Yield a binary file whose contents replace ``path`` only if the block succeeds.

    The data go to a hidden temporary file in the same directory, which is flushed,
    fsynced and renamed over ``path`` with ``os.replace`` on success. If the block raises,
    the temporary file is removed and an existing ``path`` is left untouched. The new file
    gets the existing file's permissions, or the usual ``0o666 & ~umask``.

    >>> with atomic_write("out.ply") as f:
    ...     f.write(data)
    """
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(f"{target}: is a directory, expected a file path")
    directory = target.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _final_mode(target))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
