"""Run the installed ``lattice`` command as a user does: a real process, its exit code and output."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from io_helpers import DATA

# A Python child that does not put its working directory first on sys.path (-P): started from
# the checkout's root, the source folders would shadow the installed package, whose lattice/
# holds the built extension (CI installs non-editable).
PYTHON = [sys.executable, "-P"]
# The console script when it is on PATH (what a user runs), else the same entry point by module.
LATTICE = ["lattice"] if shutil.which("lattice") else [*PYTHON, "-m", "lattice_cli.main"]


def lattice(*args: object, cwd: str | Path | None = None, timeout: float = 300, stdin: bytes | None = None):
    """``subprocess.run`` of ``lattice ARGS...``: returns the CompletedProcess (text output)."""
    return subprocess.run(
        [*LATTICE, *map(str, args)],
        cwd=cwd,
        capture_output=True,
        timeout=timeout,
        input=stdin.decode("latin-1") if stdin is not None else None,
        text=True,
    )


def data_file(rel: str) -> Path:
    """A file of ``../shared/data``, or skip the test when the shared data is absent."""
    path = DATA / rel
    if not path.exists():
        pytest.skip(f"shared test data not present: {rel}")
    return path.resolve()


@functools.cache
def import_address_space() -> int:
    """Bytes of address space (VmPeak) of a child that imports lattice, its command, pipeline,
    models and backends (``import lattice`` alone is lazy): about 280 MiB on a CPU build; MLX's CUDA backend maps managed memory at import."""
    probe = (
        "import lattice, lattice_cli.main, lattice.pipeline.voxelize, lattice.models, lattice.backends\n"
        "print(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmPeak')))"
    )
    r = subprocess.run([*PYTHON, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    return int(r.stdout.split()[-1]) * 1024


def address_space_limit() -> int:
    """The RLIMIT_AS for a ``lattice`` child whose memory a test bounds: 2 GiB, or where
    merely importing lattice costs more address space here, that cost plus 1.75 GiB — the
    same budget for the reading and checking under test."""
    return max(2 << 30, import_address_space() + (7 << 28))


@functools.cache
def command_start_seconds() -> float:
    """Seconds ``lattice --version`` takes here: the fixed start-up cost (imports; a CUDA
    context where MLX has one) that a test timing a whole command adds to its bound."""
    start = time.monotonic()
    subprocess.run([*LATTICE, "--version"], capture_output=True, timeout=120, check=True)
    return time.monotonic() - start
