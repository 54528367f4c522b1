"""Single-file and batch runs of one file-to-file job (``job(src, dst) -> summary dict``): the CLI side.

One input with ``-o OUT`` (``-`` for stdin / stdout) runs the job once. Several inputs,
a directory (searched recursively; its sub-folders are mirrored) or a quoted glob need
``--output-dir`` and run through the library's batch engine, ``lattice.pipeline.batch``
(planning, the parameter-aware skip, executors); this module parses, calls it and prints:
a rich progress bar (current file, ETA) when stderr is a terminal, each failure as it
happens, the done / skipped / redone / failed summary, exit code 1 when any file failed.
``--workers N`` runs files in N local processes, ``--scheduler local:N|tcp://HOST:PORT``
on Dask (``lattice.pipeline.executors``).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from dataclasses import dataclass

import typer

from lattice_cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    STDIO,
    emit,
    error,
    error_message,
    fail,
    input_stream,
    is_directory,
    output_target,
    refuse_input_as_output,
    warn,
)

Job = Callable[..., dict]
Accept = Callable[[str], "bool | str"]
_GLOB = set("*?[")


class _Bar:
    """The rich progress bar of a batch, fed by ``run_batch``'s progress events; failures are
    printed as they happen."""

    def __init__(self, enabled: bool):
        self.progress = None
        if enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self.progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=Console(stderr=True),
            )
            self.bar = self.progress.add_task("files", total=None)

    def __call__(self, event) -> None:
        from lattice.pipeline.batch import FileFinished

        finished = isinstance(event, FileFinished)
        if finished and event.result.status == "failed":
            if self.progress is not None:
                self.progress.console.print(
                    f"lattice: error: {event.result.error}", markup=False, highlight=False
                )
            else:
                error(event.result.error)
        if self.progress is not None:
            from rich.markup import escape

            from lattice.io import storage

            name = escape(storage.basename(event.result.input if finished else event.task.src))
            self.progress.update(self.bar, total=event.total, description=name, advance=int(finished))

    def __enter__(self):
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.progress is not None:
            self.progress.stop()


# ---- the command-level driver -----------------------------------------------------------


@dataclass(frozen=True)
class Outputs:
    """The output options of every file command: ``-o``, ``--output-dir``, the output format
    (checked: ``--output-format`` or the extension), ``--overwrite``, ``--workers``, ``--json``
    and ``--scheduler``."""

    output: str | None
    output_dir: str | None
    format: str = "npz"
    overwrite: bool = False
    workers: int | None = None
    as_json: bool = False
    scheduler: str | None = None


def run_files(
    job: Job,
    inputs: list[str],
    outputs: Outputs,
    *,
    describe: Callable[[dict], str],
    accept: Accept = lambda p: True,
    expect=None,
) -> None:
    """Parse-level dispatch shared by the file commands: one file or a batch.

    One input with ``-o`` is a single run (a directory given there is an input error).
    Otherwise several inputs, a directory or a pattern need ``--output-dir``; outputs get
    the extension of ``outputs.format``, and ``expect`` (``lattice.pipeline.Expect``) says
    what an existing output must record to be skipped.
    """
    output, output_dir, as_json = outputs.output, outputs.output_dir, outputs.as_json
    if output is not None:
        if output_dir is not None or len(inputs) > 1:
            fail("-o/--output takes a single input; use --output-dir for several inputs", EXIT_USAGE)
        _run_single(job, inputs[0], output, describe, as_json)
        return
    if output_dir is None:
        if len(inputs) > 1 or any(is_directory(i) or (_GLOB & set(i)) for i in inputs):
            fail("several inputs, a directory or a pattern need --output-dir", EXIT_USAGE)
        fail("missing -o/--output (a file, or - for stdout); use --output-dir for batch mode", EXIT_USAGE)
    summary = _run_batch(job, inputs, outputs, accept, expect)
    for f in summary.files:
        if f.status in ("done", "redone"):
            _warnings(f.summary)
        elif f.status == "skipped" and f.output is None:
            warn(f"skipped {f.input}: {f.reason}")
    text = (
        f"done {summary.done}, skipped {summary.skipped}, redone {summary.redone}, "
        f"failed {summary.failed} ({len(summary.files)} inputs)"
    )
    emit(summary.to_dict(), text, as_json=as_json)
    if summary.failed:
        raise typer.Exit(EXIT_FAILED)


def _run_batch(job: Job, inputs: list[str], outputs: Outputs, accept: Accept, expect):
    """``lattice.pipeline.run_batch`` with the executor of the options; its errors as exit codes."""
    from lattice.pipeline.export import extension_of

    if expect is not None:  # outputs record their parameters beside them, for the next re-run
        job = functools.partial(job, sidecar=True)
    return _execute(job, inputs, outputs, accept, expect, extension_of(outputs.format))


def run_reads(job: Job, inputs: list[str], outputs: Outputs, accept: Accept):
    """A batch of a job that writes nothing (``lattice info`` over many files): its summary."""
    return _execute(job, inputs, outputs, accept, None, "")


def _execute(job: Job, inputs: list[str], outputs: Outputs, accept: Accept, expect, extension: str):
    from lattice.pipeline.batch import BatchError, BatchUsageError, plan_tasks, run_batch
    from lattice.pipeline.executors import executor_for

    try:
        executor = executor_for(outputs.scheduler, outputs.workers)
        tasks = plan_tasks(inputs, outputs.output_dir, accept, extension)
        with _Bar(sys.stderr.isatty()) as bar:
            return run_batch(
                job, tasks, outputs.output_dir, executor=executor, overwrite=outputs.overwrite, expect=expect,
                on_progress=bar,
            )  # fmt: skip
    except BatchUsageError as err:
        fail(str(err), EXIT_USAGE)
    except BatchError as err:
        fail(str(err))


def _warnings(summary: dict) -> None:
    dropped = summary.get("nonfinite_dropped", 0)
    if dropped:
        warn(
            f"{summary.get('input')}: dropped {dropped} points with non-finite coordinates (use --strict to refuse)"
        )
    for line in [*summary.get("warnings", []), *summary.get("domain_warnings", [])]:
        warn(f"{summary.get('input')}: {line}")


def _run_single(job: Job, src: str, dst: str, describe: Callable[[dict], str], as_json: bool) -> None:
    if is_directory(src):
        fail(f"{src}: is a directory, expected a file (use --output-dir to process the files in it)")
    refuse_input_as_output(dst, [src])
    target = output_target(dst)
    try:
        summary = job(input_stream(src), target)
    except Exception as err:  # one clear line naming the file, never a traceback
        message = error_message(err)
        named = (src, dst, "<stdin>", "<stdout>", "<stream>")
        fail(message if message.startswith(named) else f"{src if src != STDIO else '<stdin>'}: {message}")
    finally:
        if hasattr(target, "close") and target is not sys.stdout.buffer:
            target.close()
    summary["input"] = src
    _warnings(summary)
    emit(summary, describe(summary), as_json=as_json, data_on_stdout=dst == STDIO)
