"""Single-file and batch runs of one file-to-file job (``job(src, dst) -> summary dict``).

One input with ``-o OUT`` (``-`` for stdin / stdout) runs the job once. Several inputs,
a directory (searched recursively; its sub-folders are mirrored) or a quoted glob need
``--output-dir``: every input gets ``<output-dir>/<name><extension>`` (``.npz`` unless
the command's ``--output-format`` says otherwise). Files of a directory that the command
cannot read are reported as skipped, with the reason. An existing output is skipped when
its provenance record (``lattice.pipeline.provenance``) says it was made by the same
command with the same parameters from the same input; any other existing output is
redone (``--overwrite`` redoes all). ``--workers N`` runs files in N processes
(``spawn``, each with ``cpu_count // N`` threads); a failing file is recorded and the
others go on. A rich progress bar is drawn when stderr is a terminal. The summary counts
done, skipped, redone and failed files, and the exit code is 1 when any file failed.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

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
    output_target,
    refuse_input_as_output,
    warn,
)

Job = Callable[..., dict]
_GLOB = set("*?[")
_THREAD_VARS = ("LATTICE_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")


@dataclass(frozen=True)
class Task:
    """One input file and the output it becomes (``error`` set when it cannot even start;
    ``skip`` set for a file of a directory that the command does not read, with the reason)."""

    src: str
    dst: str | None
    error: str | None = None
    skip: str | None = None


@dataclass(frozen=True)
class Expect:
    """What a command's outputs record (its name and parameters): a batch skips an existing
    output only when its record matches."""

    command: str
    parameters: dict


def run_one(job: Job, src: str, dst: str) -> dict:
    """Run ``job`` on one file and never raise: ``{"input", "output", "status", "error"|"summary"}``."""
    try:
        summary = job(src, dst)
    except Exception as err:  # one bad file fails that file, not the batch
        message = error_message(err)
        message = message if message.startswith(src) else f"{src}: {message}"
        return {"input": src, "output": dst, "status": "failed", "error": message}
    return {"input": src, "output": dst, "status": "done", "summary": summary}


# ---- planning ---------------------------------------------------------------------------


def _visible_files(directory: Path) -> list[Path]:
    return sorted(
        p
        for p in directory.rglob("*")
        if p.is_file()
        and not any(part.startswith(".") for part in p.relative_to(directory).parts)
        and not p.name.endswith(SIDECAR)  # provenance records beside outputs are not inputs
    )


def _output_name(p: Path, extension: str) -> str:
    """``scan.pcd.bin`` -> ``scan`` + extension; ``scan.ply`` -> ``scan`` + extension."""
    name = p.name
    for double in (".pcd.bin",):
        if name.lower().endswith(double):
            return name[: -len(double)] + extension
    return p.stem + extension


Accept = Callable[[Path], "bool | str"]
SIDECAR = (
    ".lattice.json"  # lattice.pipeline.provenance.SIDECAR (not imported: the CLI starts without lattice)
)


def _reason(accept: Accept, p: Path) -> str | None:
    """None when ``accept`` takes the file, else why not."""
    verdict = accept(p)
    if verdict is True:
        return None
    return (
        verdict
        if isinstance(verdict, str)
        else f"not a file this command reads ({p.suffix or 'no extension'})"
    )


def expand_inputs(items: list[str], output_dir: Path, accept: Accept, extension: str = ".npz") -> list[Task]:
    """Tasks for explicit files, directories (recursive, mirrored) and globs, in input order.

    Files of a directory that ``accept`` refuses (it returns False or the reason) become
    skipped tasks with the reason; explicit files are always tried.
    """
    tasks: list[Task] = []
    for item in items:
        path = Path(item)
        if item == STDIO:
            fail("- (stdin) cannot be used in batch mode; give one input and -o", EXIT_USAGE)
        if path.is_dir():
            found = _visible_files(path)
            taken = [p for p in found if _reason(accept, p) is None]
            if not taken:
                tasks.append(Task(item, None, f"{item}: no input files in this directory"))
            for p in found:
                why = _reason(accept, p)
                out = output_dir / p.relative_to(path).parent / _output_name(p, extension)
                tasks.append(Task(str(p), None if why else str(out), skip=why))
        elif not path.exists() and _GLOB & set(item):
            found = sorted(p for p in map(Path, glob.glob(item, recursive=True)) if p.is_file())
            if not found:
                tasks.append(Task(item, None, f"{item}: no files match this pattern"))
            tasks += [Task(str(p), str(output_dir / _output_name(p, extension))) for p in found]
        else:
            tasks.append(Task(item, str(output_dir / _output_name(path, extension))))
    seen: dict[str, str] = {}
    for t in tasks:
        if t.dst is None:
            continue
        key = os.path.realpath(t.dst)
        if key == os.path.realpath(t.src):
            fail(f"output {t.dst} would replace its input; choose another --output-dir", EXIT_USAGE)
        if key in seen:
            fail(f"inputs {seen[key]} and {t.src} would both write {t.dst}", EXIT_USAGE)
        seen[key] = t.src
    return tasks


def prepare_output_dir(directory: Path) -> None:
    """Create the output directory and prove it can be written, or fail with exit 1."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        fail(f"cannot write to output directory {directory}: {err.strerror or err}")


