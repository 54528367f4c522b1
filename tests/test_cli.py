"""The `lattice` command line: --version, --help, `lattice backend [--json]`."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from typer.testing import CliRunner

import lattice
from lattice_cli.main import COMMANDS, app, app_for

runner = CliRunner()


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.strip() == f"lattice {lattice.__version__}"


def test_help_lists_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "backend" in result.output
    assert "--version" in result.output


def test_backend_help():
    result = runner.invoke(app, ["backend", "--help"])
    assert result.exit_code == 0
    assert "--json" in result.output


def test_backend_json_is_machine_readable():
    result = runner.invoke(app, ["backend", "--json"])
    assert result.exit_code == 0, result.output
    info = json.loads(result.output)
    assert info["version"] == lattice.__version__
    assert "cpu" in info["compiled_backends"]
    assert info["blas"] == lattice._ext.blas_vendor()
    assert info["cpu_threads"] >= 1


def test_backend_text():
    result = runner.invoke(app, ["backend"])
    assert result.exit_code == 0
    lines = dict(line.split(None, 1) for line in result.output.strip().splitlines())
    assert lines["version"] == lattice.__version__
    assert "blas" in lines


def test_unknown_command_is_a_usage_error():
    result = runner.invoke(app, ["no-such-command"])
    assert result.exit_code == 2


def _names(cli) -> list[str]:
    return [info.name for info in cli.registered_commands]


def test_a_named_command_runs_in_an_app_of_its_own():
    # typer makes a click command of every command an app holds on each call: the console
    # script gives it only the one asked for (lattice_cli.main.app_for)
    assert _names(app) == [name for name, _ in COMMANDS]
    assert _names(app_for(["info", "x.ply"])) == ["info"]
    assert _names(app_for(["model-run", "--help"])) == ["model-run"]
    for argv in ([], ["--version"], ["--help"], ["no-such-command"], ["inf"]):
        assert app_for(argv) is app
    one = app_for(["backend", "--json"])
    result = runner.invoke(one, ["backend", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["version"] == lattice.__version__
    result = runner.invoke(app_for(["backend", "--help"]), ["backend", "--help"])
    assert result.exit_code == 0 and "--json" in result.output
    assert "Usage: lattice backend" in " ".join(result.output.split())


@pytest.mark.skipif(shutil.which("lattice") is None, reason="console script not installed on PATH")
def test_console_script():
    out = subprocess.run(["lattice", "--version"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0
    assert out.stdout.strip() == f"lattice {lattice.__version__}"


def test_module_entry_point(tmp_path):
    # Run outside the checkout: from its root the source folders would shadow the installed
    # package (whose lattice/ holds the built extension).
    out = subprocess.run(
        [sys.executable, "-m", "lattice_cli.main", "backend", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["version"] == lattice.__version__
