"""Alias package: the documented ``mlx_lattice.*`` import paths, served by ``lattice``.

``mlx_lattice.X.Y`` is the very module object ``lattice.X.Y`` (no second
implementation): ``from mlx_lattice.core import SparseTensor`` gives the same
class as ``lattice.core.SparseTensor``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

import lattice

_PREFIX = __name__ + "."


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str) -> None:
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:  # the target module is already executed
        pass


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith(_PREFIX):
            return None
        real = "lattice." + fullname[len(_PREFIX) :]
        if importlib.util.find_spec(real) is None:
            return None
        real_module = importlib.import_module(real)
        is_pkg = hasattr(real_module, "__path__")
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real), is_package=is_pkg)


if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
    sys.meta_path.insert(0, _AliasFinder())


def __getattr__(name: str):
    return getattr(lattice, name)


def __dir__():
    return dir(lattice)
