"""Where ``run_batch`` runs its files: in this process, in local worker processes, or on Dask.

An executor has one method, ``execute(job, tasks, on_start=None)``: it runs
``run_one(job, task)`` for every task and yields ``(index, FileResult)`` pairs as they
complete, in any order (``on_start(index)`` when a file goes to a worker, where the
executor knows). Each is imported only when used: ``import lattice.pipeline`` loads
neither ``multiprocessing`` nor Dask.

- :class:`InProcessExecutor`: one file after the other, here.
- :class:`ProcessExecutor`: ``workers`` processes (``spawn``, each with ``cpu_count //
  workers`` threads). A worker that dies (SIGKILL, a segfault, ``os._exit``) is replaced and
  its file is retried once; a second death fails that file (``worker died (SIGKILL)``),
  and the other files go on.
- :class:`DaskExecutor` (``lattice.pipeline.dask_executor``): each file one task on a Dask
  cluster; a task whose worker dies is re-run elsewhere by Dask.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

from lattice.pipeline.batch import BatchUsageError, FileResult, Job, Task, run_one
from lattice.settings import worker_threads

OnStart = Callable[[int], None]


class Executor(Protocol):
    """Runs tasks and yields ``(index in tasks, FileResult)`` as each completes."""

    def execute(
        self, job: Job, tasks: Sequence[Task], on_start: OnStart | None = None
    ) -> Iterator[tuple[int, FileResult]]: ...


class InProcessExecutor:
    """Every file in this process, one after the other (the default)."""

    def execute(
        self, job: Job, tasks: Sequence[Task], on_start: OnStart | None = None
    ) -> Iterator[tuple[int, FileResult]]:
        """Yield ``(k, run_one(job, tasks[k]))`` in order."""
        for k, task in enumerate(tasks):
            if on_start is not None:
                on_start(k)
            yield k, run_one(job, task)


def death_reason(exitcode: int | None) -> str:
    """``SIGKILL`` for a process killed by a signal, else ``exit code N``."""
    if exitcode is not None and exitcode < 0:
        try:
            return signal.Signals(-exitcode).name
        except ValueError:
            return f"signal {-exitcode}"
    return f"exit code {exitcode}"


def _interrupted(signum, frame) -> None:  # noqa: ARG001
    """A worker's SIGINT handler: KeyboardInterrupt once, every later SIGINT ignored (a
    terminal's Ctrl-C reaches the whole process group and the parent sends its own too)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise KeyboardInterrupt


def _serve(conn, job_bytes: bytes, stopping) -> None:
    """A worker process: run the tasks that come down ``conn`` until None, the pipe closes, or
    ``stopping`` (an Event) is set.

    It starts with SIGINT ignored (``_start_worker``), so a Ctrl-C during its start-up (the
    imports) cannot print a traceback; Ctrl-C is enabled first thing here (``_interrupted``:
    one KeyboardInterrupt at most), then ``stopping`` is checked before each task: a parent
    interrupted meanwhile set it before signalling. On the way out SIGINT is ignored again,
    so one that comes after the tasks are done (the parent's, racing a worker that saw
    ``stopping``) cannot interrupt the process's exit with a traceback; the parent reports
    the interrupt."""
    try:
        try:
            if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
                signal.signal(signal.SIGINT, _interrupted)
            _serve_tasks(conn, pickle.loads(job_bytes), stopping)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt:  # raised at most once (``_interrupted``), wherever it landed
        return


def _serve_tasks(conn, job: Job, stopping) -> None:
    """``_serve``'s loop: answer each ``(k, task)`` with ``(k, run_one(job, task))``."""
    while not stopping.is_set():
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None or stopping.is_set():
            return
        k, task = message
        result = run_one(job, task)
        try:
            conn.send((k, result))
        except OSError:  # the parent is gone (killed): nobody to answer
            return


def _start_worker(context, job_bytes: bytes, stopping) -> _Worker:
    """A new worker process, started with SIGINT ignored (inherited through spawn's exec) when
    this is the main thread; the parent's own handler is back as soon as it is launched."""
    parent, child = context.Pipe()
    process = context.Process(target=_serve, args=(child, job_bytes, stopping), daemon=True)
    previous = signal.getsignal(signal.SIGINT)  # None: set outside Python, cannot be put back
    main = threading.current_thread() is threading.main_thread() and previous is not None
    if main:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        process.start()
    finally:
        if main:
            signal.signal(signal.SIGINT, previous)
    child.close()
    return _Worker(process, parent)


@dataclass
class _Worker:
    process: object
    conn: object
    current: int | None = None