# ---- running ----------------------------------------------------------------------------


@contextmanager
def _worker_threads(workers: int) -> Iterator[None]:
    """Give each worker process ``cpu_count // workers`` threads (unless the user set them)."""
    threads = str(max(1, (os.cpu_count() or 1) // workers))
    saved = {k: os.environ.get(k) for k in _THREAD_VARS}
    for k in _THREAD_VARS:
        os.environ.setdefault(k, threads)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _progress(enabled: bool, total: int):
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    )
    progress.add_task("files", total=total)
    return progress


def _execute(job: Job, tasks: list[Task], workers: int, on_result: Callable[[dict], None]) -> None:
    if workers <= 1 or len(tasks) <= 1:
        for t in tasks:
            on_result(run_one(job, t.src, t.dst))
        return
    # imported here: a command that runs no pool (or only prints its help) starts without them
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    context = multiprocessing.get_context("spawn")  # no fork of a process that runs MLX threads
    with _worker_threads(workers), ProcessPoolExecutor(min(workers, len(tasks)), mp_context=context) as pool:
        futures = {pool.submit(run_one, job, t.src, t.dst): t for t in tasks}
        for future in as_completed(futures):
            t = futures[future]
            try:
                on_result(future.result())
            except BrokenProcessPool as err:
                on_result(
                    {"input": t.src, "output": t.dst, "status": "failed", "error": f"worker died: {err}"}
                )


def _existing(t: Task, expect: Expect | None, overwrite: bool) -> tuple[str, str] | None:
    """``("skipped" | "redone", reason)`` for a task whose output exists, else None."""
    from lattice.pipeline.provenance import make_record, matches, read_record

    if t.dst is None or not os.path.exists(t.dst):
        return None
    if overwrite:
        return "redone", "--overwrite"
    if expect is None:
        return "skipped", "output exists"
    record = read_record(t.dst)
    if matches(record, expect.command, expect.parameters, t.src):
        return "skipped", "made with the same parameters from the same input"
    if record is None:
        return "redone", "the existing output has no parameter record"
    if record.get("command") != expect.command or record.get("parameters") != make_record(
        expect.command, expect.parameters
    ).get("parameters"):
        return "redone", "the existing output was made with other parameters"
    return "redone", "the input changed since the output was made"


def run_batch(
    job: Job,
    tasks: list[Task],
    *,
    workers: int = 1,
    overwrite: bool = False,
    progress: bool = False,
    expect: Expect | None = None,
    on_failure: Callable[[dict], None] | None = None,
) -> dict:
    """Run ``job`` over ``tasks``; returns ``{"done", "skipped", "redone", "failed", "files": [...]}``
    in input order. ``on_failure`` is called with each failed file's result as it happens."""
    results: dict[int, dict] = {}
    pending: list[tuple[int, Task]] = []
    redo: dict[int, str] = {}
    for i, t in enumerate(tasks):
        if t.error is not None:
            results[i] = {"input": t.src, "output": None, "status": "failed", "error": t.error}
            if on_failure is not None:
                on_failure(results[i])
            continue
        if t.skip is not None:
            results[i] = {"input": t.src, "output": None, "status": "skipped", "reason": t.skip}
            continue
        state = _existing(t, expect, overwrite)
        if state is not None and state[0] == "skipped":
            results[i] = {"input": t.src, "output": t.dst, "status": "skipped", "reason": state[1]}
            continue
        if state is not None:
            redo[i] = state[1]
        pending.append((i, t))
    bar = _progress(progress, len(tasks))
    index = {(t.src, t.dst): i for i, t in pending}

    def on_result(result: dict) -> None:
        i = index[(result["input"], result["output"])]
        if i in redo and result["status"] == "done":
            result = {**result, "status": "redone", "reason": redo[i]}
        results[i] = result
        if result["status"] == "failed" and on_failure is not None:
            on_failure(result)
        if bar is not None:
            bar.advance(bar.task_ids[0])

    if bar is not None:
        bar.start()
        bar.advance(bar.task_ids[0], len(tasks) - len(pending))
    try:
        for t in [t for _, t in pending if t.dst is not None]:
            Path(t.dst).parent.mkdir(parents=True, exist_ok=True)
        _execute(job, [t for _, t in pending], workers, on_result)
    finally:
        if bar is not None:
            bar.stop()
    files = [results[i] for i in range(len(tasks))]
    count = {s: sum(f["status"] == s for f in files) for s in ("done", "skipped", "redone", "failed")}
    return {**count, "files": files}


# ---- the command-level driver -----------------------------------------------------------


@dataclass(frozen=True)
class Outputs:
    """The output options of every file command: ``-o``, ``--output-dir``, the output format
    (checked: ``--output-format`` or the extension), ``--overwrite``, ``--workers`` and ``--json``."""

    output: str | None
    output_dir: Path | None
    format: str = "npz"
    overwrite: bool = False
    workers: int = 1
    as_json: bool = False


def run_files(
    job: Job,
    inputs: list[str],
    outputs: Outputs,
    *,
    describe: Callable[[dict], str],
    accept: Accept = lambda p: True,
    expect: Expect | None = None,
) -> None:
    """Parse-level dispatch shared by the file commands: one file or a batch.

    One input with ``-o`` is a single run (a directory given there is an input error).
    Otherwise several inputs, a directory or a pattern need ``--output-dir``; outputs get
    the extension of ``outputs.format``, and ``expect`` says what an existing output must
    record to be skipped.
    """
    from lattice.pipeline.export import extension_of

    output, output_dir, as_json = outputs.output, outputs.output_dir, outputs.as_json
    if output is not None:
        if output_dir is not None or len(inputs) > 1:
            fail("-o/--output takes a single input; use --output-dir for several inputs", EXIT_USAGE)
        _run_single(job, inputs[0], output, describe, as_json)
        return
    if output_dir is None:
        if len(inputs) > 1 or any(Path(i).is_dir() or (_GLOB & set(i)) for i in inputs):
            fail("several inputs, a directory or a pattern need --output-dir", EXIT_USAGE)
        fail("missing -o/--output (a file, or - for stdout); use --output-dir for batch mode", EXIT_USAGE)
    tasks = expand_inputs(inputs, output_dir, accept, extension_of(outputs.format))
    prepare_output_dir(output_dir)
    if expect is not None:  # outputs record their parameters beside them, for the next re-run
        job = functools.partial(job, sidecar=True)
    summary = run_batch(
        job,
        tasks,
        workers=outputs.workers,
        overwrite=outputs.overwrite,
        progress=sys.stderr.isatty(),
        expect=expect,
        on_failure=lambda f: error(f["error"]),  # as it happens, not only at the end
    )
    for f in summary["files"]:
        if f["status"] in ("done", "redone"):
            _warnings(f["summary"])
        elif f["status"] == "skipped" and f["output"] is None:
            warn(f"skipped {f['input']}: {f['reason']}")
    text = (
        f"done {summary['done']}, skipped {summary['skipped']}, redone {summary['redone']}, "
        f"failed {summary['failed']} ({len(tasks)} inputs)"
    )
    emit(summary, text, as_json=as_json)
    if summary["failed"]:
        raise typer.Exit(EXIT_FAILED)


def _warnings(summary: dict) -> None:
    dropped = summary.get("nonfinite_dropped", 0)
    if dropped:
        warn(
            f"{summary.get('input')}: dropped {dropped} points with non-finite coordinates (use --strict to refuse)"
        )
    for line in summary.get("warnings", []):
        warn(f"{summary.get('input')}: {line}")


def _run_single(job: Job, src: str, dst: str, describe: Callable[[dict], str], as_json: bool) -> None:
    if src != STDIO and Path(src).is_dir():
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
