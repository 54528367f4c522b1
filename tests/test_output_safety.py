"""Outputs never destroy (issue 22): an output that is its own input, special files, a full disk
or a closed pipe on stdout, SIGTERM and SIGKILL during a write, one-line usage errors — through
real ``lattice`` processes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import time

import numpy as np
import pytest
from cli_helpers import LATTICE, PYTHON, lattice

from lattice.io import read_sparse, write_points
from lattice.io._points import PointCloud
from lattice.io.atomic import atomic_write, remove_stale_temps


@pytest.fixture
def scan(tmp_path):
    rng = np.random.default_rng(0)
    cloud = PointCloud(
        rng.uniform(-20, 20, (20_000, 3)).astype(np.float32), {"intensity": rng.random(20_000, np.float32)}
    )
    path = tmp_path / "scan.bin"
    write_points(path, cloud)
    return path


def _one_error_line(r, code: int, text: str) -> None:
    assert r.returncode == code, (r.returncode, r.stderr)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("lattice: error: ") and text in lines[0], r.stderr


def test_output_equal_to_the_input_is_refused(tmp_path, scan):
    before = scan.read_bytes()
    _one_error_line(lattice("voxelize", scan, "-o", scan, "-s", "0.5"), 2, f"output {scan} is the input")
    assert scan.read_bytes() == before
    os.link(scan, tmp_path / "hard.bin")  # a hard link of the input is the input too
    _one_error_line(lattice("voxelize", scan, "-o", tmp_path / "hard.bin", "-s", "0.5"), 2, "is the input")
    (tmp_path / "soft.bin").symlink_to(scan)
    _one_error_line(lattice("convert", scan, tmp_path / "soft.bin"), 2, "is the input")
    assert scan.read_bytes() == before
    assert lattice("voxelize", scan, "-o", tmp_path / "v.npz", "-s", "0.5").returncode == 0
    v = (tmp_path / "v.npz").read_bytes()
    _one_error_line(lattice("pool", tmp_path / "v.npz", "-o", tmp_path / "v.npz"), 2, "is the input")
    _one_error_line(
        lattice("upsample", tmp_path / "v.npz", "-o", tmp_path / "v.npz", "-s", "1"), 2, "is the input"
    )
    assert (tmp_path / "v.npz").read_bytes() == v


def test_a_fifo_output_is_written_as_a_stream_not_replaced(tmp_path, scan):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with open(tmp_path / "got.npz", "wb") as sink:
        reader = subprocess.Popen(["cat", str(fifo)], stdout=sink)
        r = lattice("voxelize", scan, "-o", fifo, "-s", "0.5")
        reader.wait(timeout=120)
    assert r.returncode == 0, r.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)  # still the FIFO
    assert read_sparse(tmp_path / "got.npz").num_rows > 0
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no temp file


def test_dev_null_stays_a_device(scan):
    r = lattice("voxelize", scan, "-o", "/dev/null", "-s", "0.5")
    assert r.returncode == 0, r.stderr
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode) and "-> /dev/null" in r.stdout


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_a_full_disk_on_stdout_is_exit_1(scan):
    with open("/dev/full", "wb") as full:
        r = subprocess.run([*LATTICE, "voxelize", str(scan), "-o", "-", "-s", "0.5"], stdout=full,
                           stderr=subprocess.PIPE, text=True, timeout=120)  # fmt: skip
    _one_error_line(r, 1, "<stdout>: cannot write: No space left on device")


def test_a_closed_pipe_ends_quietly(scan):
    cmd = f"{' '.join(LATTICE)} voxelize {scan} -o - -s 0.1 | head -c 16 > /dev/null"
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr and "error" not in r.stderr, r.stderr


_WRITER = """
import signal, sys, time
from lattice_cli.main import _terminate
from lattice.io.atomic import atomic_write
signal.signal(signal.SIGTERM, _terminate)
with atomic_write(sys.argv[1]) as f:
    f.write(b"partial")
    f.flush()
    print("ready", flush=True)
    time.sleep(60)