class ProcessExecutor:
    """``workers`` local processes (``spawn``) that survive a dead worker.

    A worker that dies while running a file is replaced and the file is given to a worker
    again ``retries`` times (default once); then the file fails with ``worker died
    (<signal>)`` and the other files go on. On an interrupt (Ctrl-C) the workers are
    interrupted too, so their atomic writes remove their temp files.
    """

    def __init__(self, workers: int, *, retries: int = 1):
        if workers < 1:
            raise ValueError(f"[ProcessExecutor] workers must be at least 1, got {workers}")
        if retries < 0:
            raise ValueError(f"[ProcessExecutor] retries must be at least 0, got {retries}")
        self.workers, self.retries = workers, retries

    def execute(
        self, job: Job, tasks: Sequence[Task], on_start: OnStart | None = None
    ) -> Iterator[tuple[int, FileResult]]:
        """Run ``tasks`` on the pool; yields ``(k, FileResult)`` as each completes."""
        if not tasks:
            return
        import multiprocessing

        context = multiprocessing.get_context("spawn")  # no fork of a process that runs MLX threads
        job_bytes = pickle.dumps(job)  # a job that cannot be pickled fails here, not in a worker
        stopping = context.Event()
        pool: list[_Worker] = []
        clean = False
        with worker_threads(self.workers):
            try:
                yield from self._run(context, job_bytes, stopping, tasks, pool, on_start)
                clean = True
            finally:
                _shut_down(pool, clean, stopping)

    def _run(self, context, job_bytes, stopping, tasks, pool, on_start) -> Iterator[tuple[int, FileResult]]:
        from multiprocessing.connection import wait

        queue, tries, left = deque(range(len(tasks))), [0] * len(tasks), len(tasks)
        while left:
            while len(pool) < min(self.workers, left):
                pool.append(_start_worker(context, job_bytes, stopping))
            for w in pool:
                if w.current is None and queue:
                    w.current = queue.popleft()
                    tries[w.current] += 1
                    try:
                        w.conn.send((w.current, tasks[w.current]))
                    except OSError:  # it died before taking the file: reaped below, not a try
                        tries[w.current] -= 1
                        queue.appendleft(w.current)
                        w.current = None
                        continue
                    if on_start is not None:
                        on_start(w.current)
            ready = set(
                wait([w.conn for w in pool if w.current is not None] + [w.process.sentinel for w in pool])
            )
            for w in list(pool):
                if w.conn in ready and w.current is not None:
                    try:
                        k, result = w.conn.recv()
                    except (EOFError, OSError):
                        pass  # it died mid-answer: the sentinel says so below
                    else:
                        w.current, left = None, left - 1
                        yield k, result
                if w.process.sentinel not in ready and w.process.is_alive():
                    continue
                w.process.join()
                w.conn.close()
                pool.remove(w)
                k = w.current
                if k is None:
                    continue
                if tries[k] <= self.retries:
                    queue.appendleft(k)
                    continue
                left -= 1
                why = f"worker died ({death_reason(w.process.exitcode)})"
                tried = "once" if tries[k] == 1 else f"{tries[k]} times"
                yield (
                    k,
                    FileResult(
                        tasks[k].src, tasks[k].dst, "failed", error=f"{tasks[k].src}: {why}; tried {tried}"
                    ),
                )


def _shut_down(pool: list[_Worker], clean: bool, stopping) -> None:
    """Stop the workers: a None each after a clean run; ``stopping`` then SIGINT (they unwind,
    removing their temp files; one still starting up stops before its first task) after an
    interrupt or an error; SIGKILL for any still there after 10 s."""
    if not clean:
        stopping.set()
    for w in pool:
        try:
            if clean:
                w.conn.send(None)
            elif w.process.is_alive():
                os.kill(w.process.pid, signal.SIGINT)
        except OSError:
            pass
    for w in pool:
        w.process.join(10)
        if w.process.is_alive():
            w.process.kill()
            w.process.join()
        w.conn.close()
    pool.clear()


def executor_for(scheduler: str | None = None, workers: int | None = None) -> Executor:
    """The executor of the CLI's ``--scheduler`` / ``--workers``: ``local:N`` (a Dask
    ``LocalCluster`` of N processes), ``tcp://HOST:PORT`` (a running Dask scheduler; any
    ``SCHEME://``), ``workers`` > 1 local processes, else in-process. ``BatchUsageError`` for
    both at once or a scheduler that is neither; ``BatchError`` when Dask is not installed."""
    if scheduler is not None and workers is not None:
        raise BatchUsageError("--scheduler and --workers cannot be used together (Dask chooses its workers)")
    if scheduler is None:
        return ProcessExecutor(workers) if workers is not None and workers > 1 else InProcessExecutor()
    from lattice.pipeline.dask_executor import DaskExecutor

    text = scheduler.strip()
    if text == "local" or text.startswith("local:"):
        count = text.partition(":")[2] or str(os.cpu_count() or 1)
        if not count.isdigit() or int(count) < 1:
            raise BatchUsageError(
                f"--scheduler local:N needs a positive number of workers, got {scheduler!r}"
            )
        return DaskExecutor(local_workers=int(count))
    if "://" in text:
        return DaskExecutor(address=text)
    raise BatchUsageError(
        f"--scheduler must be local:N or a scheduler address such as tcp://HOST:8786, got {scheduler!r}"
    )


__all__ = [
    "Executor",
    "InProcessExecutor",
    "ProcessExecutor",
    "death_reason",
    "executor_for",
]
