"""``import lattice`` loads nothing heavy (issue 20's start-up budget): names and subpackages
are imported on first use, the native core configures itself from lattice/settings.py as it
loads, and the backends register on the first dispatch. Each check runs in a new process."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import PYTHON, data_file

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("lattice._ext", "lattice.backends", "lattice.core", "mlx.core")


def _child(code: str, env: dict | None = None) -> dict:
    """Runs ``code`` in a new interpreter; it prints one JSON object as its last line."""
    import os

    r = subprocess.run(
        [*PYTHON, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT.parent,
        env={**os.environ, **(env or {})},
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


MODULES = "{m: m in sys.modules for m in %r}" % (HEAVY,)  # noqa: UP031
LOADED = f"json.dumps({MODULES})"


@pytest.mark.parametrize(
    "statement",
    [
        "import lattice",
        "import lattice.io",
        "from lattice.pipeline import describe_file",
        "from lattice.io import read_points, read_sparse",
    ],
)
def test_reading_files_loads_neither_mlx_nor_the_native_core(statement):
    loaded = _child(f"import json, sys\n{statement}\nprint({LOADED})")
    assert not any(loaded.values()), loaded


def test_lattice_info_runs_without_mlx():
    ply = data_file("stanford_bunny/bun_zipper_res4.ply")
    code = (
        "import json, sys, io, contextlib\n"
        "from lattice_cli.main import app\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        f"    app(['info', {str(ply)!r}, '--json'], standalone_mode=False)\n"
        f"print(json.dumps({{'points': json.loads(out.getvalue())['points'], **{MODULES}}}))\n"
    )
    got = _child(code)
    assert got.pop("points") == 453
    assert not any(got.values()), got


def test_names_load_on_first_use_and_match_their_modules():
    code = (
        "import json, sys\n"
        "import lattice\n"
        "import lattice.core, lattice.routing.explain, lattice.backends.info\n"
        "same = [lattice.SparseTensor is lattice.core.SparseTensor, lattice.explain is lattice.routing.explain.explain,\n"
        "        lattice.backend_info is lattice.backends.info.backend_info, lattice.ops is sys.modules['lattice.ops']]\n"
        "missing = False\n"
        "try:\n    lattice.no_such_name\nexcept AttributeError:\n    missing = True\n"
        "print(json.dumps({'same': same, 'missing': missing, 'all': all(hasattr(lattice, n) for n in lattice.__all__)}))\n"
    )
    assert _child(code) == {"same": [True] * 4, "missing": True, "all": True}


def test_the_native_core_configures_itself_however_it_is_imported():
    code = (
        "import json, sys\n"
        "import lattice._ext as ext\n"  # first, directly: no lattice.core, no lattice/__init__ call
        "print(json.dumps({'threads': ext.num_threads()}))\n"
    )
    assert _child(code, {"LATTICE_NUM_THREADS": "1"}) == {"threads": 1}
    assert _child(code, {"LATTICE_NUM_THREADS": "3"}) == {"threads": 3}


def test_the_first_dispatch_registers_the_backends():
    code = (
        "import json, sys\n"
        "import mlx.core as mx\n"
        "from lattice.core.tensor import SparseTensor\n"
        "before = 'lattice.backends' in sys.modules\n"
        "x = SparseTensor(mx.array([[0, 0, 0, 0], [0, 1, 0, 0]], dtype=mx.int32), mx.ones((2, 3)))\n"
        "y = (x + x).feats.tolist()\n"  # the operators come with lattice.core
        "from lattice.ops import subm_conv3d\n"
        "z = subm_conv3d(x, mx.ones((27, 3, 2)), kernel_size=3).feats.tolist()\n"
        "print(json.dumps({'before': before, 'after': 'lattice.backends' in sys.modules, 'y': y, 'z': z}))\n"
    )
    got = _child(code)
    assert got["after"] and got["y"] == [[2.0] * 3] * 2
    assert got["z"] == [[6.0, 6.0], [6.0, 6.0]]  # each voxel sees itself and its neighbour: 2 x 3 ones
