"""The library batch engine (lattice.pipeline.batch) on its executors: typed results and the
--json shape, planning errors, the parameter-aware skip, ProcessExecutor surviving workers that
die (SIGKILL, SIGSEGV, os._exit), Ctrl-C mid-batch and its re-run, stale temp files."""

from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_jobs import digest_job, expected_bytes, temps, wait_for, worker_pids
from cli_helpers import LATTICE, data_file, lattice

from lattice.pipeline import (
    BatchError,
    BatchUsageError,
    Expect,
    FileResult,
    InProcessExecutor,
    ProcessExecutor,
    executor_for,
    plan_tasks,
    run_batch,
)

EXPECT = Expect("digest", {"label": "x"})


@pytest.fixture
def inputs(tmp_path):
    """Six small input files (one in a sub-folder), one that the job refuses, one hidden."""
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    for i, name in enumerate(["a.dat", "b.dat", "c.dat", "d.dat", "e.dat", "sub/f.dat"]):
        (d / name).write_bytes(bytes(range(i, 256)) * (i + 1))
    (d / "bad.dat").write_bytes(b"x")
    (d / ".hidden.dat").write_bytes(b"")
    return d


def _outputs_correct(src_dir, out_dir, names=("a", "b", "c", "d", "e", "sub/f")):
    for n in names:
        assert (out_dir / f"{n}.npz").read_bytes() == expected_bytes(src_dir / f"{n}.dat"), n
    assert temps(out_dir) == []


def test_typed_results_and_json_shape(tmp_path, inputs):
    out = tmp_path / "out"
    job = functools.partial(digest_job, sidecar=True)
    s = run_batch(job, [inputs], out, expect=EXPECT)
    assert (s.done, s.skipped, s.redone, s.failed) == (6, 0, 0, 1)
    assert [f.input for f in s.files] == sorted(str(p) for p in inputs.rglob("*.dat") if p.name[0] != ".")
    bad = next(f for f in s.files if f.status == "failed")
    assert isinstance(bad, FileResult) and bad.error == f"{inputs / 'bad.dat'}: not a good input"
    done = s.files[0]
    assert done.output == str(out / "a.npz") and done.summary["bytes"] > 0 and done.seconds >= 0
    d = s.to_dict()
    assert list(d) == ["done", "skipped", "redone", "failed", "files"] and d["done"] == 6
    assert set(d["files"][0]) == {"input", "output", "status", "summary", "seconds"}
    assert set(next(f for f in d["files"] if f["status"] == "failed")) == {
        "input",
        "output",
        "status",
        "error",
        "seconds",
    }
    json.dumps(d)
    _outputs_correct(inputs, out)
    again = run_batch(job, [inputs], out, expect=EXPECT)  # same parameters: skipped, on any executor
    assert (again.skipped, again.failed) == (6, 1)
    assert again.files[0].reason == "made with the same parameters from the same input"
    other = run_batch(
        functools.partial(digest_job, sidecar=True, label="y"),
        [inputs],
        out,
        expect=Expect("digest", {"label": "y"}),
    )
    assert other.redone == 6 and other.files[0].reason == "the existing output was made with other parameters"


def test_planning_errors_are_library_exceptions(tmp_path, inputs):
    with pytest.raises(BatchUsageError, match="stdin"):
        plan_tasks(["-"], tmp_path / "o")
    (inputs / "a.pcd").write_bytes(b"")
    with pytest.raises(BatchUsageError, match="would both write"):
        plan_tasks([inputs / "a.dat", inputs / "a.pcd"], tmp_path / "o")
    with pytest.raises(BatchUsageError, match="would replace its input"):
        plan_tasks([inputs / "a.dat"], inputs, extension=".dat")
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(BatchError, match="cannot write to output directory"):
        run_batch(digest_job, [inputs / "a.dat"], blocker / "out")
    with pytest.raises(BatchUsageError, match="--scheduler and --workers"):
        executor_for("local:2", 2)
    with pytest.raises(BatchUsageError, match="local:N or a scheduler address"):
        executor_for("somewhere", None)
    assert isinstance(executor_for(None, None), InProcessExecutor)
    assert isinstance(executor_for(None, 2), ProcessExecutor)


