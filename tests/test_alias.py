"""The mlx_lattice alias package serves the documented import paths from lattice."""

from __future__ import annotations

import importlib

import pytest

import lattice
import lattice.core
import lattice.ops


def test_from_mlx_lattice_core_import_is_the_same_class():
    from mlx_lattice.core import KernelSpec, SparseTensor

    assert SparseTensor is lattice.core.SparseTensor
    assert KernelSpec is lattice.core.KernelSpec


def test_submodules_are_the_same_module_objects():
    import mlx_lattice.core
    import mlx_lattice.ops

    assert mlx_lattice.ops is lattice.ops
    assert mlx_lattice.core is lattice.core
    assert mlx_lattice.ops.kernel_relation is lattice.ops.kernel_relation
    assert importlib.import_module("mlx_lattice.core.coordsets") is importlib.import_module(
        "lattice.core.coordsets"
    )


def test_top_level_attributes_forward():
    import mlx_lattice

    assert mlx_lattice.SparseTensor is lattice.SparseTensor
    assert mlx_lattice.__version__ == lattice.__version__
    assert "SparseTensor" in dir(mlx_lattice)


def test_missing_submodule_raises_module_not_found():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mlx_lattice.no_such_module")


def test_alias_isinstance_interoperates():
    import numpy as np
    from mlx_lattice.core import SparseTensor as AliasTensor

    x = lattice.SparseTensor(np.zeros((1, 4), np.int32), np.zeros((1, 1), np.float32))
    assert isinstance(x, AliasTensor)
