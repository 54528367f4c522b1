"""Where a file lives: a local path or a URL, read and written through fsspec.

Every lattice reader, writer and batch reaches files through these functions, so a URL
works wherever a path does: ``s3://bucket/key`` (extra ``lattice[s3]``, which brings s3fs;
credentials, region and endpoint come from the standard AWS environment and config files,
``AWS_ENDPOINT_URL`` included, so S3-compatible stores such as MinIO work), any other
protocol fsspec knows (``gs://`` with gcsfs, ``memory://``, ...), and ``file://``, which is
the local path it names. Paths without a scheme are local and never need fsspec.

Reads are ranged: a URL opens as a seekable file that fetches the blocks a reader asks for
(``BLOCK`` bytes at a time), so a header, a zip directory or one array member costs what it
reads, not the whole object. Writes are atomic in the object-store sense; see
``lattice.io.atomic``. Errors of the store (no such key, no credentials, a refused request)
are ``OSError`` naming the URL; a URL without its fsspec package is a ``StorageError``
naming the extra to install.
"""

from __future__ import annotations

import errno
import os
import re
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from typing import BinaryIO

BLOCK = 8 << 20  # bytes per ranged read of a URL
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
_OBJECT_STORES = frozenset({"s3", "s3a", "gs", "gcs", "az", "abfs", "abfss", "adl", "oss"})
_PACKAGES = {"s3": "s3fs", "s3a": "s3fs", "gs": "gcsfs", "gcs": "gcsfs", "az": "adlfs", "abfs": "adlfs"}


class StorageError(ValueError):
    """A URL lattice cannot reach at all: fsspec or the protocol's package is missing, or the
    scheme is unknown."""


def scheme(item: object) -> str | None:
    """The URL scheme of ``item`` in lower case (``s3``, ``file``), or None for a plain path."""
    m = _SCHEME.match(item) if isinstance(item, str) else None
    return m.group(1).lower() if m else None


def is_url(item: object) -> bool:
    """True for a URL read through fsspec (any scheme but ``file://``, which is a local path)."""
    return scheme(item) not in (None, "file")


def local_path(item: str | os.PathLike) -> str:
    """``item`` as a local path: ``file:///data/a.ply`` -> ``/data/a.ply``; a path is returned as is."""
    text = os.fspath(item)
    if scheme(text) != "file":
        return text
    rest = urllib.parse.unquote(text[len("file://") :])
    if rest.startswith("localhost/"):
        rest = rest[len("localhost") :]
    return rest or "/"


def filesystem(url: str):
    """``(fsspec filesystem, path within it)`` for a URL; ``StorageError`` when it cannot be reached."""
    proto = scheme(url)
    package = _PACKAGES.get(proto or "", "fsspec")
    extra = "pip install 'lattice[s3]'" if package == "s3fs" else f"pip install {package}"
    try:
        import fsspec
    except ImportError as err:
        raise StorageError(f"{url}: {proto}:// URLs need fsspec and {package}: {extra}") from err
    try:
        return fsspec.core.url_to_fs(url, use_listings_cache=False)
    except ImportError as err:
        raise StorageError(f"{url}: {proto}:// URLs need {package}: {extra}") from err
    except ValueError as err:
        if "protocol" in str(err).lower():
            raise StorageError(f"{url}: unknown URL scheme {proto}:// (fsspec has no such protocol)") from err
        raise


@contextmanager
def remote_errors(url: str, what: str) -> Iterator[None]:
    """Re-raise what a store raises as an ``OSError`` naming ``url`` (``FileNotFoundError`` and
    ``PermissionError`` keep their class): one line, whatever the backend's exception types."""
    try:
        yield
    except StorageError:
        raise
    except FileNotFoundError as err:
        raise FileNotFoundError(errno.ENOENT, "no such file", url) from err
    except PermissionError as err:
        raise PermissionError(errno.EACCES, f"{what}: permission denied", url) from err
    except OSError as err:
        if err.filename is not None and err.strerror:
            raise
        raise OSError(errno.EIO, f"{what}: {_reason(err)}", url) from err
    except Exception as err:  # botocore / aiohttp errors are not OSErrors
        raise OSError(errno.EIO, f"{what}: {_reason(err)}", url) from err