"""


def _writer(path):
    p = subprocess.Popen([*PYTHON, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def test_sigterm_during_a_write_leaves_nothing(tmp_path):
    target = tmp_path / "out.npz"
    p = _writer(target)
    p.send_signal(signal.SIGTERM)
    assert p.wait(timeout=30) == 128 + signal.SIGTERM
    assert list(tmp_path.iterdir()) == []


def test_a_sigkilled_writers_temp_is_removed_by_the_next_run(tmp_path, scan):
    out = tmp_path / "out"
    out.mkdir()
    p = _writer(out / "v.npz")
    p.kill()
    p.wait(timeout=30)
    left = [f.name for f in out.iterdir()]
    assert len(left) == 1 and left[0].startswith(".v.npz.lattice-") and left[0].endswith(".tmp")
    r = lattice("voxelize", scan, "-o", out / "w.npz", "-s", "0.5")
    assert r.returncode == 0, r.stderr
    assert sorted(f.name for f in out.iterdir()) == ["w.npz"]  # the dead writer's temp is gone


def test_a_live_writers_temp_is_kept(tmp_path):
    p = _writer(tmp_path / "v.npz")
    try:
        assert remove_stale_temps(tmp_path) == []
        assert len(list(tmp_path.iterdir())) == 1
    finally:
        p.kill()
        p.wait(timeout=30)


def test_atomic_write_refuses_a_special_file(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="is not a regular file"), atomic_write(fifo) as f:
        f.write(b"x")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


@pytest.mark.parametrize(
    ("args", "text"),
    [
        (["voxelize"], "Missing argument 'inputs'"),
        (["voxelize", "x.bin", "-o", "y.npz"], "Missing option '--voxel-size'"),
        (["voxelize", "x.bin", "-o", "y.npz", "-s", "1", "--workers", "0"], "Invalid value for '--workers'"),
        (["voxelize", "x.bin", "-o", "y.npz", "-s", "1", "--bogus"], "No such option: --bogus"),
        (["no-such-command"], "No such command 'no-such-command'"),
    ],
)
def test_usage_errors_are_one_line(tmp_path, args, text):
    r = lattice(*args, cwd=tmp_path)
    _one_error_line(r, 2, text)
    assert "--help" in r.stderr and "╭" not in r.stderr


def _wait_for_sigterm_handler(pid: int, timeout: float = 60) -> None:
    """Wait until process ``pid`` catches SIGTERM (Linux ``SigCgt``): a signal sent before the
    CLI installs its handler would kill it the default way, which is not what is tested."""
    status = f"/proc/{pid}/status"
    if not os.path.exists(status):  # not Linux: give the interpreter time to start
        time.sleep(1.5)
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(status) as f:
            caught = next((int(line.split()[1], 16) for line in f if line.startswith("SigCgt:")), 0)
        if caught >> (signal.SIGTERM - 1) & 1:
            return
        time.sleep(0.02)
    raise AssertionError("the CLI never installed its SIGTERM handler")


def test_sigterm_of_a_real_run_exits_143_and_leaves_no_temp(tmp_path):
    big = tmp_path / "big.bin"
    rng = np.random.default_rng(1)
    rows = rng.uniform(-100, 100, (3_000_000, 4)).astype(np.float32)
    rows[:, 3] = rng.random(len(rows))  # intensity in [0, 1): a plausible KITTI scan
    rows.tofile(big)
    p = subprocess.Popen([*LATTICE, "voxelize", str(big), "-o", str(tmp_path / "v.ply"), "-s", "0.05"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for_sigterm_handler(p.pid)
    time.sleep(0.5)
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode in (0, 128 + signal.SIGTERM), err  # 0 only if it finished first
    assert "Traceback" not in err
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")]
