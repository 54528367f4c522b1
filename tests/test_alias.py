"""mlx_lattice is a package of real modules (no import hook) that re-export or adapt lattice."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import pydoc
import sys
from pathlib import Path

import numpy as np
import pytest

import lattice
import lattice.core
import lattice.nn
import lattice.ops
import mlx_lattice
from mlx_lattice import _missing

PACKAGE_DIR = Path(mlx_lattice.__file__).resolve().parent
OUT_OF_SCOPE = {"mlx_lattice." + m for m in _missing.OUT_OF_SCOPE_MODULES}


def _modules() -> list[str]:
    names = ["mlx_lattice"]
    for info in pkgutil.walk_packages(mlx_lattice.__path__, "mlx_lattice."):
        if info.name not in OUT_OF_SCOPE:
            names.append(info.name)
    return names


MODULES = _modules()


def test_the_documented_layout_is_there():
    for name in (
        "mlx_lattice.core",
        "mlx_lattice.core.coords",
        "mlx_lattice.core.coords.builders",
        "mlx_lattice.core.coords.manager",
        "mlx_lattice.core.coords.set_ops",
        "mlx_lattice.core.coords.ordering",
        "mlx_lattice.core.coords.occupancy",
        "mlx_lattice.core.coords.alignment",
        "mlx_lattice.core.coords.quantization",
        "mlx_lattice.core.coords.validation",
        "mlx_lattice.core.relations",
        "mlx_lattice.core.relations.specs",
        "mlx_lattice.core.relations.views",
        "mlx_lattice.core.tensor",
        "mlx_lattice.core.quantized",
        "mlx_lattice.core.types",
        "mlx_lattice.ops",
        "mlx_lattice.ops.conv",
        "mlx_lattice.ops.pool",
        "mlx_lattice.ops.feature",
        "mlx_lattice.ops.tensor",
        "mlx_lattice.ops.coords",
        "mlx_lattice.ops.relations",
        "mlx_lattice.ops.quantization",
        "mlx_lattice.ops.elementwise",
        "mlx_lattice.nn",
        "mlx_lattice.nn.conv",
        "mlx_lattice.nn.pool",
        "mlx_lattice.nn.feature",
        "mlx_lattice.nn.quantized_conv",
        "mlx_lattice.nn.quantized_feature",
    ):
        assert name in MODULES


def test_no_import_hook_is_installed():
    assert not any(
        type(f).__module__.startswith("mlx_lattice") or getattr(f, "__module__", "").startswith("mlx_lattice")
        for f in sys.meta_path
    )
    # lattice's private modules are not served under mlx_lattice any more
    assert importlib.util.find_spec("mlx_lattice.core.coordsets") is None


@pytest.mark.parametrize("name", MODULES)
def test_every_module_is_a_real_file_with_docs(name):
    module = importlib.import_module(name)
    source = Path(inspect.getsourcefile(module)).resolve()
    assert PACKAGE_DIR in source.parents
    assert module.__doc__ and module.__doc__.strip()
    assert name in pydoc.render_doc(module, renderer=pydoc.plaintext)


@pytest.mark.parametrize("name", MODULES)
def test_all_names_resolve_and_help_renders(name):
    module = importlib.import_module(name)
    for attr in getattr(module, "__all__", []):
        obj = getattr(module, attr)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert inspect.getsourcefile(obj)  # lattice's file, or mlx_lattice's for an adapter
            pydoc.render_doc(obj, renderer=pydoc.plaintext)


def test_submodules_are_mlx_lattice_modules_not_lattice_aliases():
    import mlx_lattice.core
    import mlx_lattice.nn.pool
    import mlx_lattice.ops

    assert mlx_lattice.ops is not lattice.ops
    assert mlx_lattice.core is not lattice.core
    assert mlx_lattice.nn.pool is not lattice.nn.pool
    assert mlx_lattice.ops.subm_conv3d is lattice.ops.subm_conv3d


def test_from_mlx_lattice_core_import_is_the_same_class():
    from mlx_lattice.core import KernelSpec, SparseTensor
    from mlx_lattice.core.tensor import SparseTensor as TensorModuleTensor
    from mlx_lattice.nn.conv import SubmConv3d

    assert SparseTensor is lattice.core.SparseTensor is TensorModuleTensor
    assert KernelSpec is lattice.core.KernelSpec
    assert SubmConv3d is lattice.nn.SubmConv3d


def test_adapters_live_in_mlx_lattice_and_say_what_they_map_to():
    from mlx_lattice.ops import kernel_relation, sparse_collate

    for fn in (kernel_relation, sparse_collate, mlx_lattice.backend_info, mlx_lattice.core.triple):
        assert PACKAGE_DIR in Path(inspect.getsourcefile(fn)).resolve().parents
        assert fn.__doc__
    assert "lattice.ops.kernel_relation" in kernel_relation.__doc__


def test_top_level_names():
    assert mlx_lattice.SparseTensor is lattice.SparseTensor
    assert mlx_lattice.__version__ == lattice.__version__
    assert "SparseTensor" in dir(mlx_lattice)
    ns: dict = {}
    exec("from mlx_lattice import *", ns)
    assert "_ext" not in ns and "SparseTensor" in ns and "backend_info" in ns


def test_lattice_all_does_not_export_ext():
    assert "_ext" not in lattice.__all__


def test_missing_submodule_raises_module_not_found():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("mlx_lattice.no_such_module")


def test_unknown_attribute_is_a_plain_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        mlx_lattice.ops.no_such_name  # noqa: B018
    assert not hasattr(mlx_lattice.core, "no_such_name")


def test_alias_isinstance_interoperates():
    from mlx_lattice.core import SparseTensor as AliasTensor

    x = lattice.SparseTensor(np.zeros((1, 4), np.int32), np.zeros((1, 1), np.float32))
    assert isinstance(x, AliasTensor)
