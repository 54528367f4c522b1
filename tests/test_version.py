"""The version is written once, in lattice/_version.py: the installed distribution's metadata
(scikit-build-core reads it from there), ``lattice.__version__`` and ``lattice --version``
(tests/test_cli.py) agree."""

from __future__ import annotations

import importlib.metadata
import re
import tomllib
from pathlib import Path

import pytest

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
