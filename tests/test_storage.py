"""URLs wherever a path goes (lattice.io.storage, issue 18): the readers over ``memory://`` and
``s3://`` give what they give for the local file; batches read and write ``s3://`` against a
local S3-compatible server (moto, on 127.0.0.1) started here, with a listing, a glob, a
failure mid-upload, a killed upload's temp key, and re-runs. Skipped without s3fs / moto."""

from __future__ import annotations

import functools
import io
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from batch_jobs import digest_job, expected_bytes
from cli_helpers import LATTICE, data_file, lattice

fsspec = pytest.importorskip("fsspec")

from lattice.io import read_points, storage, write_points  # noqa: E402
from lattice.io.atomic import host_tag, remove_stale_temps, stale, temp_prefix  # noqa: E402
from lattice.pipeline.batch import run_batch  # noqa: E402
from lattice.pipeline.executors import ProcessExecutor  # noqa: E402
from lattice.pipeline.provenance import read_record  # noqa: E402
from lattice.pipeline.sources import open_source  # noqa: E402

BUNDLE = Path(__file__).resolve().parents[1] / "examples" / "models" / "minkunet14-semantickitti"
SAMPLES = [
    "semantickitti/sqsv3_seq00_000000.bin",  # KITTI, streamed
    "nuscenes/n015-2018-07-24-11-22-45_LIDAR_TOP_1532402927647951.pcd.bin",
    "stanford_bunny/bun_zipper_res4.ply",  # ascii PLY
    "scanned_objects/dragon_50k_vcg.ply",  # binary PLY, streamed
    "aerial_lidar/simple.las",
    "aerial_lidar/ign_lidarhd/test_data_77050_627755_LA93_IGN69.laz",
    "indoor/table_scene_mug_stereo_textured.pcd",
    "semantickitti/demo_points_000700.npy",
]


def _same_cloud(a, b) -> None:
    np.testing.assert_array_equal(a.points, b.points)
    assert sorted(a.attributes) == sorted(b.attributes)
    for k in a.attributes:
        np.testing.assert_array_equal(a.attributes[k], b.attributes[k], err_msg=k)
    assert a.metadata.keys() == b.metadata.keys()


# ---- names -------------------------------------------------------------------------------


def test_names_of_paths_and_urls():
    assert storage.is_url("s3://b/k") and storage.is_url("memory://x") and not storage.is_url("file:///a")
    assert not storage.is_url("/a/b") and not storage.is_url("C:\\a") and storage.scheme("S3://b") == "s3"
    assert storage.local_path("file:///data/a%20b.ply") == "/data/a b.ply"
    assert storage.local_path("file://localhost/data/a.ply") == "/data/a.ply"
    assert storage.join("s3://b/out/", "sub", "a.npz") == "s3://b/out/sub/a.npz"
    assert storage.join("s3://b", ".", "a.npz") == "s3://b/a.npz"
    assert storage.dirname("s3://b/out/a.npz") == "s3://b/out" and storage.dirname("s3://b") == "s3://b"
    assert storage.basename("s3://b/out/a.npz") == "a.npz"
    assert storage.same_location("s3://b/a", "s3://b/a/") and not storage.same_location("s3://b/a", "/b/a")


def test_an_unknown_scheme_and_a_missing_package_name_what_to_do():
    with pytest.raises(storage.StorageError, match="unknown URL scheme nosuch://"):
        storage.exists("nosuch://x/y")
    r = lattice("info", "nosuch://x/y.ply")
    assert r.returncode == 1 and "unknown URL scheme nosuch://" in r.stderr and "Traceback" not in r.stderr


def test_temp_names_carry_the_host_and_only_this_hosts_dead_writers_are_judged_by_pid():
    mine = temp_prefix("a.npz") + "x1.tmp"
    assert mine.startswith(f".a.npz.lattice-{host_tag()}-{os.getpid()}-")
    assert not stale(mine, 0.0, None)  # this process: alive
    dead = f".a.npz.lattice-{host_tag()}-999999999-x.tmp"
    assert stale(dead, 0.0, None) and stale(dead, 10.0, 100.0) and not stale(dead, 200.0, 100.0)
    other = ".a.npz.lattice-otherhost-999999999-x.tmp"  # its pid means nothing here
    assert not stale(other, 0.0, None) and stale(other, 10.0, 100.0) and not stale(other, 200.0, 100.0)
    old_style = ".a.npz.lattice-999999999-x.tmp"  # written by lattice before host tags: this host's
    assert stale(old_style, 0.0, None) and not stale(old_style, 0.0, None, local=False)
    assert not stale("a.npz", 0.0, 100.0)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs Linux /proc")
