"""Options and helpers shared by the commands (one place for aliases, exit codes and messages).

Exit codes: 0 ok, 1 failed input or run, 2 usage. Every error is one line on stderr,
``lattice: error: ...``; warnings are ``lattice: warning: ...``. A summary goes to stdout,
or to stderr when stdout carries the data (``-o -``).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, BinaryIO, NoReturn

import typer

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
STDIO = "-"

# ---- shared options ------------------------------------------------------------------

InputsArg = Annotated[
    list[str],
    typer.Argument(help="Input files, directories or quoted globs; - reads stdin.", show_default=False),
]
OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="Output file, or - for stdout (NPZ unless --output-format). One input only. The extension "
        "chooses the format: .npz keeps the sparse tensor; .ply, .las, .laz, .pcd, .xyz, .txt, .csv, .npy "
        "write the voxels as points.",
    ),
]
OutputFormatOpt = Annotated[
    str | None,
    typer.Option(
        "--output-format",
        "-F",
        help="Output format for -o - and batch mode (default npz): npz, ply, las, laz, pcd, ... "
        "With -o FILE the extension decides.",
    ),
]
PositionOpt = Annotated[
    str,
    typer.Option(
        "--position",
        help="Where a voxel exported as a point sits: centre (of the voxel) or centroid (mean of its points).",
    ),
]
OutputDirOpt = Annotated[
    str | None,
    typer.Option(
        "--output-dir",
        "-d",
        help="Batch mode: one output per input in this directory (created if needed), or an s3://bucket/prefix/.",
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print a machine-readable summary.")]
OverwriteOpt = Annotated[
    bool, typer.Option("--overwrite", help="Batch mode: replace existing outputs (default: skip them).")
]
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        "-j",
        min=1,
        help="Batch mode: files processed in parallel by N local processes (a dead worker's file is retried once).",
        show_default=False,
    ),
]
SchedulerOpt = Annotated[
    str | None,
    typer.Option(
        "--scheduler",
        help="Batch mode on Dask (pip install 'lattice[dask]'): local:N starts N worker processes for the run; "
        "tcp://HOST:PORT submits to a running scheduler.",
        show_default=False,
    ),
]
FormatOpt = Annotated[
    str | None,
    typer.Option(
        "--format",
        help="Input format when the extension does not tell: "
        "ply, npz, las, laz, pcd, kitti, nuscenes, npy, text.",
    ),
]
ColumnsOpt = Annotated[
    str | None,
    typer.Option(
        "--columns",
        help="Name each column of a .npy, text or raw float32 .bin input, e.g. x,y,z,red,green,blue "
        "(_ skips a column).",
    ),
]
StrictOpt = Annotated[
    bool, typer.Option("--strict", help="Refuse points with NaN/Inf coordinates instead of dropping them.")
]


# ---- messages -------------------------------------------------------------------------


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """One clear line on stderr and the exit code (1 failed input or run, 2 usage)."""
    typer.echo(f"lattice: error: {message}", err=True)
    raise typer.Exit(code)


def error(message: str) -> None:
    """One error line on stderr without exiting (a failed file of a batch)."""
    typer.echo(f"lattice: error: {message}", err=True)


def warn(message: str) -> None:
    """One warning line on stderr."""
    typer.echo(f"lattice: warning: {message}", err=True)


def error_message(err: BaseException) -> str:
    """The one-line text for an exception: the message of input errors, the file and reason of OS errors."""
    from lattice.pipeline.batch import error_text

    return error_text(err)


def _is_terminal(name: str) -> bool:
    """A character device that is a terminal (a FIFO is never one: opening it to look would
    signal end-of-file to its reader)."""
    import stat

    try:
        if not stat.S_ISCHR(os.stat(name).st_mode):
            return False
        fd = os.open(name, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        return os.isatty(fd)
    finally:
        os.close(fd)


def refuse_input_as_output(output: str | None, inputs: list[str]) -> None:
    """A usage error (exit 2) when ``output`` is one of ``inputs``: the same path, a symlink to
    it or a hard link of it (it would be replaced by its own result)."""
    if output in (None, STDIO) or not os.path.exists(output):
        return
    for item in inputs:
        if item == STDIO or not os.path.exists(item) or is_stream_output(item):
            continue
        if os.path.samefile(output, item):
            fail(f"output {output} is the input {item}; choose another output file", EXIT_USAGE)


def stdout_console(**kwargs):
    """A rich console for stdout: rich's layout on a terminal, whole lines in a pipe or file
    (never hard-wrapped at 80 columns, mid-word or mid-filename)."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(**kwargs)
    return Console(width=100_000, soft_wrap=True, **kwargs)


