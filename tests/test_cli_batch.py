"""Batch mode: several inputs, directories and globs -> --output-dir; skip-existing, --overwrite,
--workers, per-file failures, the done / skipped / failed summary."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import data_file, lattice
from typer.testing import CliRunner

from lattice.data import synthetic_room
from lattice.io import PointCloud, read_sparse, write_points
from lattice.pipeline import Task, VoxelizeOptions, run_batch, voxelize_file
from lattice_cli.main import app

runner = CliRunner()


@pytest.fixture
def scans(tmp_path):
    """A folder with 3 good scans in 3 formats (one in a sub-folder), 2 bad files and a non-cloud file."""
    d = tmp_path / "scans"
    (d / "sub").mkdir(parents=True)
    for i, name in enumerate(["a.ply", "b.pcd", "sub/c.bin"]):
        cloud = synthetic_room(1500, seed=i)
        if name.endswith(".bin"):
            cloud = PointCloud(cloud.points, {"intensity": cloud.attributes["intensity"]})
        write_points(d / name, cloud)
    (d / "bad.ply").write_bytes(b"ply\nformat ascii 1.0\nelement vertex 9\nproperty float x\nend_header\n1\n")
    (d / "empty.npz").write_bytes(b"")
    (d / "notes.md").write_text("not a point cloud")  # .txt is a point-cloud extension (text tables)
    (d / ".hidden.ply").write_bytes(b"")
    return d


def run(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_directory_batch_mixed_good_and_bad(tmp_path, scans):
    out = tmp_path / "out"
    r = run("voxelize", scans, "--output-dir", out, "-s", "0.2", "--json")
    assert r.exit_code == 1, r.output  # some failed
    s = json.loads(r.stdout)
    assert (s["done"], s["skipped"], s["redone"], s["failed"]) == (3, 1, 0, 2)
    by_input = {f["input"]: f for f in s["files"]}
    # a file of the directory the command cannot read is reported, with the reason
    assert by_input[str(scans / "notes.md")]["status"] == "skipped"
    assert "not a point-cloud extension" in by_input[str(scans / "notes.md")]["reason"]
    assert f"skipped {scans / 'notes.md'}: not a point-cloud extension" in r.stderr
    assert by_input[str(scans / "bad.ply")]["status"] == "failed"
    assert "no x/y/z" in by_input[str(scans / "bad.ply")]["error"]
    assert "file is empty" in by_input[str(scans / "empty.npz")]["error"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == [
        "a.npz",
        "b.npz",
        "sub/c.npz",
    ]  # sub-folders mirrored; nothing for the failures, no temporary files
    assert read_sparse(out / "sub" / "c.npz").feature_names == ("intensity",)
    assert r.stderr.count("lattice: error: ") == 2


def test_text_summary_and_skip_existing_then_overwrite(tmp_path, scans):
    out = tmp_path / "out"
    good = [scans / "a.ply", scans / "b.pcd"]
    r = run("voxelize", *good, "-d", out, "-s", "0.2")
    assert r.exit_code == 0 and "done 2, skipped 0, redone 0, failed 0" in r.stdout
    before = (out / "a.npz").stat().st_mtime_ns
    r = run("voxelize", *good, "-d", out, "-s", "0.2", "--json")  # same parameters: skipped
    s = json.loads(r.stdout)
    assert r.exit_code == 0 and (s["done"], s["skipped"], s["redone"]) == (0, 2, 0)
    assert s["files"][0]["reason"] == "made with the same parameters from the same input"
    assert (out / "a.npz").stat().st_mtime_ns == before
    r = run("voxelize", *good, "-d", out, "-s", "0.5", "--json")  # other parameters: redone
    s = json.loads(r.stdout)
    assert r.exit_code == 0 and (s["done"], s["skipped"], s["redone"]) == (0, 0, 2)
    assert s["files"][0]["reason"] == "the existing output was made with other parameters"
    np.testing.assert_allclose(read_sparse(out / "a.npz").voxel_size, 0.5)
    r = run("voxelize", *good, "-d", out, "-s", "0.5", "--overwrite", "--json")
    assert json.loads(r.stdout)["redone"] == 2


def test_glob_and_missing_inputs(tmp_path, scans):
    out = tmp_path / "out"
    r = run(
        "voxelize", f"{scans}/*.p*", scans / "missing.ply", f"{scans}/*.las", "-d", out, "-s", "0.3", "--json"
    )
    s = json.loads(r.stdout)
    assert r.exit_code == 1
    status = {f["input"]: f["status"] for f in s["files"]}
    assert status[str(scans / "a.ply")] == status[str(scans / "b.pcd")] == "done"
    assert status[str(scans / "missing.ply")] == "failed" and status[f"{scans}/*.las"] == "failed"
    errors = " ".join(f.get("error", "") for f in s["files"])
    assert "no such file" in errors and "no files match this pattern" in errors


def test_workers_2_gives_the_same_files(tmp_path, scans):
    r1 = run("voxelize", scans, "-d", tmp_path / "one", "-s", "0.2", "--json")
    r2 = run("voxelize", scans, "-d", tmp_path / "two", "-s", "0.2", "--workers", "2", "--json")
    s1, s2 = json.loads(r1.stdout), json.loads(r2.stdout)
    assert r2.exit_code == 1 and (s2["done"], s2["failed"]) == (3, 2)
    assert [f["status"] for f in s1["files"]] == [f["status"] for f in s2["files"]]  # input order kept
    for name in ("a.npz", "b.npz", "sub/c.npz"):
        a, b = read_sparse(tmp_path / "one" / name), read_sparse(tmp_path / "two" / name)
        np.testing.assert_array_equal(a.coords, b.coords)
        np.testing.assert_array_equal(a.feats, b.feats)


def test_pool_and_upsample_batches(tmp_path, scans):
    vox = tmp_path / "vox"
    run("voxelize", scans / "a.ply", scans / "b.pcd", "-d", vox, "-s", "0.1")
    r = run("pool", vox, "-d", tmp_path / "pooled", "--mode", "avg", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["done"] == 2
    r = run("upsample", f"{tmp_path}/pooled/*.npz", "-d", tmp_path / "up", "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["done"] == 2
    assert read_sparse(tmp_path / "up" / "a.npz").stride.tolist() == [1, 1, 1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["pool", "{vox}", "-d", "{vox}"], "would replace its input"),
        (["voxelize", "{scans}/a.ply", "{scans}/a.pcd", "-d", "{tmp}/o", "-s", "1"], "would both write"),
        (
            ["voxelize", "{scans}", "-o", "x.npz", "-d", "{tmp}/o", "-s", "1"],
            "-o/--output takes a single input",
        ),
        (["voxelize", "-", "{scans}/a.ply", "-d", "{tmp}/o", "-s", "1"], "cannot be used in batch mode"),
        (["voxelize", "{scans}", "-s", "1"], "need --output-dir"),
    ],
)
def test_batch_usage_errors(tmp_path, scans, args, message):
    vox = tmp_path / "vox"
    vox.mkdir()
    (vox / "v.npz").write_bytes(b"x")
    write_points(scans / "a.pcd", synthetic_room(200))
    args = [a.format(vox=vox, scans=scans, tmp=tmp_path) for a in args]
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    assert message in r.stderr
    assert not (tmp_path / "o").exists()


def test_run_batch_with_progress_events(tmp_path, scans):
    job = functools.partial(voxelize_file, options=VoxelizeOptions(0.5))
    tasks = [
        Task(str(scans / "a.ply"), str(tmp_path / "a.npz")),
        Task(str(scans / "bad.ply"), str(tmp_path / "b.npz")),
    ]
    events = []
    s = run_batch(job, tasks, on_progress=events.append)
    assert (s.done, s.failed) == (1, 1) and (tmp_path / "a.npz").exists()
    assert s.files[0].summary["voxels"] > 0
    assert [type(e).__name__ for e in events] == ["FileStarted", "FileFinished"] * 2


def test_no_progress_bar_in_pipes(tmp_path, scans):
    r = run("voxelize", scans / "a.ply", scans / "b.pcd", "-d", tmp_path / "o", "-s", "0.3")
    assert r.stderr == "" and "━" not in r.output


def test_progress_bar_shows_the_current_file_and_prints_failures(capsys):
    from lattice.pipeline import FileFinished, FileResult, FileStarted, Task
    from lattice_cli.batch import _Bar

    with _Bar(True) as bar:
        bar(FileStarted(0, 2, Task("in/[a].ply", "out/[a].npz")))
        assert bar.progress.tasks[0].description == "\\[a].ply" and bar.progress.tasks[0].total == 2
        bar(FileFinished(0, 2, FileResult("in/[a].ply", "out/[a].npz", "failed", error="in/[a].ply: bad")))
        assert bar.progress.tasks[0].completed == 1
    assert "lattice: error: in/[a].ply: bad" in capsys.readouterr().err


def test_info_over_many_files_runs_through_the_batch_engine(tmp_path):
    """``lattice info DIR`` / a glob / several files: each description in input order, as
    ``lattice info FILE`` gives it; ``--workers 2`` the same; a bad file fails alone."""
    d = tmp_path / "in"
    d.mkdir()
    for rel in ("semantickitti/sqsv3_seq00_000000.bin", "stanford_bunny/bun_zipper_res4.ply",
                "semantickitti/demo_labels_000700.npy"):  # fmt: skip
        shutil.copy(data_file(rel), d)
    (d / "bad.ply").write_bytes(b"ply\nformat nonsense\n")
    r = lattice("info", d, "--json")
    assert r.returncode == 1, r.stderr  # bad.ply failed
    s = json.loads(r.stdout)
    assert (s["done"], s["skipped"], s["failed"]) == (2, 1, 1)
    by_name = {Path(f["input"]).name: f for f in s["files"]}
    assert by_name["bad.ply"]["error"].startswith(str(d / "bad.ply"))
    assert "per-point labels" in by_name["demo_labels_000700.npy"]["reason"]
    for name in ("sqsv3_seq00_000000.bin", "bun_zipper_res4.ply"):
        one = json.loads(lattice("info", d / name, "--json").stdout)
        assert {**by_name[name]["summary"], "file": str(d / name)} == one
    parallel = json.loads(lattice("info", d, "--json", "--workers", "2").stdout)
    assert [f.get("summary") for f in parallel["files"]] == [f.get("summary") for f in s["files"]]
    text = lattice("info", str(d / "*.ply"), d / "sqsv3_seq00_000000.bin")
    assert text.returncode == 1 and text.stdout.rstrip().endswith(
        "described 2, skipped 0, failed 1 (3 inputs)"
    )
    assert f"{d / 'bun_zipper_res4.ply'}: point cloud (ply)" in text.stdout
    assert text.stderr.startswith(f"lattice: error: {d / 'bad.ply'}: ")
    usage = lattice("info", d / "bun_zipper_res4.ply", "--workers", "2")
    assert usage.returncode == 2 and "apply to several inputs" in usage.stderr
