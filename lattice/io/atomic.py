"""Atomic file replacement: write to a temporary file next to the target, then rename.

For a URL (``lattice.io.storage``) the same holds in the object-store sense: the data are
spooled to a local temporary file, uploaded under a temporary key in the destination prefix,
then committed by a server-side copy to the final key and a delete of the temporary one (S3
has no rename; its copy is atomic), so a reader never sees a partial object under the final
name. Temporary names carry the writer's host and pid, so clean-ups on a directory shared by
several machines only judge their own host's writers alive or dead.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import shutil
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


TEMP_TAG = ".lattice-"  # temp files are .<name>.lattice-<host>-<pid>-<random>.tmp
# (older lattice wrote .<name>.lattice-<pid>-<random>.tmp: read as this host's)
_TEMP = re.compile(r"^\..+\.lattice-(?:(?P<host>[A-Za-z0-9_]+)-)?(?P<pid>\d+)-[^.]+\.tmp$")


@functools.cache
def host_tag() -> str:
    """This machine's name as temp names carry it: the host name's first label, ``[A-Za-z0-9_]`` only."""
    import socket  # here, not at import: `lattice info` starts without it

    name = socket.gethostname().split(".")[0]
    return re.sub(r"[^A-Za-z0-9_]", "_", name) or "host"


def temp_prefix(name: str) -> str:
    """The start of a temp name for ``name`` written by this process: ``.<name>.lattice-<host>-<pid>-``."""
    return f".{name}{TEMP_TAG}{host_tag()}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists and can still write (another user's counts as alive).

    A zombie counts as dead: a SIGKILLed writer whose parent died too stays a zombie until
    something reaps it, and in a container whose PID 1 is not an init that is forever."""
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
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether ``pid`` has exited but not been reaped (Linux ``/proc``; False where unknown)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    state = stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3]  # the field after "(comm)"
    return state in (b"Z", b"X")


def stale(name: str, modified: float | None, older_than: float | None, *, local: bool = True) -> bool:
    """Whether the file ``name`` is a lattice temp that a killed writer left.

    A temp written on this host is stale when its writer pid no longer exists and, with
    ``older_than``, it was last modified before that time (seconds since the epoch: a batch
    passes its start). A temp of another host cannot be judged by pid: it is stale only when
    last modified before ``older_than``, never without it. Names without a host (older
    lattice) count as this host's for ``local`` files, as another host's for URL keys."""
    m = _TEMP.match(name)
    if not m:
        return False
    if older_than is not None and (modified is None or modified >= older_than):
        return False
    host = m.group("host") or (host_tag() if local else None)
    if host == host_tag():
        return not _alive(int(m.group("pid")))
    return older_than is not None


def remove_stale_temps(directory: str | os.PathLike, *, older_than: float | None = None) -> list[str]:
    """Remove the temp files that lattice writers left in ``directory`` when they were killed
    (SIGKILL, a power cut): files named ``.<name>.lattice-<host>-<pid>-<random>.tmp`` that
    ``stale`` judges dead. For a URL, every temp key under the prefix is considered (object
    stores have no folders). Returns what was removed; anything unreadable is left alone."""
    from lattice.io import storage

    if storage.is_url(directory):
        return _remove_stale_keys(os.fspath(directory), older_than)
    removed = []
    try:
        entries = list(os.scandir(storage.local_path(directory)))
    except OSError:
        return removed
    for entry in entries:
        if not _TEMP.match(entry.name):
            continue
        try:
            modified = entry.stat(follow_symlinks=False).st_mtime if older_than is not None else None
            if stale(entry.name, modified, older_than) and entry.is_file(follow_symlinks=False):
                os.unlink(entry.path)
                removed.append(entry.path)
        except OSError:
            continue
    return removed


def _remove_stale_keys(prefix: str, older_than: float | None) -> list[str]:
    from lattice.io import storage

    try:
        found = storage.listing(prefix)
    except OSError:
        return []
    fs, _ = storage.filesystem(prefix)
    removed = []
    for url, info in found:
        name = storage.basename(url)
        if not _TEMP.match(name):
            continue
        modified = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("created")
        seconds = modified.timestamp() if hasattr(modified, "timestamp") else modified
        if stale(name, seconds if isinstance(seconds, int | float) else None, older_than, local=False):
            try:
                fs.rm_file(info.get("name") or url)
                removed.append(url)
            except Exception:  # a key another run removed first, a refused delete: left alone
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
    from lattice.io import storage

    if storage.is_url(path):
        with _atomic_upload(os.fspath(path)) as f:
            yield f
        return
    target = Path(storage.local_path(path))
    if target.is_dir():
        raise IsADirectoryError(f"{target}: is a directory, expected a file path")
    if is_special(target):
        raise OSError(
            errno.EINVAL, "is not a regular file (a FIFO or device); write to it as a stream", str(target)
        )
    directory = target.parent
    remove_stale_temps(directory)
    fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix(target.name), suffix=".tmp", dir=directory)
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


@contextmanager
def _atomic_upload(url: str) -> Iterator[BinaryIO]:
    """``atomic_write`` for a URL: spool locally (writers may seek), upload to a temp key in the
    destination prefix, copy it to the final key, delete the temp key. A failure at any step
    removes the temp key (best effort: a killed process leaves it to ``remove_stale_temps``)
    and leaves an existing object untouched."""
    from lattice.io import storage

    fs, key = storage.filesystem(url)
    parent, _, name = key.rstrip("/").rpartition("/")
    if not name:
        raise IsADirectoryError(errno.EISDIR, "is a bucket or prefix, expected an object key", url)
    temp = f"{parent}/{temp_prefix(name)}{os.urandom(4).hex()}.tmp"
    with tempfile.TemporaryFile() as spool:
        yield spool
        spool.flush()
        spool.seek(0)
        try:
            with storage.remote_errors(url, "cannot upload"):
                with fs.open(temp, "wb", block_size=max(storage.BLOCK, 5 << 20)) as out:
                    shutil.copyfileobj(spool, out, storage.BLOCK)
            with storage.remote_errors(url, "cannot commit the upload"):
                fs.mv(temp, key)  # no rename in S3: server-side copy to the key, then delete
        except BaseException:
            try:
                fs.rm_file(temp)
            except Exception:  # never uploaded, or the store is gone: nothing more to do
                pass
            raise
