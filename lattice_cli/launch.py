"""The console script ``lattice``: ``lattice --version`` alone is answered here, before
typer, the command modules or the library are imported (about a third of a bare command's
start); everything else is ``lattice_cli.main.run``."""

from __future__ import annotations

import sys


def run() -> None:
    """``lattice``: the version, or the typer app of ``lattice_cli.main``."""
    if sys.argv[1:] == ["--version"]:
        sys.stdout.write(f"lattice {package_version()}\n")
        sys.stdout.flush()
        raise SystemExit(0)
    from lattice_cli.main import run as main

    main()


def package_version() -> str:
    """``lattice.__version__``, read from ``lattice/_version.py`` without importing lattice
    (MLX, NumPy, the native core: the library's import is most of a bare command's start)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("lattice")  # a top-level spec: the package is not run
    for folder in spec.submodule_search_locations or ():
        path = Path(folder) / "_version.py"
        if path.is_file():
            namespace: dict = {}
            exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
            return namespace["__version__"]
    import lattice

    return lattice.__version__