def plural(n: int, word: str) -> str:
    """``1 channel``, ``5 channels``."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def emit(summary: dict, text: str, *, as_json: bool, data_on_stdout: bool = False) -> None:
    """Print a summary: JSON or a text line, on stdout unless stdout carries the data."""
    typer.echo(json.dumps(summary) if as_json else text, err=data_on_stdout)


# ---- parsing --------------------------------------------------------------------------


def is_point_input(path: str) -> bool | str:
    """Directory scans of the point commands: True for a file to try, else why it is skipped
    (``lattice.io.formats.scan_reason``)."""
    from lattice.io.formats import scan_reason

    return scan_reason(path) or True


def parse_reductions(values: list[str] | None, known: tuple[str, ...]) -> tuple[str | None, dict[str, str]]:
    """``--reduce R`` (every attribute) and ``--reduce NAME=R`` (one attribute), repeatable.

    Returns ``(reduction for all or None, {name: reduction})``; a reduction not in
    ``known`` or two bare values are usage errors.
    """
    everything, per_name = None, {}
    for value in values or []:
        for part in (p.strip() for p in value.split(",") if p.strip()):
            name, sep, reduction = part.partition("=")
            reduction = (reduction if sep else name).strip()
            if reduction not in known:
                fail(f"--reduce: {reduction!r} is not one of {', '.join(known)} (in {value!r})", EXIT_USAGE)
            if not sep:
                if everything is not None and everything != reduction:
                    fail(
                        f"--reduce given twice for every attribute: {everything} and {reduction}", EXIT_USAGE
                    )
                everything = reduction
            elif not name.strip():
                fail(f"--reduce: missing the attribute name before '=' in {value!r}", EXIT_USAGE)
            else:
                per_name[name.strip()] = reduction
    return everything, per_name


def check_output(output: str | None, output_format: str | None, output_dir: str | None) -> str:
    """The output format (a usage error, exit 2, for an extension or format no writer knows)."""
    from lattice.pipeline.export import OutputFormatError
    from lattice.pipeline.export import output_format as resolve

    if output not in (None, STDIO) and output_format is not None and not is_stream_output(output):
        fail(
            "--output-format applies to -o -, a FIFO or device, and batch mode; with -o FILE the extension decides",
            EXIT_USAGE,
        )
    from lattice.io.storage import is_url

    if output not in (None, STDIO) and not is_url(output) and Path(output).is_dir():
        fail(f"cannot write {output}: it is a directory")
    stream = output is None or is_stream_output(output)
    try:
        return resolve(sys.stdout.buffer if stream else output, output_format)
    except OutputFormatError as err:
        fail(str(err), EXIT_USAGE)


def check_position(position: str) -> str:
    """``centre`` (also ``center``) or ``centroid``; anything else is a usage error."""
    position = {"center": "centre"}.get(position.lower(), position.lower())
    if position not in ("centre", "centroid"):
        fail(f"--position must be centre or centroid, got {position!r}", EXIT_USAGE)
    return position


def parse_int_list(text: str, name: str) -> list[int]:
    """Comma-separated positive integers (usage error otherwise)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        fail(f"{name} must be comma-separated integers, got {text!r}", code=EXIT_USAGE)
    if not values or min(values) <= 0:
        fail(f"{name} must be positive integers, got {text!r}", code=EXIT_USAGE)
    return values


def parse_triple(text: str, name: str, kind: type = float) -> tuple:
    """``S`` or ``X,Y,Z`` as a triple of ``kind``; text that is not numbers is a usage error.

    Range checks (positive, finite) belong to the library function, whose ValueError is exit 1.
    """
    parts = [p.strip() for p in text.split(",")]
    try:
        values = [kind(p) for p in parts]
    except ValueError:
        fail(
            f"{name} must be one or three {kind.__name__}s separated by commas, got {text!r}", code=EXIT_USAGE
        )
    if len(values) not in (1, 3):
        fail(f"{name} must be one or three numbers, got {len(values)} in {text!r}", code=EXIT_USAGE)
    return tuple(values * 3 if len(values) == 1 else values)


def parse_names(text: str | None) -> tuple[str, ...] | None:
    """``a,b,c`` as a tuple; None stays None (all); ``none`` or an empty string is ``()``."""
    if text is None:
        return None
    if text.strip().lower() in ("", "none"):
        return ()
    return tuple(p.strip() for p in text.split(",") if p.strip())


# ---- stdin / stdout -------------------------------------------------------------------


def is_directory(name: str) -> bool:
    """Whether an input names a directory (a URL: a prefix); a store that cannot be reached is
    an error line, exit 1."""
    from lattice.io.storage import is_dir

    if name == STDIO:
        return False
    try:
        return is_dir(name)
    except (OSError, ValueError) as err:
        fail(error_message(err))


def input_stream(name: str) -> str | BinaryIO:
    """``-`` is stdin (binary); anything else is returned as the path."""
    return sys.stdin.buffer if name == STDIO else name


def is_stream_output(name: str | None) -> bool:
    """``-``, or an existing FIFO / device (``/dev/null``, a named pipe): written as a stream,
    never replaced by a file."""
    from lattice.io.atomic import is_special

    return name == STDIO or (name is not None and is_special(name))


def output_target(name: str) -> str | BinaryIO:
    """``-`` is stdout (binary, refused on a terminal); a FIFO or device is opened and written
    as a stream; a path's directory must exist."""
    if name == STDIO:
        if sys.stdout.isatty():
            fail("refusing to write a binary NPZ to a terminal; redirect stdout or give -o FILE", EXIT_USAGE)
        return sys.stdout.buffer
    if is_stream_output(name):
        if _is_terminal(name):
            fail(f"refusing to write binary data to the terminal {name}; give -o FILE", EXIT_USAGE)
        try:
            return open(name, "wb")  # noqa: SIM115 (closed at exit; a stream, never renamed over)
        except OSError as err:
            fail(f"cannot write {name}: {err.strerror}")
    from lattice.io.storage import is_url, local_path

    if is_url(name):  # written through fsspec: the store says what is wrong, at the upload
        return name
    path = Path(local_path(name))
    if path.is_dir():
        fail(f"cannot write {name}: it is a directory")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        fail(f"cannot write {name}: {parent} {what}")
    if not os.access(parent, os.W_OK):
        fail(f"cannot write {name}: {parent} is not writable")
    return name
