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
from lattice_cli.commands import view as view_cmd
from lattice_cli.commands import voxelize as voxelize_cmd
from lattice_cli.common import EXIT_USAGE
from lattice_cli.launch import package_version


def _version(value: bool) -> None:
    if value:
        typer.echo(f"lattice {package_version()}")
        raise typer.Exit()


def main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Sparse point-cloud and sparse-voxel tools on MLX."""


# (name, function) of every command, in the order ``lattice --help`` lists them
COMMANDS = (
    ("demo", demo_cmd.demo),
    ("voxelize", voxelize_cmd.voxelize),
    ("pool", pool_cmd.pool),
    ("upsample", upsample_cmd.upsample),
    ("convert", convert_cmd.convert),
    ("info", info_cmd.info),
    ("model-run", model_run_cmd.model_run),
    ("render", render_cmd.render),
    ("view", view_cmd.view),
    ("explain", explain_cmd.explain),
    ("backend", info_cmd.backend),
)


def build_app(names=None) -> typer.Typer:
    """The ``lattice`` app with the commands ``names`` (None: all). The group callback keeps it
    a group of commands also when it holds one."""
    cli = typer.Typer(
        name="lattice",
        help="Sparse point-cloud and sparse-voxel tools on MLX.",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
    )
    cli.callback()(main)
    for name, fn in COMMANDS:
        if names is None or name in names:
            cli.command(name)(fn)
    return cli


app = build_app()


def app_for(argv: list[str]) -> typer.Typer:
    """The app that runs ``lattice ARGV``: where the first argument names a command, an app of
    that command alone — typer turns every command it holds into a click command on each
    call (the signatures of all eleven read: about 35 ms of a command's start) — else ``app``
    (the group's help, ``--version``, an unknown name and its suggestions)."""
    first = argv[0] if argv else None
    return build_app([first]) if any(first == name for name, _ in COMMANDS) else app


def _terminate(signum, frame) -> None:  # noqa: ARG001
    """SIGTERM as SIGINT: unwind, so an atomic write removes its temp file, then exit 143."""
    raise SystemExit(128 + signum)


def _click_exceptions():
    """The click exception classes typer raises (typer >= 0.2x vendors its own click)."""
    try:
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - typer on the real click
        from click import exceptions
    return exceptions


def run() -> None:
    """The console script: ``app`` with one-line usage errors (exit 2), SIGTERM unwinding like
    SIGINT, and a closed stdout pipe (``| head``) ending quietly with 0 as Unix tools do."""
    import signal
    import sys

    ex = _click_exceptions()
    signal.signal(signal.SIGTERM, _terminate)
    try:
        code = app_for(sys.argv[1:])(standalone_mode=False)
    except ex.NoArgsIsHelpError as err:  # bare `lattice` / `lattice GROUP`: the help, exit 2 like click
        typer.echo(err.format_message() if hasattr(err, "format_message") else str(err))
        code = EXIT_USAGE
    except ex.UsageError as err:
        ctx = err.ctx
        where = f"lattice {ctx.info_name}" if ctx is not None and ctx.parent is not None else "lattice"
        typer.echo(
            f"lattice: error: {' '.join(err.format_message().split())} (see '{where} --help')", err=True
        )
        code = EXIT_USAGE
    except KeyboardInterrupt:
        typer.echo("lattice: error: interrupted", err=True)
        code = 130
    except BrokenPipeError:
        code = 0
    except SystemExit as err:  # SIGTERM (143), or rich giving up on a closed pipe
        code = err.code if isinstance(err.code, int) else 1
    _exit(code if isinstance(code, int) else 0)


def _exit(code: int) -> None:
    import os
    import sys

    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away: nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(code)


if __name__ == "__main__":  # pragma: no cover
    run()
