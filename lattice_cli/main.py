"""The ``lattice`` command line: each command parses, loads, calls one library function, writes."""

from __future__ import annotations

import typer

from lattice_cli.commands import convert as convert_cmd
from lattice_cli.commands import demo as demo_cmd
from lattice_cli.commands import explain as explain_cmd
from lattice_cli.commands import info as info_cmd
from lattice_cli.commands import model_run as model_run_cmd
from lattice_cli.commands import pool as pool_cmd
from lattice_cli.commands import render as render_cmd
from lattice_cli.commands import upsample as upsample_cmd
from lattice_cli.commands import voxelize as voxelize_cmd

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


app.command("demo")(demo_cmd.demo)
app.command("voxelize")(voxelize_cmd.voxelize)
app.command("pool")(pool_cmd.pool)
app.command("upsample")(upsample_cmd.upsample)
app.command("convert")(convert_cmd.convert)
app.command("info")(info_cmd.info)
app.command("model-run")(model_run_cmd.model_run)
app.command("render")(render_cmd.render)
app.command("explain")(explain_cmd.explain)
app.command("backend")(info_cmd.backend)

if __name__ == "__main__":  # pragma: no cover
    app()
