"""The environment is read in one place: lattice/settings.py (and handed to the native core
once, at import)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest
from cli_helpers import PYTHON

from lattice import settings

ROOT = Path(__file__).resolve().parents[1]


def test_nothing_else_reads_the_environment():
    readers = re.compile(r"os\.environ|os\.getenv|getenv\(")
    python = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "lattice").rglob("*.py")
        if p.name != "settings.py" and readers.search(p.read_text(encoding="utf-8"))
    ]
    native = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "csrc").rglob("*")
        if p.suffix in (".h", ".cpp") and "getenv" in p.read_text(encoding="utf-8")
    ]
    assert python == [] and native == []


def test_each_variable_and_its_default(monkeypatch):
    for name in (
        settings.NUM_THREADS,
        settings.CONV_TILE_FLOATS,
        settings.MALLOC_TUNING,
        settings.MAX_POINTS,
        settings.CPU_GEMM,
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    assert settings.num_threads() == 0 and settings.conv_tile_floats() == 16384
    assert settings.malloc_tuning() == (True, True) and settings.max_points() == 2**31 - 1
    assert settings.cpu_gemm() == "auto"
    monkeypatch.setenv(settings.CPU_GEMM, " AVX2 ")
    assert settings.cpu_gemm() == "avx2"
    monkeypatch.setenv(settings.CPU_GEMM, "sse")
    with pytest.raises(ValueError, match="LATTICE_CPU_GEMM must be one of auto, blas, avx2, avx512"):
        settings.cpu_gemm()
    assert "LATTICE_CPU_GEMM must be" in settings.current()[settings.CPU_GEMM]
    monkeypatch.setenv(settings.NUM_THREADS, "3")
    monkeypatch.setenv(settings.CONV_TILE_FLOATS, "10")  # at least 1024
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "1")  # glibc's own variable wins
    assert settings.num_threads() == 3 and settings.conv_tile_floats() == 1024
    assert settings.malloc_tuning() == (True, False)
    monkeypatch.setenv(settings.NUM_THREADS, "many")
    monkeypatch.setenv(settings.MALLOC_TUNING, "0")
    assert settings.num_threads() == 0 and settings.malloc_tuning() == (False, False)
    monkeypatch.setenv(settings.MAX_POINTS, "0")
    with pytest.raises(ValueError, match="LATTICE_MAX_POINTS must be a positive integer"):
        settings.max_points()
    assert "LATTICE_MAX_POINTS must be" in settings.current()[settings.MAX_POINTS]
    assert set(settings.current()) == {
        settings.NUM_THREADS,
        settings.CONV_TILE_FLOATS,
        settings.CPU_GEMM,
        settings.MALLOC_TUNING,
        settings.METAL_KERNELS,
        settings.MAX_POINTS,
        settings.TF32,
    }


def test_the_native_core_takes_the_thread_count_at_import():
    code = "import lattice; print(lattice.backend_info().cpu_threads)"
    for value, want in (("1", "1"), ("3", "3")):
        r = subprocess.run(
            [*PYTHON, "-c", code],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, settings.NUM_THREADS: value},
        )
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == want