def test_stale_temps_of_killed_runs_are_removed(tmp_path, inputs):
    out = tmp_path / "out"
    job = functools.partial(digest_job, sidecar=True)
    run_batch(job, [inputs], out, expect=EXPECT)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    stale = out / "sub" / f".f.npz.lattice-{int(dead.stdout)}-abc123.tmp"
    stale.write_bytes(b"partial")
    os.utime(stale, (time.time() - 60, time.time() - 60))
    mine = out / f".a.npz.lattice-{os.getpid()}-live.tmp"  # a live writer's: kept
    mine.write_bytes(b"")
    s = run_batch(job, [inputs], out, expect=EXPECT)  # everything skipped: no write cleans it
    assert s.skipped == 6 and not stale.exists() and mine.exists()


@pytest.mark.parametrize(
    ("how", "reason"), [("sigkill", "SIGKILL"), ("segv", "SIGSEGV"), ("exit", "exit code 3")]
)
def test_process_executor_retries_a_dead_worker_once(tmp_path, inputs, how, reason):
    out = tmp_path / "out"
    once = functools.partial(digest_job, kill="c.dat", marker=str(tmp_path / "died"), how=how)
    s = run_batch(once, [inputs / f"{n}.dat" for n in "abcde"], out, executor=ProcessExecutor(2))
    assert (s.done, s.failed) == (5, 0), s.to_dict()  # the exit code would be 0
    assert (tmp_path / "died").exists()  # it did die, once
    _outputs_correct(inputs, out, names="abcde")
    always = functools.partial(digest_job, kill="c.dat", how=how)
    s = run_batch(
        always, [inputs / f"{n}.dat" for n in "abcde"], tmp_path / "o2", executor=ProcessExecutor(2)
    )
    assert (s.done, s.failed) == (4, 1)
    assert s.files[2].error == f"{inputs / 'c.dat'}: worker died ({reason}); tried 2 times"
    assert not (tmp_path / "o2" / "c.npz").exists() and temps(tmp_path / "o2") == []
    _outputs_correct(inputs, tmp_path / "o2", names="abde")


def test_process_executor_failures_and_events(tmp_path, inputs):
    events = []
    s = run_batch(
        digest_job, [inputs], tmp_path / "out", executor=ProcessExecutor(3), on_progress=events.append
    )
    assert (s.done, s.failed) == (6, 1)
    assert len({f.summary["pid"] for f in s.files if f.summary}) > 1  # the files were spread
    started = [e.index for e in events if type(e).__name__ == "FileStarted"]
    finished = [e.index for e in events if type(e).__name__ == "FileFinished"]
    assert sorted(started) == sorted(finished) == list(range(7)) and all(e.total == 7 for e in events)


def _kitti_dir(tmp_path, n: int):
    scan = data_file("semantickitti/sqsv3_seq00_000000.bin")
    d = tmp_path / "scans"
    d.mkdir()
    for i in range(n):
        shutil.copy(scan, d / f"scan{i:02d}.bin")
    return d


