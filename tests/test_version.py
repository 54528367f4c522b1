"""The version is written once, in lattice/_version.py: the installed distribution's metadata
(scikit-build-core reads it from there), ``lattice.__version__`` and ``lattice --version``
(tests/test_cli.py) agree."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from cli_helpers import PYTHON

import lattice

ROOT = Path(__file__).resolve().parents[1]


def test_metadata_version_is_lattice_version():
    # an editable install whose _version.py changed since: reinstall (pip install -e .)
    try:
        installed = importlib.metadata.version("lattice")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("lattice imported from a source tree on PYTHONPATH: no distribution metadata")
    assert installed == lattice.__version__


def test_version_written_once():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    meta = project["tool"]["scikit-build"]["metadata"]["version"]
    assert meta["input"] == "lattice/_version.py"
    text = (ROOT / "lattice" / "_version.py").read_text()
    assert re.search(r'^__version__ = "([^"]+)"$', text, re.M).group(1) == lattice.__version__


@pytest.mark.parametrize("module", ["lattice_cli.launch", "lattice_cli.main"])
def test_the_version_command_does_not_import_the_library(module):
    """``lattice --version`` reads lattice/_version.py: no MLX, NumPy or native core (issue 20's
    start-up budget); it prints what the package says. The console script
    (``lattice_cli.launch``) answers it before typer and the command modules are imported;
    the typer app's own ``--version`` says the same."""
    code = (
        "import sys\n"
        f"from {module} import run\n"
        "sys.argv = ['lattice', '--version']\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('lattice', 'lattice._ext', 'mlx.core', 'numpy', 'typer') if m in sys.modules))\n"
    )
    r = subprocess.run([*PYTHON, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT.parent)
    assert r.returncode == 0, r.stderr
    version_line, loaded = r.stdout.splitlines()
    assert version_line == f"lattice {lattice.__version__}"
    assert loaded == ("[]" if module == "lattice_cli.launch" else "['typer']")


def test_the_console_script_is_the_launcher():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["scripts"]["lattice"] == "lattice_cli.launch:run"
