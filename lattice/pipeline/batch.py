"""The batch engine: one file-to-file job (``job(src, dst) -> summary dict``) over many inputs.

``plan_tasks`` turns inputs (files, directories searched recursively and mirrored, globs)
into :class:`Task` values; ``run_batch`` decides for each whether an existing output is
skipped or redone (the parameter-aware test of ``lattice.pipeline.provenance``, always in
this process, whatever the executor), hands the rest to an executor
(``lattice.pipeline.executors``: in-process, local processes, Dask) and returns a
:class:`BatchSummary` of one :class:`FileResult` per input, in input order. A failing file
fails that file only. Errors of the plan itself (two inputs writing one output, stdin in a
batch, an output directory that cannot be written) raise :class:`BatchError`.

Inputs and the output directory may be URLs (``s3://bucket/prefix/``; see
``lattice.io.storage``): every file the engine touches goes through the few functions of the
"files" section, which reach local paths and URLs alike.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, field, replace
from pathlib import Path

Job = Callable[..., dict]
Accept = Callable[[str], "bool | str"]  # given an input file (path or URL)
STATUSES = ("done", "skipped", "redone", "failed")
_GLOB = set("*?[")
_SIDECAR = ".lattice.json"  # lattice.pipeline.provenance.SIDECAR (provenance records are not inputs)


class BatchError(ValueError):
    """The batch cannot start (an output directory that cannot be written, ...)."""


class BatchUsageError(BatchError):
    """The inputs and outputs asked for do not make a batch (the CLI's exit 2)."""


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


@dataclass(frozen=True)
class FileResult:
    """What became of one input: ``status`` is done, skipped, redone or failed; ``reason`` says
    why it was skipped or redone, ``error`` why it failed; ``summary`` is the job's dict."""

    input: str
    output: str | None
    status: str
    reason: str | None = None
    error: str | None = None
    seconds: float = 0.0
    summary: dict | None = field(default=None, compare=False)

    def to_dict(self) -> dict:
        """``{"input", "output", "status", "summary" | "error" | "reason", "seconds"}`` (``--json``)."""
        d: dict = {"input": self.input, "output": self.output, "status": self.status}
        if self.summary is not None:
            d["summary"] = self.summary
        if self.error is not None:
            d["error"] = self.error
        if self.reason is not None:
            d["reason"] = self.reason
        if self.status != "skipped":
            d["seconds"] = round(self.seconds, 4)
        return d


@dataclass(frozen=True)
class BatchSummary:
    """Every input's :class:`FileResult`, in input order, and the counts by status."""

    files: tuple[FileResult, ...]
    seconds: float = 0.0

    def count(self, status: str) -> int:
        """How many files ended with ``status``."""
        return sum(f.status == status for f in self.files)

    done = property(lambda self: self.count("done"))
    skipped = property(lambda self: self.count("skipped"))
    redone = property(lambda self: self.count("redone"))
    failed = property(lambda self: self.count("failed"))

    def to_dict(self) -> dict:
        """``{"done", "skipped", "redone", "failed", "files": [...]}``: the ``--json`` summary."""
        return {**{s: self.count(s) for s in STATUSES}, "files": [f.to_dict() for f in self.files]}


@dataclass(frozen=True)
class FileStarted:
    """Progress event: input ``index`` (of ``total``) went to a worker (not every executor tells)."""

    index: int
    total: int
    task: Task


@dataclass(frozen=True)
class FileFinished:
    """Progress event: input ``index`` (of ``total``) ended with ``result``."""

    index: int
    total: int
    result: FileResult


Progress = Callable[[FileStarted | FileFinished], None]


def error_text(err: BaseException) -> str:
    """The one-line text for an exception: the message of input errors, the file and reason of OS errors."""
    if isinstance(err, OSError) and err.strerror:
        where = err.filename if err.filename is not None else ""
        return f"{where}: {err.strerror}" if where else err.strerror
    from lattice.io import PointCloudError

    if isinstance(err, PointCloudError):
        text = err.cli_message
    elif isinstance(err, ValueError | TypeError):
        text = str(err)
    else:
        text = f"{type(err).__name__}: {err}"
    return " ".join(text.split()) or type(err).__name__


def run_one(job: Job, task: Task) -> FileResult:
    """Run ``job`` on one task and never raise: a done or failed :class:`FileResult` (run in workers)."""
    start = time.perf_counter()
    try:
        summary = job(task.src, task.dst)
    except Exception as err:  # one bad file fails that file, not the batch
        message = error_text(err)
        message = message if message.startswith(task.src) else f"{task.src}: {message}"
        return FileResult(task.src, task.dst, "failed", error=message, seconds=time.perf_counter() - start)
    return FileResult(task.src, task.dst, "done", summary=summary, seconds=time.perf_counter() - start)


# ---- files (the one place that touches the file system; URLs go here) -----------------------


def _list_files(directory: str) -> list[tuple[str, str]]:
    """``(file, path relative to directory)`` of the files to consider: not hidden, not sidecars."""
    from lattice.io import storage

    return [
        (full, rel)
        for full, rel in storage.list_files(directory)
        if not any(part.startswith(".") for part in rel.split("/")) and not rel.endswith(_SIDECAR)
    ]


def prepare_output_dir(directory: str | os.PathLike, *, older_than: float | None = None) -> None:
    """Create ``directory``, prove it can be written, and remove the temp files that killed
    runs left anywhere in it (``lattice.io.atomic.remove_stale_temps``); ``BatchError`` if it
    cannot be written. A URL prefix is proved by writing and deleting an empty probe key."""
    from lattice.io import storage
    from lattice.io.atomic import remove_stale_temps

    if storage.is_url(directory):
        _prove_writable_prefix(os.fspath(directory))
        remove_stale_temps(directory, older_than=older_than)
        return
    directory = storage.local_path(directory)
    try:
        Path(directory).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        raise BatchError(f"cannot write to output directory {directory}: {err.strerror or err}") from err
    for folder, _, _ in os.walk(directory):
        remove_stale_temps(folder, older_than=older_than)


def _prove_writable_prefix(url: str) -> None:
    from lattice.io import storage
    from lattice.io.atomic import temp_prefix

    try:
        fs, path = storage.filesystem(url)
        storage.make_dirs(url)
        probe = f"{path.rstrip('/')}/{temp_prefix('probe')}0.tmp"
        with storage.remote_errors(url, "cannot write"):
            fs.pipe_file(probe, b"")
            fs.rm_file(probe)
    except FileNotFoundError as err:
        raise BatchError(f"cannot write to output directory {url}: no such bucket") from err
    except OSError as err:
        raise BatchError(f"cannot write to output directory {url}: {err.strerror or err}") from err
    except storage.StorageError as err:
        raise BatchError(str(err)) from err


def _output_folders(tasks: Sequence[Task]) -> list[str]:
    from lattice.io import storage

    return sorted({storage.dirname(t.dst) or "." for t in tasks if t.dst is not None})


def _make_folders(tasks: Sequence[Task], output_dir, start: float) -> None:
    """The folders of the outputs (sub-folders mirrored), cleaned of stale temps where
    ``prepare_output_dir`` did not already walk them."""
    from lattice.io import storage
    from lattice.io.atomic import remove_stale_temps

    root = None if output_dir is None else os.fspath(output_dir)
    for folder in _output_folders(tasks):
        if storage.is_url(folder):
            if root is None or not storage.is_url(root) or not folder.startswith(root.rstrip("/")):
                remove_stale_temps(folder, older_than=start)
            continue
        Path(folder).mkdir(parents=True, exist_ok=True)
        inside = root is not None and not storage.is_url(root)
        if not inside or not os.path.realpath(folder).startswith(os.path.realpath(storage.local_path(root))):
            remove_stale_temps(folder, older_than=start)


def _remove_dead_temps(tasks: Sequence[Task]) -> None:
    from lattice.io.atomic import remove_stale_temps

    for folder in _output_folders(tasks):  # other hosts' dead writers: at the next run's start
        remove_stale_temps(folder)


# ---- planning -----------------------------------------------------------------------------


def output_name(name: str, extension: str) -> str:
    """``scan.pcd.bin`` -> ``scan`` + extension; ``scan.ply`` -> ``scan`` + extension (a path or URL's last part)."""
    from lattice.io import storage

    name = storage.basename(name)
    for double in (".pcd.bin",):
        if name.lower().endswith(double):
            return name[: -len(double)] + extension
    stem, _ = os.path.splitext(name)
    return (stem or name) + extension


def _reason(accept: Accept, item: str) -> str | None:
    verdict = accept(item)
    if verdict is True:
        return None
    if isinstance(verdict, str):
        return verdict
    return f"not a file this command reads ({os.path.splitext(item)[1] or 'no extension'})"


def _expand(item: str, output_dir: str, accept: Accept, extension: str) -> list[Task]:
    from lattice.io import storage

    if storage.is_dir(item):
        found = _list_files(item)
        if not any(_reason(accept, full) is None for full, _ in found):
            return [Task(item, None, f"{item}: no input files in this directory")]
        tasks = []
        for full, rel in found:
            why = _reason(accept, full)
            folder = rel.rpartition("/")[0]
            out = storage.join(output_dir, *folder.split("/"), output_name(full, extension))
            tasks.append(Task(full, None if why else out, skip=why))
        return tasks
    if not storage.exists(item) and _GLOB & set(item):
        found = storage.glob(item)
        if not found:
            return [Task(item, None, f"{item}: no files match this pattern")]
        return [Task(p, storage.join(output_dir, output_name(p, extension))) for p in found]
    return [Task(item, storage.join(output_dir, output_name(item, extension)))]


def plan_tasks(
    inputs: Iterable[str],
    output_dir: str | os.PathLike | None,
    accept: Accept | None = None,
    extension: str = ".npz",
) -> list[Task]:
    """Tasks for explicit files, directories (recursive, mirrored) and globs, in input order.

    Files of a directory that ``accept`` refuses (it returns False or the reason) become
    skipped tasks; explicit files are always tried. ``output_dir=None`` plans a job that
    writes nothing (``lattice info`` over many files): every task's ``dst`` is None.
    ``BatchUsageError`` for ``-`` (stdin), an output that would replace its input, or two
    inputs that would write one output.
    """
    from lattice.io import storage

    accept = accept or (lambda p: True)
    tasks: list[Task] = []
    for item in map(str, inputs):
        if item == "-":
            raise BatchUsageError("- (stdin) cannot be used in batch mode; give one input and -o")
        try:
            tasks += _expand(item, "." if output_dir is None else os.fspath(output_dir), accept, extension)
        except (OSError, storage.StorageError) as err:  # a store that cannot be reached or listed
            message = error_text(err)
            tasks.append(Task(item, None, message if message.startswith(item) else f"{item}: {message}"))
    if output_dir is None:
        return [replace(t, dst=None) for t in tasks]
    seen: dict[str, str] = {}
    for t in tasks:
        if t.dst is None:
            continue
        key = t.dst.rstrip("/") if storage.is_url(t.dst) else os.path.realpath(storage.local_path(t.dst))
        if storage.same_location(t.dst, t.src):
            raise BatchUsageError(f"output {t.dst} would replace its input; choose another --output-dir")
        if key in seen:
            raise BatchUsageError(f"inputs {seen[key]} and {t.src} would both write {t.dst}")
        seen[key] = t.src
    return tasks


def existing_state(t: Task, expect: Expect | None, overwrite: bool) -> tuple[str, str] | None:
    """``("skipped" | "redone", reason)`` for a task whose output exists, else None."""
    from lattice.io import storage
    from lattice.pipeline.provenance import make_record, matches, read_record

    if t.dst is None or not storage.exists(t.dst):
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
    wanted = make_record(expect.command, expect.parameters).get("parameters")
    if record.get("command") != expect.command or record.get("parameters") != wanted:
        return "redone", "the existing output was made with other parameters"
    return "redone", "the input changed since the output was made"


def _settled(t: Task, expect: Expect | None, overwrite: bool) -> tuple[FileResult | None, str | None]:
    """The result of a task that needs no run (or None), and why a run redoes an output."""
    if t.error is not None:
        return FileResult(t.src, None, "failed", error=t.error), None
    if t.skip is not None:
        return FileResult(t.src, None, "skipped", reason=t.skip), None
    state = existing_state(t, expect, overwrite)
    if state is not None and state[0] == "skipped":
        return FileResult(t.src, t.dst, "skipped", reason=state[1]), None
    return None, None if state is None else state[1]


# ---- running ------------------------------------------------------------------------------


def run_batch(
    job: Job,
    inputs: Sequence[str | os.PathLike | Task],
    output_dir: str | os.PathLike | None = None,
    *,
    executor=None,
    overwrite: bool = False,
    expect: Expect | None = None,
    on_progress: Progress | None = None,
    accept: Accept | None = None,
    extension: str = ".npz",
) -> BatchSummary:
    """Run ``job(src, dst)`` over ``inputs`` (paths, directories, globs, or planned :class:`Task` values).

    Paths are planned with :func:`plan_tasks` into ``output_dir`` (``accept`` and
    ``extension`` as there); ``output_dir`` (or each task's output folder) is created and its
    stale temp files removed. An existing output is skipped when its provenance matches
    ``expect`` (made by the same command with the same parameters from the same input) and
    redone otherwise; ``overwrite`` redoes all. ``executor`` (default: in this process) runs
    the rest; ``job`` must be picklable for the process and Dask executors (a module-level
    function or a ``functools.partial`` of one). ``on_progress`` gets a :class:`FileStarted`
    and a :class:`FileFinished` event per file as they happen. Never raises for a failing file.
    """
    from lattice.pipeline.executors import InProcessExecutor

    start = time.time()
    if isinstance(inputs, str | os.PathLike | Task):
        inputs = [inputs]
    if all(isinstance(i, Task) for i in inputs):
        tasks = list(inputs)
    elif output_dir is None:
        raise BatchUsageError("run_batch: output_dir is needed to plan inputs that are paths")
    else:
        tasks = plan_tasks(map(os.fspath, inputs), output_dir, accept, extension)
    if output_dir is not None:
        prepare_output_dir(output_dir, older_than=start)
    _make_folders(tasks, output_dir, start)
    total = len(tasks)
    results: dict[int, FileResult] = {}
    pending: list[int] = []
    redo: dict[int, str] = {}

    def finished(i: int, result: FileResult) -> None:
        if i in redo and result.status == "done":
            result = replace(result, status="redone", reason=redo[i])
        results[i] = result
        if on_progress is not None:
            on_progress(FileFinished(i, total, result))

    for i, t in enumerate(tasks):
        result, why = _settled(t, expect, overwrite)
        if result is not None:
            finished(i, result)
            continue
        if why is not None:
            redo[i] = why
        pending.append(i)

    def started(k: int) -> None:
        if on_progress is not None:
            on_progress(FileStarted(pending[k], total, tasks[pending[k]]))

    run = executor if executor is not None else InProcessExecutor()
    with closing(run.execute(job, [tasks[i] for i in pending], started)) as stream:
        for k, result in stream:
            t = tasks[pending[k]]
            finished(pending[k], replace(result, input=t.src, output=t.dst))
    _remove_dead_temps(tasks)  # of workers that died writing (a retry's own write removes most)
    return BatchSummary(tuple(results[i] for i in range(total)), seconds=time.time() - start)


__all__ = [
    "BatchError",
    "BatchSummary",
    "BatchUsageError",
    "Expect",
    "FileFinished",
    "FileResult",
    "FileStarted",
    "Task",
    "error_text",
    "existing_state",
    "output_name",
    "plan_tasks",
    "prepare_output_dir",
    "run_batch",
    "run_one",
]
