"""`lattice backend`: what this build can run on."""

from __future__ import annotations

import dataclasses
import json

import typer


def backend(
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Show the version, compiled backends, BLAS and device."""
    import lattice

    info = dataclasses.asdict(lattice.backend_info())
    if as_json:
        typer.echo(json.dumps(info))
        return
    for k, v in info.items():
        typer.echo(f"{k:18} {v}")
