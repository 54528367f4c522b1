"""``DaskExecutor``: the files of a batch as tasks on a Dask cluster (the ``lattice[dask]`` extra).

Each file is one task (``client.submit(run_one, job, task, pure=False, key=...)``), and
results stream back as they complete (``as_completed``). A worker lost mid-task makes the
scheduler run the task again elsewhere (up to ``distributed.scheduler.allowed-failures``
times, default 3). A task that still ends in ``KilledWorker`` (the scheduler also counts
deaths against tasks merely queued on the dying worker) is submitted once more under a new
key once the others have finished, alone, so that no other file's crash counts against it;
if that dies too, the file fails with ``KilledWorker``. Outputs are written atomically, so
a re-run never leaves a partial or a second file. Workers get absolute paths (a worker on
another machine must see the same file system at the same paths) or URLs, which every
worker reads and writes itself (``s3://``: give the workers the AWS environment).
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

from lattice.pipeline.batch import BatchError, FileResult, Job, Task, error_text, run_one

EXTRA = "pip install 'lattice[dask]'"
# A KilledWorker task is submitted this many times more, alone, once the rest are done: the
# scheduler counts a death against every task assigned to the worker, queued ones too, so a
# file can be a bystander of another file that kills its workers.
RESUBMIT = 1


def _distributed():
    try:
        import distributed
    except ImportError as err:
        raise BatchError(f"--scheduler needs Dask's distributed scheduler: {EXTRA} ({err})") from err
    return distributed


def _absolute(task: Task) -> Task:
    from lattice.io import storage

    def where(item: str) -> str:
        return item if storage.is_url(item) else os.path.abspath(storage.local_path(item))

    return replace(task, src=where(task.src), dst=None if task.dst is None else where(task.dst))


def _local_names(result: FileResult, task: Task, sent: Task) -> FileResult:
    """The result under the names the caller gave (the worker saw absolute paths)."""
    error = result.error
    if error is not None and error.startswith(sent.src):
        error = task.src + error[len(sent.src) :]
    return replace(result, input=task.src, output=task.dst, error=error)


class DaskExecutor:
    """Run a batch on Dask: a ``client`` of your own (a notebook's ``Client``; left open), a
    scheduler ``address`` (``tcp://HOST:8786``; a client for the run), or ``local_workers``
    (a ``LocalCluster`` of that many single-threaded worker processes for the run, each with
    ``cpu_count // local_workers`` MLX / BLAS threads)."""

    def __init__(self, client=None, address: str | None = None, *, local_workers: int | None = None):
        if sum(x is not None for x in (client, address, local_workers)) > 1:
            raise ValueError("[DaskExecutor] give one of client, address or local_workers")
        if local_workers is not None and local_workers < 1:
            raise ValueError(f"[DaskExecutor] local_workers must be at least 1, got {local_workers}")
        if client is None:
            _distributed()  # a missing extra is an error now, before any planning
        self.client, self.address, self.local_workers = client, address, local_workers

    @contextmanager
    def _connect(self):
        distributed = _distributed()
        if self.client is not None:
            yield self.client
            return
        if self.address is None:
            from lattice.settings import worker_threads

            n = self.local_workers or os.cpu_count() or 1
            with (
                worker_threads(n),
                distributed.LocalCluster(  # quiet: a file's errors come back with its result
                    n_workers=n,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.CRITICAL,
                ) as cluster,
                distributed.Client(cluster) as client,
            ):
                yield client
            return
        try:
            client = distributed.Client(self.address, timeout="10s")
        except (OSError, TimeoutError) as err:
            raise BatchError(f"cannot connect to the Dask scheduler at {self.address}: {err}") from err
        with client:
            yield client

    def execute(self, job: Job, tasks: Sequence[Task], on_start=None) -> Iterator[tuple[int, FileResult]]:  # noqa: ARG002 (Dask does not say when a task starts)
        """Submit every task, yield ``(k, FileResult)`` as the futures complete, then retry the
        ``KilledWorker`` ones one at a time."""
        if not tasks:
            return
        distributed = _distributed()
        with self._connect() as client:
            run = f"lattice-batch-{uuid.uuid4().hex[:12]}"
            sent = [_absolute(t) for t in tasks]
            futures = {
                client.submit(run_one, job, s, key=f"{run}-{k}", pure=False): k for k, s in enumerate(sent)
            }
            killed: list[int] = []
            finished = False
            try:
                for future in distributed.as_completed(futures):
                    k = futures.pop(future)
                    result = self._result(future, tasks[k], sent[k])
                    if result is None:
                        killed.append(k)  # perhaps only a bystander of another file's crash
                    else:
                        yield k, result
                for k in sorted(killed):  # alone: no other file can take its worker down now
                    for again in range(1, RESUBMIT + 1):
                        future = client.submit(
                            run_one, job, sent[k], key=f"{run}-{k}-again{again}", pure=False
                        )
                        futures[future] = k
                        distributed.wait(future)
                        del futures[future]
                        result = self._result(future, tasks[k], sent[k])
                        if result is not None:
                            break
                    yield k, result or _killed(tasks[k])
                finished = True
            finally:
                if not finished:
                    client.cancel(list(futures))

    @staticmethod
    def _result(future, task: Task, sent: Task) -> FileResult | None:
        """The task's result, its failure, or None when it ended in ``KilledWorker``. The
        future is released: a finished task the client still holds is run again when the
        worker keeping its result dies, rewriting its file behind the batch's back."""
        try:
            return _local_names(future.result(), task, sent)
        except Exception as err:  # KilledWorker: the task's workers all died
            if type(err).__name__ == "KilledWorker":
                return None
            return FileResult(task.src, task.dst, "failed", error=f"{task.src}: {error_text(err)}")
        finally:
            future.release()


def _killed(task: Task) -> FileResult:
    return FileResult(task.src, task.dst, "failed", error=f"{task.src}: worker died too often (KilledWorker)")


__all__ = ["EXTRA", "RESUBMIT", "DaskExecutor"]
