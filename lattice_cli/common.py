"""Options and helpers shared by the commands (one place for aliases and exit codes)."""

from __future__ import annotations

from typing import NoReturn

import typer

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """One clear line on stderr and the exit code (1 failed input or run, 2 usage)."""
    typer.echo(f"lattice: error: {message}", err=True)
    raise typer.Exit(code)


def parse_int_list(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"{name} must be comma-separated integers, got {text!r}", code=EXIT_USAGE)
    if not values or min(values) <= 0:
        fail(f"{name} must be positive integers, got {text!r}", code=EXIT_USAGE)
    return values
