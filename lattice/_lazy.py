"""PEP 562 lazy attributes for a package: its public names imported from their modules on
first use (``lattice`` and ``lattice.pipeline``), so importing the package loads nothing
heavy. Imports only ``importlib``."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_attributes(package: str, namespace: dict, homes: Mapping[str, str]) -> tuple[Callable, Callable]:
    """``(__getattr__, __dir__)`` for ``package``: ``homes`` maps each lazy name to the module
    that defines it (the name itself when it is a submodule: ``homes["io"] = "lattice.io"``);
    each is imported once, then kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str):
        if name not in homes:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(homes[name])
        value = module if module.__name__ == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | {n for n in homes if not n.startswith("_")})

    return __getattr__, __dir__