def test_a_zombie_writers_temp_is_stale(tmp_path):
    """A SIGKILLed writer nobody has reaped yet (its parent died too; PID 1 in a container is often
    no init) still answers kill(pid, 0): its temp must count as dead all the same."""
    child = subprocess.Popen(["sleep", "0"])
    assert wait_for_zombie(child.pid)
    try:
        name = f".a.npz.lattice-{host_tag()}-{child.pid}-x.tmp"
        (tmp_path / name).write_bytes(b"")
        assert stale(name, 0.0, None)
        assert remove_stale_temps(tmp_path) == [str(tmp_path / name)]
    finally:
        child.wait()
    live = subprocess.Popen(["sleep", "30"])
    try:
        assert not stale(f".a.npz.lattice-{host_tag()}-{live.pid}-x.tmp", 0.0, None)
    finally:
        live.kill()
        live.wait()


def wait_for_zombie(pid: int, timeout: float = 10.0) -> bool:
    """Until ``pid`` (a child not yet waited for) has exited: its /proc state reads Z."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
        if stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] == b"Z":
            return True
        time.sleep(0.02)
    return False


def test_a_shared_directory_keeps_another_hosts_fresh_temps(tmp_path):
    fresh = tmp_path / ".a.npz.lattice-otherhost-1-x.tmp"
    old = tmp_path / ".b.npz.lattice-otherhost-1-y.tmp"
    fresh.write_bytes(b"")
    old.write_bytes(b"")
    os.utime(old, (time.time() - 3600, time.time() - 3600))
    assert remove_stale_temps(tmp_path) == []  # per-write clean-up: other hosts' are never judged
    assert remove_stale_temps(tmp_path, older_than=time.time() - 60) == [str(old)]
    assert fresh.exists() and not old.exists()


# ---- memory:// : every reader, in-process -------------------------------------------------


@pytest.fixture
def memory():
    fs = fsspec.filesystem("memory")
    root = f"memory://lattice-test-{os.getpid()}-{time.monotonic_ns()}"
    yield fs, root
    fs.rm(root.removeprefix("memory://"), recursive=True) if fs.exists(
        root.removeprefix("memory://")
    ) else None


@pytest.mark.parametrize("rel", SAMPLES, ids=[s.rsplit("/", 1)[-1][:28] for s in SAMPLES])
def test_every_reader_reads_a_url_as_it_reads_the_file(memory, rel):
    fs, root = memory
    local = data_file(rel)
    url = f"{root}/{local.name}"
    fs.pipe_file(url, local.read_bytes())
    _same_cloud(read_points(url), read_points(local))
    a, b = open_source(url), open_source(local)
    assert (a.num_points, a.attributes) == (b.num_points, b.attributes)
    assert a.streamed == (b.streamed and not rel.endswith(".npy"))  # a .npy URL is read whole
    for (pa, xa), (pb, xb) in zip(a.chunks(50_000), b.chunks(50_000), strict=True):
        np.testing.assert_array_equal(pa, pb)
        assert all(np.array_equal(xa[k], xb[k]) for k in xb)


def test_a_points_npz_and_a_text_table_stream_from_a_url(memory, tmp_path):
    fs, root = memory
    cloud = read_points(data_file("semantickitti/sqsv3_seq00_000001.bin"))
    for name in ("p.npz", "p.txt"):
        write_points(tmp_path / name, cloud)
        fs.pipe_file(f"{root}/{name}", (tmp_path / name).read_bytes())
        src = open_source(f"{root}/{name}")
        assert src.streamed and src.num_points == len(cloud.points)
        _same_cloud(read_points(f"{root}/{name}"), read_points(tmp_path / name))


def test_missing_empty_and_prefix_urls_are_one_line_errors(memory):
    fs, root = memory
    fs.pipe_file(f"{root}/empty.ply", b"")
    fs.pipe_file(f"{root}/dir/a.ply", b"ply\n")
    for url, why in [(f"{root}/none.ply", "no such file"), (f"{root}/empty.ply", "file is empty"),
                     (f"{root}/dir", "is a prefix, expected a file")]:  # fmt: skip
        with pytest.raises(ValueError, match=why) as e:
            read_points(url, format="ply")
        assert str(e.value).startswith(url)


def test_a_url_output_is_written_whole_or_not_at_all(memory):
    fs, root = memory
    cloud = read_points(data_file("stanford_bunny/bun_zipper_res4.ply"))
    write_points(f"{root}/out/a.ply", cloud)
    _same_cloud(read_points(f"{root}/out/a.ply"), cloud)

    class Boom(Exception):
        pass

    from lattice.io.atomic import atomic_write

    with pytest.raises(Boom), atomic_write(f"{root}/out/a.ply") as f:
        f.write(b"half")
        raise Boom
    _same_cloud(read_points(f"{root}/out/a.ply"), cloud)  # the old object stands
    assert [storage.basename(u) for u, _ in storage.listing(f"{root}/out")] == ["a.ply"]  # no temp key


# ---- s3:// against a local S3-compatible server -----------------------------------------


@pytest.fixture(scope="module")
def s3_env():
    """A moto S3 server on 127.0.0.1 and the AWS environment a user would set for it (also
    given to the ``lattice`` processes the tests start)."""
    pytest.importorskip("s3fs")
    server_mod = pytest.importorskip("moto.server")
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture
def bucket(s3_env):
    import s3fs

    fs = s3fs.S3FileSystem(use_listings_cache=False)
    name = f"lattice-{time.monotonic_ns()}"
    fs.mkdir(name)
    return fs, name


def _upload_scans(fs, bucket: str, tmp_path) -> object:
    """Three KITTI-size scans (one in a sub-folder) and the bunny, in s3://BUCKET/in/ and in tmp_path/in."""
    local = tmp_path / "in"
    (local / "sub").mkdir(parents=True)
    files = {
        "s0.bin": "semantickitti/sqsv3_seq00_000000.bin",
        "s1.bin": "semantickitti/sqsv3_seq00_000001.bin",
        "sub/s2.bin": "semantickitti/sqsv3_seq00_000002.bin",
        "sub/bunny.ply": "stanford_bunny/bun_zipper_res4.ply",
    }
    for rel, src in files.items():
        shutil.copy(data_file(src), local / rel)
        fs.put_file(str(local / rel), f"{bucket}/in/{rel}")
    fs.pipe_file(f"{bucket}/in/notes.md", b"# not a point cloud\n")  # skipped by the scan
    return local