def _reason(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _info(url: str) -> dict | None:
    fs, path = filesystem(url)
    with remote_errors(url, "cannot read"):
        try:
            return fs.info(path)
        except FileNotFoundError:
            return None


def exists(item: str | os.PathLike) -> bool:
    """Whether a file or directory (a URL: a key or a prefix) exists."""
    if is_url(item):
        return _info(item) is not None
    return os.path.exists(local_path(item))


def is_dir(item: str | os.PathLike) -> bool:
    """Whether ``item`` is a directory (a URL: a prefix with keys under it, or a bucket)."""
    if is_url(item):
        info = _info(item)
        return info is not None and info.get("type") == "directory"
    return os.path.isdir(local_path(item))


def file_size(item: str | os.PathLike) -> int | None:
    """The size in bytes of a file, or None when there is none (missing, or a directory)."""
    if is_url(item):
        info = _info(item)
        return None if info is None or info.get("type") == "directory" else int(info.get("size") or 0)
    path = local_path(item)
    return os.path.getsize(path) if os.path.isfile(path) else None


def stamp(item: str | os.PathLike) -> dict | None:
    """What identifies this version of a file in a provenance record: its name, size and
    modification time (``mtime_ns``), or for a URL its ETag (else modification time)."""
    if is_url(item):
        info = _info(item)
        if info is None or info.get("type") == "directory":
            return None
        out = {"name": basename(item), "size": int(info.get("size") or 0)}
        tag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
        if tag:
            out["etag"] = str(tag).strip('"')
        else:
            modified = info.get("LastModified") or info.get("mtime") or info.get("updated")
            out["modified"] = str(modified)
        return out
    try:
        st = os.stat(local_path(item))
    except OSError:
        return None
    return {"name": os.path.basename(local_path(item)), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def join(base: str | os.PathLike, *parts: str) -> str:
    """``base`` / ``parts``: ``/`` for URLs (keeping ``s3://``), the OS's join for paths."""
    if is_url(base):
        out = os.fspath(base).rstrip("/")
        for p in parts:
            p = p.strip("/")
            if p and p != ".":
                out += "/" + p
        return out
    return os.path.join(local_path(base), *(p for p in parts if p and p != "."))


def dirname(item: str | os.PathLike) -> str:
    """The folder of a file (a URL's prefix without the trailing ``/``)."""
    if is_url(item):
        text = os.fspath(item).rstrip("/")
        head = text.rpartition("/")[0]
        return text if not head or head.endswith(":/") else head  # s3://bucket is its own folder
    return os.path.dirname(local_path(item))


def basename(item: str | os.PathLike) -> str:
    """The last part of a path or URL."""
    if is_url(item):
        return os.fspath(item).rstrip("/").rpartition("/")[2]
    return os.path.basename(local_path(item))


def same_location(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` name one file (symlinks resolved for paths, exact keys for URLs)."""
    if is_url(a) or is_url(b):
        return is_url(a) and is_url(b) and os.fspath(a).rstrip("/") == os.fspath(b).rstrip("/")
    return os.path.realpath(local_path(a)) == os.path.realpath(local_path(b))


def list_files(directory: str | os.PathLike) -> list[tuple[str, str]]:
    """Every file under ``directory`` (recursive) as ``(location, path relative to it with /)``, sorted."""
    if is_url(directory):
        fs, root = filesystem(directory)
        root = root.rstrip("/")
        with remote_errors(directory, "cannot list"):
            found = fs.find(root, withdirs=False)
        base = os.fspath(directory).rstrip("/")
        out = []
        for p in found:
            rel = p[len(root) :].lstrip("/") if p.startswith(root) else basename(p)
            if rel:
                out.append((base + "/" + rel, rel))
        return sorted(out, key=lambda t: t[1])
    root = local_path(directory)
    out = []
    for folder, dirs, files in os.walk(root):
        dirs.sort()
        for name in files:
            full = os.path.join(folder, name)
            if os.path.isfile(full):
                out.append((full, os.path.relpath(full, root).replace(os.sep, "/")))
    return sorted(out, key=lambda t: t[1])


def glob(pattern: str) -> list[str]:
    """The files matching ``pattern`` (``*``, ``?``, ``[...]``, ``**`` across folders), sorted."""
    if is_url(pattern):
        fs, path = filesystem(pattern)
        with remote_errors(pattern, "cannot list"):
            found = fs.glob(path, detail=True)
        return sorted(fs.unstrip_protocol(p) for p, info in found.items() if info.get("type") != "directory")
    import glob as _glob

    return sorted(p for p in _glob.glob(local_path(pattern), recursive=True) if os.path.isfile(p))


@contextmanager
def open_read(item: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file to read: the local file, or for a URL a seekable file of ranged reads."""
    if not is_url(item):
        with open(local_path(item), "rb") as f:
            yield f
        return
    fs, path = filesystem(item)
    with remote_errors(item, "cannot read"):
        f = fs.open(path, "rb", block_size=BLOCK, cache_type="readahead")
    try:
        yield _Named(f, os.fspath(item))
    finally:
        f.close()


class _Named:
    """A URL's fsspec file whose ``name`` is the URL (readers name it in their errors) and whose
    store errors read as one-line ``OSError``s."""

    def __init__(self, f, url: str):
        self._f, self.name = f, url

    def read(self, n: int = -1) -> bytes:
        with remote_errors(self.name, "cannot read"):
            return self._f.read(n)

    def readinto(self, b) -> int:
        data = self.read(len(memoryview(b).cast("B")))
        memoryview(b).cast("B")[: len(data)] = data
        return len(data)

    def readline(self, size: int = -1) -> bytes:
        """A line, or at most ``size`` bytes of it (fsspec's own takes no limit: a hostile file
        without newlines would be read whole)."""
        out = bytearray()
        while size < 0 or len(out) < size:
            start = self._f.tell()
            chunk = self.read(4096 if size < 0 else min(4096, size - len(out)))
            if not chunk:
                break
            end = chunk.find(b"\n")
            if end >= 0:
                out += chunk[: end + 1]
                self._f.seek(start + end + 1)
                break
            out += chunk
        return bytes(out)

    def __iter__(self) -> Iterator[bytes]:
        while line := self.readline():
            yield line

    def __getattr__(self, attr):  # seek, tell, seekable, size, ...
        return getattr(self._f, attr)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._f.close()


def make_dirs(directory: str | os.PathLike) -> None:
    """Create a folder and its parents (object stores have no folders: nothing to do there)."""
    if not is_url(directory):
        os.makedirs(local_path(directory), exist_ok=True)
        return
    fs, path = filesystem(directory)
    if scheme(directory) not in _OBJECT_STORES:
        with remote_errors(directory, "cannot create"):
            fs.makedirs(path, exist_ok=True)


def listing(directory: str) -> list[tuple[str, dict]]:
    """``(URL, fsspec info)`` of every object under a URL prefix (for temp-file clean-up)."""
    fs, root = filesystem(directory)
    with remote_errors(directory, "cannot list"):
        found = fs.find(root.rstrip("/"), withdirs=False, detail=True)
    return [(fs.unstrip_protocol(p), info) for p, info in sorted(found.items())]


__all__ = [
    "BLOCK",
    "StorageError",
    "basename",
    "dirname",
    "exists",
    "file_size",
    "filesystem",
    "glob",
    "is_dir",
    "is_url",
    "join",
    "list_files",
    "listing",
    "local_path",
    "make_dirs",
    "open_read",
    "remote_errors",
    "same_location",
    "scheme",
    "stamp",
]
