"""Run the installed ``lattice`` command as a user does: a real process, its exit code and output."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
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


def address_limited_env(env: dict | None = None) -> dict:
    """The environment of a child run under an address-space limit (RLIMIT_AS): CUDA devices
    hidden, because a CUDA context reserves tens of GiB of address space before it allocates
    anything (the limit would stop MLX's GPU backend, not the code under test: the readers
    and the bundle checks, which run on the CPU)."""
    return dict(os.environ if env is None else env, CUDA_VISIBLE_DEVICES="")
