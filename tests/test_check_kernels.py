"""tools/check_kernels.py: a syntax error in a CUDA entry point or a shared body fails the
NVRTC check, naming the file and the kernel.

Runs where NVRTC (the [ci] extra: nvidia-cuda-nvrtc, nvidia-cuda-runtime) and MLX's CUDA
wheel (``$LATTICE_MLX_CUDA_WHEEL``, else downloaded with pip) are at hand; skips otherwise.
The full compile of every kernel is the CI step itself (``.ci/run``), not repeated here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOL = ROOT / "tools" / "check_kernels.py"


def _run(*args, env=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-P", str(TOOL), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def _nvrtc_present() -> bool:
    sys.path.insert(0, str(TOOL.parent))
    try:
        import check_kernels

        check_kernels.Nvrtc()
        return True
    except (FileNotFoundError, OSError):
        return False
    finally:
        sys.path.remove(str(TOOL.parent))


needs_nvrtc = pytest.mark.skipif(
    not (ROOT / "cuda").is_dir() or not _nvrtc_present(),
    reason="NVRTC not installed (pip install '.[ci]') or no kernel sources",
)


def test_missing_nvrtc_is_exit_2():
    r = _run("--only", "table_insert", env={"LATTICE_NVRTC": "/nonexistent/libnvrtc.so"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert "check_kernels" in r.stderr


@needs_nvrtc
def test_broken_copy_fails_naming_file_and_kernel(tmp_path):
    """One run over a copy with three faults: each is reported, an intact kernel passes."""
    src = tmp_path / "src"
    for d in ("cuda", "kernels"):
        shutil.copytree(ROOT / d, src / d)
    # a missing semicolon in a shared body (kernels/pool.inc: pool_map's lt_pool_rows) ...
    inc = src / "kernels" / "pool.inc"
    text = inc.read_text()
    assert "  y[t] = T(out);\n" in text
    inc.write_text(text.replace("  y[t] = T(out);\n", "  y[t] = T(out)\n", 1))
    # ... and an undeclared name in an entry point (cuda/coords.cu: table_owner)
    cu = src / "cuda" / "coords.cu"
    text = cu.read_text()
    call = "lt_table_owner_rows(coords, slots, params, owner, LT_THREAD_ID);"
    assert call in text
    cu.write_text(text.replace(call, call.replace("owner, LT", "owner_typo, LT"), 1))
    # ... and a new kernel that the variant table does not know
    with open(src / "cuda" / "pool.cu", "a") as f:
        f.write("\n//@kernel pool_new\n//@inputs x params\n//@outputs y\n//@uses pool\ny[0] = x[0];\n")

    r = _run("--source-root", str(src), "--only", "pool_map", "table_owner", "table_insert")
    out = r.stdout + r.stderr
    if "MLX's CUDA wheel" in out and r.returncode == 2:
        pytest.skip(f"MLX's CUDA wheel unavailable: {out.strip()[-300:]}")
    assert r.returncode == 1, out
    assert "FAIL cuda/pool.cu:pool_map [T=float32] sm_90" in out
    assert "kernels/pool.inc(" in out  # NVRTC's error mapped back to the shared body
    assert "FAIL cuda/coords.cu:table_owner [-] sm_90" in out
    assert "cuda/coords.cu(" in out and "owner_typo" in out
    assert "ok   cuda/coords.cu:table_insert [-] sm_90" in out  # the intact kernel still compiles
    assert "cuda/pool.cu:pool_new: no variants" in out
    assert "1 of 5 kernel variants compiled, 4 failed, 1 table problems" in out