def test_cli_worker_killed_mid_batch_finishes_every_file(tmp_path):
    """Issue 18: killing one of two --workers 2 processes mid-batch failed the files still queued."""
    scans, out = _kitti_dir(tmp_path, 8), tmp_path / "vox"
    cli = subprocess.Popen([*LATTICE, "voxelize", scans, "-d", out, "-s", "0.05", "--workers", "2", "--json"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert wait_for(lambda: len(worker_pids(cli.pid)) == 2 and any(out.glob("*.npz")), timeout=120)
    os.kill(worker_pids(cli.pid)[0], signal.SIGKILL)
    assert len(list(out.glob("*.npz"))) < 8  # mid-batch
    stdout, stderr = cli.communicate(timeout=300)
    assert cli.returncode == 0, stderr
    s = json.loads(stdout)
    assert (s["done"], s["failed"]) == (8, 0)
    ref = lattice("voxelize", scans / "scan00.bin", "-o", tmp_path / "ref.npz", "-s", "0.05")
    assert ref.returncode == 0
    import numpy as np

    want = np.load(tmp_path / "ref.npz")
    for i in range(8):
        got = np.load(out / f"scan{i:02d}.npz")
        np.testing.assert_array_equal(got["coords"], want["coords"])
        np.testing.assert_array_equal(got["feats"], want["feats"])
    assert temps(out) == []


@pytest.mark.parametrize("workers", [None, 2])
def test_interrupted_batch_reruns_only_what_is_left(tmp_path, workers):
    n = 10
    scans, out = _kitti_dir(tmp_path, n), tmp_path / "vox"
    more = [] if workers is None else ["--workers", str(workers)]
    args = [*LATTICE, "voxelize", scans, "-d", out, "-s", "0.02", *more]
    # the child takes SIGINT as a terminal's Ctrl-C would, whatever this process inherited (a
    # runner started in the background of a non-interactive shell ignores SIGINT, and an
    # ignored signal stays ignored across exec)
    cli = subprocess.Popen(
        args,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert wait_for(lambda: any(out.glob("*.npz")), timeout=120)
    cli.send_signal(signal.SIGINT)
    _, stderr = cli.communicate(timeout=120)
    assert cli.returncode == 130, stderr
    assert "Traceback" not in stderr
    made = sorted(p.name for p in out.glob("*.npz"))
    assert 1 <= len(made) < n and temps(out) == []
    r = lattice("voxelize", scans, "-d", out, "-s", "0.02", *more, "--json")
    s = json.loads(r.stdout)
    assert r.returncode == 0 and (s["skipped"], s["done"], s["redone"]) == (len(made), n - len(made), 0)


# A worker as ``_start_worker`` starts one (SIGINT ignored), running ``_serve``; then SIGINTs
# at the moments the parent's may land: after the loop ended, or two while it waits for a task.
_WORKER = """
import os, pickle, signal, sys, threading, time
from multiprocessing import Pipe
from lattice.pipeline.executors import _serve
stopping = threading.Event()
parent, child = Pipe()
if sys.argv[1] == "after":
    stopping.set()
    _serve(child, pickle.dumps(None), stopping)
    os.kill(os.getpid(), signal.SIGINT)
else:
    def twice():
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
    threading.Thread(target=twice).start()
    _serve(child, pickle.dumps(None), stopping)
    os.kill(os.getpid(), signal.SIGINT)
time.sleep(0.2)
print("exited cleanly", signal.getsignal(signal.SIGINT) is signal.SIG_IGN)
"""


@pytest.mark.parametrize("when", ["after", "waiting"])
def test_worker_sigint_never_prints_a_traceback(when):
    """Stop 42's CI: the parent's SIGINT reached a worker that had already left its loop (it saw
    ``stopping``), and multiprocessing's exit printed a KeyboardInterrupt traceback."""
    r = subprocess.run([sys.executable, "-c", _WORKER, when], capture_output=True, text=True, timeout=60,
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))  # fmt: skip
    assert (r.returncode, r.stdout, r.stderr) == (0, "exited cleanly True\n", "")


def test_scheduler_usage_and_missing_extra(tmp_path, inputs, monkeypatch):
    from typer.testing import CliRunner

    from lattice_cli.main import app

    runner = CliRunner()
    scans = tmp_path / "pts"
    scans.mkdir()
    r = runner.invoke(app, ["voxelize", str(scans), "-d", str(tmp_path / "o"), "-s", "1", "--workers", "2",
                            "--scheduler", "local:2"])  # fmt: skip
    assert r.exit_code == 2 and "--scheduler and --workers cannot be used together" in r.stderr
    monkeypatch.setitem(sys.modules, "distributed", None)  # as if dask were not installed
    r = runner.invoke(app, ["pool", str(scans), "-d", str(tmp_path / "o"), "--scheduler", "local:2"])
    assert r.exit_code == 1 and "pip install 'lattice[dask]'" in r.stderr
    assert not (tmp_path / "o").exists()


def test_bundle_loaded_once_per_process_until_it_changes(tmp_path):
    from lattice.pipeline.model_run import cached_bundle

    src = Path(__file__).resolve().parents[1] / "examples" / "models" / "minkunet14-semantickitti"
    bundle = tmp_path / "bundle"
    shutil.copytree(src, bundle)
    first = cached_bundle(str(bundle))
    assert cached_bundle(str(bundle)) is first
    os.utime(bundle / "model.json", ns=(time.time_ns(), time.time_ns() + 10**9))
    assert cached_bundle(str(bundle)) is not first
