"""Jobs for the batch-engine tests, importable by spawned workers and Dask workers (picklable by
reference), and process helpers: files in, files out, through ``atomic_write`` like the real jobs."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from pathlib import Path

from lattice.io import storage
from lattice.io.atomic import atomic_write
from lattice.pipeline.provenance import make_record, write_sidecar


def expected_bytes(src: str | os.PathLike) -> bytes:
    """What :func:`digest_job` writes for ``src`` (a path or a URL)."""
    with storage.open_read(src) as f:
        data = f.read()
    return hashlib.sha256(data).hexdigest().encode() + b"\n" + data[::-1]


def digest_job(
    src, dst, *, label: str = "x", kill: str | None = None, marker: str | None = None, how: str = "sigkill",
    delay: float = 0.0, sidecar: bool = False,
) -> dict:  # fmt: skip
    """Write ``expected_bytes(src)`` to ``dst`` atomically. For the input named ``kill``, the
    worker dies halfway through the write (``how``: sigkill, segv, exit, raise): every time,
    or with ``marker`` (a file path) only the first time. ``sidecar`` records the provenance."""
    if storage.basename(os.fspath(src)) == "bad.dat":
        raise ValueError(f"{src}: not a good input")
    data = expected_bytes(src)
    time.sleep(delay)
    with atomic_write(dst) as f:
        f.write(data[: len(data) // 2])
        f.flush()
        if kill is not None and storage.basename(os.fspath(src)) == kill:
            if marker is None or not os.path.exists(marker):
                if marker is not None:
                    Path(marker).write_text("died once")
                _die(how)
        f.write(data[len(data) // 2 :])
    if sidecar:
        write_sidecar(dst, make_record("digest", {"label": label}, src))
    return {"input": os.fspath(src), "output": os.fspath(dst), "bytes": len(data), "pid": os.getpid()}


def _die(how: str) -> None:
    if how == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif how == "exit":
        os._exit(3)
    raise RuntimeError("asked to fail")


def worker_pids(pid: int) -> list[int]:
    """The pids of ``pid``'s multiprocessing workers (``spawn_main``; not its resource tracker)."""
    found = []
    for child in children(pid):
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(child)
        except OSError:
            continue
    return found


def children(pid: int) -> list[int]:
    """The pids of the live child processes of ``pid`` (from /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def wait_for(predicate, timeout: float = 60.0, step: float = 0.02) -> bool:
    """Poll ``predicate`` until it is true (True) or ``timeout`` seconds pass (False)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return False


def temps(directory: Path) -> list[Path]:
    """lattice temp files left anywhere under ``directory``."""
    return [p for p in directory.rglob("*") if ".lattice-" in p.name and p.name.endswith(".tmp")]


def stop(process: subprocess.Popen) -> None:
    """Kill a helper process (and its process group) started with ``start_new_session=True``."""
    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    process.wait(30)
