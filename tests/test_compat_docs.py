"""docs/compat.md stays in sync with mlx_lattice: generated lists, adapters, a migration example that runs."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest
from test_alias import MODULES

from mlx_lattice import _missing

DOC = Path(__file__).resolve().parents[1] / "docs" / "compat.md"
TEXT = DOC.read_text()


def _generated(name: str) -> str:
    m = re.search(rf"<!-- BEGIN generated: {name} [^>]*-->\n(.*?)<!-- END generated: {name} -->", TEXT, re.S)
    assert m, f"docs/compat.md has no generated block {name!r}"
    return m.group(1)


def test_gap_lists_are_current():
    assert _generated("gaps") == _missing.render_markdown(), (
        "docs/compat.md's gap lists are stale: paste mlx_lattice._missing.render_markdown()"
    )


def test_counts_are_current():
    inventory = pytest.importorskip("test_compat_inventory")
    if not inventory.COMPAT.exists():
        pytest.skip(f"{inventory.COMPAT} is absent")
    assert _generated("counts") == inventory.render_counts(), (
        "docs/compat.md's counts are stale: paste test_compat_inventory.render_counts()"
    )


def test_every_adapter_is_documented():
    for name in MODULES:
        module = importlib.import_module(name)
        for attr in getattr(module, "__all__", []):
            obj = getattr(module, attr)
            if inspect.isfunction(obj) and obj.__module__.startswith("mlx_lattice"):
                assert f"{attr}" in TEXT, f"adapter {name}.{attr} is not in docs/compat.md"


def test_missing_names_are_listed_on_the_page():
    for name in (*_missing.MISSING, *_missing.OUT_OF_SCOPE):
        assert f"`{name}`" in TEXT


@pytest.mark.parametrize("index", range(len(re.findall(r"```python\n", TEXT))))
def test_python_blocks_run(index):
    block = re.findall(r"```python\n(.*?)```", TEXT, re.S)[index]
    exec(compile(block, f"{DOC}:python block {index}", "exec"), {"__name__": "__compat_doc__"})
