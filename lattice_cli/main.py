"""The ``lattice`` command line: each command parses, loads, calls one library function, writes."""

from __future__ import annotations

import typer

from lattice_cli.commands import explain as explain_cmd
from lattice_cli.commands import info as info_cmd

app = typer.Typer(
    name="lattice",
    help="Sparse point-cloud and sparse-voxel tools on MLX.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        import lattice

        typer.echo(f"lattice {lattice.__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Sparse point-cloud and sparse-voxel tools on MLX."""


app.command("backend")(info_cmd.backend)
app.command("explain")(explain_cmd.explain)

if __name__ == "__main__":  # pragma: no cover
    app()