def _same_arrays(fs, url: str, path) -> None:
    """An s3 output and a local output hold the same arrays (provenance names its input: not compared)."""
    a = np.load(io.BytesIO(fs.cat_file(url.removeprefix("s3://"))))
    b = np.load(path)
    assert sorted(a.files) == sorted(b.files), url
    for k in a.files:
        if k != "provenance":
            np.testing.assert_array_equal(a[k], b[k], err_msg=f"{url}: {k}")


def test_voxelize_s3_to_s3_gives_the_local_runs_files_and_reruns_skip(bucket, tmp_path):
    fs, b = bucket
    local_in = _upload_scans(fs, b, tmp_path)
    ref = lattice("voxelize", local_in, "-d", tmp_path / "ref", "-s", "0.05")
    assert ref.returncode == 0, ref.stderr
    r = lattice("voxelize", f"s3://{b}/in/", "-d", f"s3://{b}/out/", "-s", "0.05", "--json")
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["done"], s["skipped"], s["failed"]) == (4, 1, 0)  # notes.md: not a point cloud
    outputs = sorted(k.removeprefix(f"{b}/out/") for k in fs.find(f"{b}/out"))
    assert outputs == ["s0.npz", "s1.npz", "sub/bunny.npz", "sub/s2.npz"]  # no temp keys, no probe
    for rel in outputs:
        _same_arrays(fs, f"s3://{b}/out/{rel}", tmp_path / "ref" / rel)
    record = read_record(f"s3://{b}/out/s0.npz")
    assert record["command"] == "voxelize" and record["input"]["name"] == "s0.bin" and record["input"]["etag"]
    again = lattice("voxelize", f"s3://{b}/in/", "-d", f"s3://{b}/out/", "-s", "0.05")
    assert again.returncode == 0 and "done 0, skipped 5" in again.stdout, again.stdout
    other = lattice("voxelize", f"s3://{b}/in/", "-d", f"s3://{b}/out/", "-s", "0.1", "--json")
    assert json.loads(other.stdout)["redone"] == 4  # other parameters: redone, not skipped


