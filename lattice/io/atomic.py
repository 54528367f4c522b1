"""Atomic file replacement: write to a temporary file next to the target, then rename."""

from __future__ import annotations

import errno
import functools
import os
import re
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


TEMP_TAG = ".lattice-"  # temp files are .<name>.lattice-<pid>-<random>.tmp
_TEMP = re.compile(r"^\..+\.lattice-(\d+)-[^.]+\.tmp$")


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (another user's counts as alive)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except OSError:
        return True
    return True


def remove_stale_temps(directory: str | os.PathLike, *, older_than: float | None = None) -> list[Path]:
    """Remove the temp files that lattice writers left in ``directory`` when they were killed
    (SIGKILL, a power cut): files named ``.<name>.lattice-<pid>-<random>.tmp`` whose writer
    process no longer exists (and, with ``older_than``, last modified before that time, in
    seconds since the epoch: a batch passes its start). Returns what was removed; anything
    unreadable is left alone."""
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        m = _TEMP.match(entry.name)
        if not m or _alive(int(m.group(1))):
            continue
        try:
            if older_than is not None and entry.stat(follow_symlinks=False).st_mtime >= older_than:
                continue
            if entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(Path(entry.path))
        except OSError:
            continue
    return removed


def is_special(path: str | os.PathLike) -> bool:
    """True for an existing path that is not a regular file or directory (a FIFO, a character or
    block device, a socket): written to as a stream, never replaced."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


@contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Yield a binary file whose contents replace ``path`` only if the block succeeds.

    The data go to a hidden temporary file in the same directory
    (``.<name>.lattice-<pid>-<random>.tmp``), which is flushed, fsynced and renamed over
    ``path`` with ``os.replace`` on success. If the block raises (SIGINT, and SIGTERM in the
    CLI, included), the temporary file is removed and an existing ``path`` is left
    untouched; temp files of writers that were killed outright are removed by the next
    write into that directory (``remove_stale_temps``). The new file gets the existing
    file's permissions, or the usual ``0o666 & ~umask``. A path that is a FIFO or a device
    is refused here: open it and write to it as a stream.

    >>> with atomic_write("out.ply") as f:
    ...     f.write(data)
    """
    target = Path(path)
    if target.is_dir():
        raise IsADirectoryError(f"{target}: is a directory, expected a file path")
    if is_special(target):
        raise OSError(
            errno.EINVAL, "is not a regular file (a FIFO or device); write to it as a stream", str(target)
        )
    directory = target.parent
    remove_stale_temps(directory)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{target.name}{TEMP_TAG}{os.getpid()}-", suffix=".tmp", dir=directory
    )
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