def test_a_glob_a_single_file_and_info_on_s3(bucket, tmp_path):
    fs, b = bucket
    _upload_scans(fs, b, tmp_path)
    r = lattice("voxelize", f"s3://{b}/in/**/*.bin", "-d", f"s3://{b}/g", "-s", "0.1", "-F", "ply", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["done"] == 3
    assert sorted(fs.ls(f"{b}/g", detail=False)) == sorted(
        f"{b}/g/{n}" for n in ["s0.ply", "s0.ply.lattice.json", "s1.ply", "s1.ply.lattice.json",
                               "s2.ply", "s2.ply.lattice.json"]
    )  # fmt: skip
    one = lattice("voxelize", f"s3://{b}/in/sub/bunny.ply", "-o", f"s3://{b}/one.ply", "-s", "0.01")
    assert one.returncode == 0, one.stderr
    local = lattice(
        "voxelize", data_file("stanford_bunny/bun_zipper_res4.ply"), "-o", tmp_path / "one.ply", "-s", "0.01"
    )
    assert local.returncode == 0
    assert fs.cat_file(f"{b}/one.ply") == (tmp_path / "one.ply").read_bytes()
    info = lattice("info", f"s3://{b}/one.ply", "--json")
    assert info.returncode == 0 and json.loads(info.stdout)["points"] == 402
    piped = subprocess.run(
        [*LATTICE, "voxelize", f"s3://{b}/in/s0.bin", "-o", "-", "-s", "0.05"], capture_output=True
    )
    assert piped.returncode == 0 and piped.stdout.startswith(b"PK")


def test_missing_bucket_and_missing_keys_are_clear(bucket):
    fs, b = bucket
    r = lattice("voxelize", f"s3://{b}/none/", "-d", f"s3://{b}/out", "-s", "1")
    assert r.returncode == 1 and f"s3://{b}/none/: no such file" in r.stderr
    fs.pipe_file(f"{b}/in/a.bin", np.zeros((4, 4), np.float32).tobytes())
    r = lattice("voxelize", f"s3://{b}/in/", "-d", "s3://no-such-bucket-lattice/out", "-s", "1")
    assert (
        r.returncode == 1 and "cannot write to output directory s3://no-such-bucket-lattice/out" in r.stderr
    )
    assert "no such bucket" in r.stderr and "Traceback" not in r.stderr


def test_a_failure_mid_upload_fails_that_file_only_and_a_rerun_finishes(bucket, tmp_path, monkeypatch):
    fs, b = bucket
    for n in "abcd":
        fs.pipe_file(f"{b}/src/{n}.dat", n.encode() * 5000)
    out = f"s3://{b}/dst"
    mv = type(fs).mv

    def broken_commit(self, path1, path2, *args, **kwargs):
        if path2.endswith("/c.npz"):
            raise ConnectionResetError("connection reset by peer (injected)")
        return mv(self, path1, path2, *args, **kwargs)

    monkeypatch.setattr(type(fs), "mv", broken_commit)
    s = run_batch(functools.partial(digest_job, sidecar=True), [f"s3://{b}/src/"], out)
    assert (s.done, s.failed) == (3, 1)
    assert (
        s.files[2].error.startswith(f"s3://{b}/src/c.dat: ")
        and "cannot commit the upload" in s.files[2].error
    )
    assert sorted(fs.ls(f"{b}/dst", detail=False)) == sorted(
        f"{b}/dst/{n}"
        for n in ["a.npz", "a.npz.lattice.json", "b.npz", "b.npz.lattice.json", "d.npz", "d.npz.lattice.json"]
    )  # fmt: skip  (no c.npz, no temp key)
    monkeypatch.setattr(type(fs), "mv", mv)
    from lattice.pipeline.batch import Expect

    again = run_batch(
        functools.partial(digest_job, sidecar=True),
        [f"s3://{b}/src/"],
        out,
        expect=Expect("digest", {"label": "x"}),
    )
    assert (again.done, again.skipped, again.failed) == (1, 3, 0)
    for n in "abcd":
        assert fs.cat_file(f"{b}/dst/{n}.npz") == expected_bytes(f"s3://{b}/src/{n}.dat")


def test_a_killed_uploads_temp_key_goes_at_the_next_run_and_a_killed_worker_is_retried(bucket, tmp_path):
    fs, b = bucket
    src = tmp_path / "src"
    src.mkdir()
    for n in "abcd":
        (src / f"{n}.dat").write_bytes(n.encode() * 3000)
    left = f"{b}/dst/.a.npz.lattice-otherhost-4242-dead.tmp"  # what a machine killed mid-upload leaves
    fs.pipe_file(left, b"partial")
    time.sleep(1.1)  # S3 times are whole seconds: the run starts after the key was written
    once = functools.partial(digest_job, kill="b.dat", marker=str(tmp_path / "died"))
    s = run_batch(once, [src], f"s3://{b}/dst", executor=ProcessExecutor(2))
    assert (s.done, s.failed) == (4, 0) and (tmp_path / "died").exists()
    assert not fs.exists(left)
    for n in "abcd":
        assert fs.cat_file(f"{b}/dst/{n}.npz") == expected_bytes(src / f"{n}.dat")
    assert [k for k in fs.find(f"{b}/dst") if ".lattice-" in k] == []


def test_reading_a_provenance_record_costs_ranges_not_the_object(bucket, tmp_path, monkeypatch):
    fs, b = bucket
    big = np.random.default_rng(0).normal(size=(3_000_000, 3)).astype(np.float32)  # 36 MB
    np.savez(tmp_path / "big.npz", points=big, provenance=np.array(json.dumps({"command": "x"})))
    fs.put_file(str(tmp_path / "big.npz"), f"{b}/big.npz")
    import s3fs

    fetched = []
    fetch = s3fs.core.S3File._fetch_range
    monkeypatch.setattr(
        s3fs.core.S3File, "_fetch_range", lambda self, s, e: fetched.append(e - s) or fetch(self, s, e)
    )
    assert read_record(f"s3://{b}/big.npz") == {"command": "x"}
    assert 0 < sum(fetched) <= 3 * storage.BLOCK < (tmp_path / "big.npz").stat().st_size


def test_dask_workers_and_model_run_read_and_write_s3(bucket, tmp_path):
    pytest.importorskip("distributed")
    fs, b = bucket
    local_in = _upload_scans(fs, b, tmp_path)
    ref = lattice("voxelize", local_in, "-d", tmp_path / "ref", "-s", "0.05")
    assert ref.returncode == 0, ref.stderr
    r = lattice("voxelize", f"s3://{b}/in/", "-d", f"s3://{b}/dask/", "-s", "0.05", "--scheduler", "local:2")
    assert r.returncode == 0 and "done 4, skipped 1" in r.stdout, r.stdout + r.stderr
    for rel in ["s0.npz", "s1.npz", "sub/s2.npz", "sub/bunny.npz"]:
        _same_arrays(fs, f"s3://{b}/dask/{rel}", tmp_path / "ref" / rel)
    bundle = BUNDLE if BUNDLE.exists() else pytest.skip("no shipped model bundle")
    m = lattice("model-run", bundle, f"s3://{b}/in/*.bin", "-d", f"s3://{b}/labels", "--workers", "2")
    assert m.returncode == 0 and "done 2" in m.stdout, m.stdout + m.stderr
    local = lattice("model-run", bundle, local_in / "s0.bin", "-o", tmp_path / "s0.npz")
    assert local.returncode == 0, local.stderr
    _same_arrays(fs, f"s3://{b}/labels/s0.npz", tmp_path / "s0.npz")


def test_an_unreachable_store_is_one_line_per_input(tmp_path):
    pytest.importorskip("s3fs")
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "x",
           "AWS_SECRET_ACCESS_KEY": "x", "AWS_DEFAULT_REGION": "us-east-1", "AWS_MAX_ATTEMPTS": "1"}  # fmt: skip
    for args in (["info", "s3://bkt/in/"], ["voxelize", "s3://bkt/in/", "-d", str(tmp_path / "o"), "-s", "1"],
                 ["voxelize", "s3://bkt/a.bin", "-o", str(tmp_path / "a.npz"), "-s", "1"]):  # fmt: skip
        r = subprocess.run([*LATTICE, *args], capture_output=True, text=True, env=env, timeout=120)
        errors = [ln for ln in r.stderr.splitlines() if ln.startswith("lattice: error: ")]
        assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr[-3000:]
        assert len(errors) == 1 and "s3://bkt/" in errors[0] and "Could not connect" in errors[0], r.stderr
