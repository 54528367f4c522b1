"""Mutation fuzzing of every reader and of the bundle loader (issue 22).

Seeds are small files in every format lattice reads, made at run time from ``../shared/data``
(or from the synthetic sample when it is absent; nothing is copied into the repository) and a
tiny model bundle. Each mutant (truncation, byte flips, numbers in headers replaced by hostile
values, inserted or repeated bytes, JSON values replaced in ``model.json``, lies in the
safetensors header) is handed to a worker process that runs what ``lattice info`` and
``lattice voxelize`` run (``describe_file``, ``voxelize_file``) or ``load_model`` on it, under an
address-space cap (``RLIMIT_AS``) and a per-mutant time limit. A mutant passes when the call
succeeds or raises the library's one-line error (``PointCloudError`` / ``BundleError``) whose
text starts with the file's (or bundle's) path. Anything else is a finding: another exception
(a traceback for the user), a message without the path or over several lines, a crash of the
worker (a signal), a hang, or memory past the cap.

    python -m fuzz --fuzz-minutes 10          # from tests/: a longer local run (prints findings)
"""

from __future__ import annotations

import json
import queue
import random
import shutil
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from cli_helpers import import_address_space

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
HOSTILE = (0, 1, 0xFF, 0x7F, 0xFFFF, 0x7FFFFFFF, 0xFFFFFFFF, 2**31, 2**32, 2**63 - 1, 2**64 - 1)
TEXT_NUMBERS = ("0", "-1", "1e9", "4294967295", "2147483648", "99999999999999999999", "nan", "-0")
JSON_VALUES = (0, -1, 1e9, 2**31, 2**63, True, "x", None, [], {}, 0.5, [1e9, 1e9, 1e9], "nan")


@dataclass
class Finding:
    """A mutant that broke a promise: what happened and the mutant's bytes (or bundle folder)."""

    kind: str  # traceback | unnamed | multiline | crash | hang | memory
    target: str  # points | bundle
    path: str
    detail: str


@dataclass
class Report:
    mutants: int = 0
    by_target: dict[str, int] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    peak_rss: int = 0
    seconds: float = 0.0


# ---- seeds ---------------------------------------------------------------------------------


def _head_rows(path: Path, width: int, rows: int) -> bytes:
    return path.read_bytes()[: 4 * width * rows]


def make_seeds(folder: Path) -> list[Path]:
    """Small files in every readable format (points), written into ``folder``."""
    from lattice.data import synthetic_room
    from lattice.io import PointCloud, read_points, write_points

    folder.mkdir(parents=True, exist_ok=True)
    room = synthetic_room(300, seed=3)
    seeds: list[Path] = []

    def add(name: str, cloud=None, raw: bytes | None = None, **kw) -> None:
        p = folder / name
        if raw is not None:
            p.write_bytes(raw)
        else:
            from lattice.io import format_from_name
            from lattice.pipeline.export import fit_for

            write_points(p, fit_for(cloud, format_from_name(name))[0], **kw)
        seeds.append(p)

    for src in (
        "stanford_bunny/bun_zipper_res4.ply",
        "scanned_objects/pcl_bunny_397.pcd",
        "aerial_lidar/simple.las",
    ):
        if (DATA / src).exists():
            add("real_" + Path(src).name, raw=(DATA / src).read_bytes())
    kitti = DATA / "semantickitti" / "seq00_000000.bin"
    if kitti.exists():
        add("scan.bin", raw=_head_rows(kitti, 4, 400))
    nus = next((DATA / "nuscenes").glob("*.pcd.bin"), None) if (DATA / "nuscenes").exists() else None
    if nus is not None:
        add("sweep.pcd.bin", raw=_head_rows(nus, 5, 400))
    osd = DATA / "osd_labeled" / "learn0.pcd"
    labelled = read_points(osd).drop_nan().select(np.arange(400)) if osd.exists() else room
    add("binary.ply", room)
    add("ascii.ply", room, binary=False)
    add("binary.pcd", labelled)
    add("compressed.pcd", labelled, compress=True)
    add("ascii.pcd", room, binary=False)
    add("points.npz", room)
    add("deflated.npz", room, compress=True)
    add("room.las", room.select(np.arange(200)))
    add("room.laz", room.select(np.arange(200)))
    add("room.csv", room.select(np.arange(150)))
    add("room.xyz", PointCloud(room.points[:150], {"intensity": room.attributes["intensity"][:150]}))
    add("points.npy", raw=_npy_bytes(room.points[:200].astype(np.float32)))
    add("sparse.npz", raw=_sparse_bytes(room, folder))
    return seeds


def _npy_bytes(a: np.ndarray) -> bytes:
    import io

    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _sparse_bytes(room, folder: Path) -> bytes:
    from lattice.pipeline import VoxelizeOptions, voxelize_file

    out = folder / "_sparse_tmp.npz"
    src = folder / "_room_tmp.ply"
    from lattice.io import write_points

    write_points(src, room)
    voxelize_file(src, out, VoxelizeOptions(0.5))
    data = out.read_bytes()
    out.unlink()
    src.unlink()
    return data


def make_bundle(folder: Path) -> Path:
    """A tiny random MinkUNet bundle (width 4), the loader's seed."""
    import mlx.core as mx

    from lattice.models import ClassInfo, FeatureSpec, Outputs, Preprocessing, minkunet, save_model

    mx.random.seed(5)
    model = minkunet(14, 2, 3, width=4)
    model.eval()
    pre = Preprocessing(0.2, (FeatureSpec("ones"), FeatureSpec("z")))
    classes = (ClassInfo(1, "a", (255, 0, 0)), ClassInfo(2, "b", (0, 255, 0)), ClassInfo(3, "c", (0, 0, 255)))
    outputs = Outputs(classes, ClassInfo(0, "unlabeled", (0, 0, 0)))
    return save_model(model, folder / "bundle", preprocessing=pre, outputs=outputs)


# ---- mutators ------------------------------------------------------------------------------


def _flip(rng: random.Random, data: bytearray) -> None:
    head = min(len(data), 600)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(head) if rng.random() < 0.7 else rng.randrange(len(data))
        data[i] ^= 1 << rng.randrange(8)


def _number(rng: random.Random, data: bytearray) -> None:
    width = rng.choice((1, 2, 4, 8))
    if len(data) <= width:
        return
    i = rng.randrange(min(len(data) - width, 400))
    value = rng.choice(HOSTILE) % (1 << (8 * width))
    data[i : i + width] = value.to_bytes(width, "little")


def _text_number(rng: random.Random, data: bytearray) -> bytes | None:
    head = bytes(data[:1200])
    spans = [m.span() for m in __import__("re").finditer(rb"-?\d+(\.\d+)?", head)]
    if not spans:
        return None
    a, b = rng.choice(spans)
    return bytes(data[:a]) + rng.choice(TEXT_NUMBERS).encode() + bytes(data[b:])


def mutate(rng: random.Random, raw: bytes) -> bytes:
    """One mutant of ``raw``."""
    data = bytearray(raw)
    op = rng.randrange(7)
    if op == 0 and len(data) > 1:
        return bytes(data[: rng.randrange(len(data))])
    if op == 1:
        _flip(rng, data)
    elif op == 2:
        _number(rng, data)
    elif op == 3:
        out = _text_number(rng, data)
        if out is not None:
            return out
        _flip(rng, data)
    elif op == 4 and len(data) > 8:
        i, n = rng.randrange(len(data)), rng.randint(1, 64)
        return bytes(data[:i]) + bytes(data[i : i + n]) * rng.randint(2, 20) + bytes(data[i:])
    elif op == 5:
        i = rng.randrange(len(data) + 1)
        return (
            bytes(data[:i]) + bytes(rng.randrange(256) for _ in range(rng.randint(1, 32))) + bytes(data[i:])
        )
    else:
        _flip(rng, data)
        _number(rng, data)
    return bytes(data)


def _json_paths(doc, prefix=()):
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix + (k,)
            yield from _json_paths(v, prefix + (k,))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield prefix + (i,)
            yield from _json_paths(v, prefix + (i,))


def mutate_bundle(rng: random.Random, seed: Path, out: Path) -> None:
    """A mutated copy of bundle ``seed`` at ``out``: its model.json or its weights' header."""
    out.mkdir(parents=True)
    doc = json.loads((seed / "model.json").read_text())
    weights = (seed / "weights.safetensors").read_bytes()
    op = rng.randrange(6)
    if op <= 2:  # a JSON value replaced, or deleted
        path = rng.choice(list(_json_paths(doc)))
        parent = doc
        for k in path[:-1]:
            parent = parent[k]
        if op == 2 and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = rng.choice(JSON_VALUES)
    elif op == 3:  # a nesting bomb
        depth = rng.choice((100, 5000, 100_000))
        doc.setdefault("metadata", {})["nested"] = "__BOMB__"
        text = json.dumps(doc).replace('"__BOMB__"', "[" * depth + "]" * depth)
        (out / "model.json").write_text(text)
        (out / "weights.safetensors").write_bytes(weights)
        return
    else:  # the weights: the header length, or bytes of the JSON header; the checksum dropped
        doc.get("weights", {}).pop("sha256", None)
        w = bytearray(weights)
        if op == 4:
            w[0:8] = struct.pack("<Q", rng.choice((0, 1, 7, len(w), len(w) * 4, 2**31, 2**63 - 1)))
        else:
            n = struct.unpack("<Q", bytes(w[:8]))[0]
            end = min(8 + n, len(w))
            for _ in range(rng.randint(1, 6)):
                w[rng.randrange(8, end)] = rng.randrange(32, 127)
        weights = bytes(w)
    (out / "model.json").write_text(json.dumps(doc))
    (out / "weights.safetensors").write_bytes(weights)


# ---- the worker ------------------------------------------------------------------------------

_WORKER = r"""
import json, resource, signal, sys, time
limit = int(sys.argv[1]); per_mutant = float(sys.argv[2])
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
from lattice.io import PointCloudError
from lattice.models.spec import BundleError
from lattice.pipeline import VoxelizeOptions, describe_file, voxelize_file
from lattice.models import load_model
class Hang(Exception):
    pass
def alarm(signum, frame):
    raise Hang()
signal.signal(signal.SIGALRM, alarm)
opts = VoxelizeOptions(0.5)
for line in sys.stdin:
    task = json.loads(line)
    print(json.dumps({"start": task["i"]}), flush=True)
    result = {"i": task["i"], "ok": True}
    signal.setitimer(signal.ITIMER_REAL, per_mutant)
    try:
        if task["target"] == "points":
            describe_file(task["path"])
            voxelize_file(task["path"], task["out"], opts)
        else:
            load_model(task["path"])
    except Hang:
        result = {"i": task["i"], "ok": False, "kind": "hang", "detail": f"over {per_mutant} s"}
    except (PointCloudError, BundleError) as e:
        text = str(e)
        if "\n" in text.strip():
            result = {"i": task["i"], "ok": False, "kind": "multiline", "detail": text[:300]}
        elif not text.startswith(task["path"]) and not text.startswith(task["name"]):
            result = {"i": task["i"], "ok": False, "kind": "unnamed", "detail": f"{type(e).__name__}: {text[:300]}"}
    except MemoryError as e:
        result = {"i": task["i"], "ok": False, "kind": "memory", "detail": f"MemoryError {e}"[:300]}
    except BaseException as e:
        result = {"i": task["i"], "ok": False, "kind": "traceback", "detail": f"{type(e).__name__}: {e}"[:300]}
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    result["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps(result), flush=True)
"""


def import_overhead() -> int:
    """Address space that importing lattice takes here beyond 512 MiB (0 on a CPU build;
    ``cli_helpers.import_address_space``): added to the cap, so the cap bounds what the
    mutants cost, whatever the build."""
    return max(0, import_address_space() - (1 << 29))


def _start_worker(limit: int, per_mutant: float) -> subprocess.Popen:
    limit += import_overhead()
    proc = subprocess.Popen(
        # -P: started from the checkout's root, its source folders must not shadow the install
        [sys.executable, "-P", "-c", _WORKER, str(limit), str(per_mutant)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1,
    )  # fmt: skip
    proc.lines = queue.Queue()  # read by a thread: a line already buffered is never missed

    def pump() -> None:
        for line in proc.stdout:
            proc.lines.put(line)
        proc.lines.put(None)  # the worker is gone

    threading.Thread(target=pump, daemon=True).start()
    return proc


def _read_line(proc: subprocess.Popen, timeout: float) -> str | None:
    try:
        return proc.lines.get(timeout=timeout)
    except queue.Empty:
        return None


def run(
    workdir: Path,
    *,
    seed: int = 0,
    seconds: float = 120.0,
    min_mutants: int = 0,
    memory_limit: int = 4 << 30,
    per_mutant: float = 10.0,
    keep: Path | None = None,
) -> Report:
    """Fuzz for about ``seconds`` (and at least ``min_mutants``); returns the report.

    Findings' mutants are copied into ``keep`` (a folder) when given.
    """
    t0 = time.perf_counter()
    rng = random.Random(seed)
    seeds = make_seeds(workdir / "seeds")
    bundle = make_bundle(workdir / "seedbundle")
    raws = [(p, p.read_bytes()) for p in seeds]
    report = Report()
    mutants = workdir / "mutants"
    mutants.mkdir(exist_ok=True)
    proc = _start_worker(memory_limit, per_mutant)
    i = 0
    try:
        while time.perf_counter() - t0 < seconds or report.mutants < min_mutants:
            task = _next_task(rng, i, raws, bundle, mutants)
            i += 1
            proc.stdin.write(json.dumps(task) + "\n")
            proc.stdin.flush()
            started = _read_line(proc, 60)
            line = _read_line(proc, per_mutant + 20) if started else None
            report.mutants += 1
            report.by_target[task["target"]] = report.by_target.get(task["target"], 0) + 1
            if line and '"start"' not in line:
                res = json.loads(line)
                report.peak_rss = max(report.peak_rss, res["rss"])
                if not res["ok"]:
                    _found(report, res["kind"], task, res["detail"], keep)
                else:
                    _discard(task)
                continue
            time.sleep(0.2)
            kind = "hang" if proc.poll() is None else "crash"
            detail = f"worker exit {proc.returncode}" if kind == "crash" else "no answer"
            _found(report, kind, task, detail, keep)
            proc.kill()
            proc.wait()
            proc = _start_worker(memory_limit, per_mutant)
    finally:
        proc.kill()
        proc.wait()
    report.seconds = time.perf_counter() - t0
    return report


def replay(
    workdir: Path, paths: list[Path], *, memory_limit: int = 4 << 30, per_mutant: float = 10.0
) -> Report:
    """Run the worker on saved mutants (files, or bundle folders) instead of new ones.

    A saved bundle folder may hold only its ``model.json``: the seed bundle's weights are
    added (so regression bundles stay a few KB in the repository).
    """
    t0 = time.perf_counter()
    report = Report()
    seed_bundle = None
    for i, path in enumerate(paths):
        target = "bundle" if path.is_dir() else "points"
        copy = (
            workdir / f"r{i}{''.join(path.suffixes[-2:]) if path.name.endswith('.pcd.bin') else path.suffix}"
        )
        shutil.copytree(path, copy) if path.is_dir() else shutil.copy(path, copy)
        if target == "bundle" and not (copy / "weights.safetensors").exists():
            seed_bundle = seed_bundle or make_bundle(workdir / "seedbundle")
            shutil.copy(seed_bundle / "weights.safetensors", copy / "weights.safetensors")
        task = {
            "i": i,
            "target": target,
            "path": str(copy),
            "name": str(copy),
            "out": str(workdir / f"o{i}.npz"),
        }
        proc = _start_worker(memory_limit, per_mutant)
        try:
            proc.stdin.write(json.dumps(task) + "\n")
            proc.stdin.flush()
            started = _read_line(proc, 60)
            line = _read_line(proc, per_mutant + 20) if started else None
        finally:
            proc.kill()
            proc.wait()
        report.mutants += 1
        if line and '"start"' not in line:
            res = json.loads(line)
            report.peak_rss = max(report.peak_rss, res["rss"])
            if not res["ok"]:
                report.findings.append(Finding(res["kind"], target, str(path), res["detail"]))
        else:
            report.findings.append(
                Finding("crash" if proc.returncode else "hang", target, str(path), "no answer")
            )
    report.seconds = time.perf_counter() - t0
    return report


def _next_task(rng, i, raws, bundle: Path, mutants: Path) -> dict:
    if rng.random() < 0.15:
        out = mutants / f"b{i}"
        mutate_bundle(rng, bundle, out)
        return {"i": i, "target": "bundle", "path": str(out), "name": str(out)}
    src, raw = rng.choice(raws)
    name = src.name
    ext = name[name.index(".", 1) if name.endswith(".pcd.bin") else name.rindex(".") :]
    path = (
        mutants / f"m{i}-{name[: len(name) - len(ext)]}{ext}"
    )  # the seed's name: real_* come from ../shared/data
    path.write_bytes(mutate(rng, raw))
    return {
        "i": i,
        "target": "points",
        "path": str(path),
        "name": str(path),
        "out": str(mutants / f"o{i}.npz"),
    }


def _discard(task: dict) -> None:
    p = Path(task["path"])
    shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
    if "out" in task:
        Path(task["out"]).unlink(missing_ok=True)


def _found(report: Report, kind: str, task: dict, detail: str, keep: Path | None) -> None:
    path = Path(task["path"])
    if keep is not None:
        keep.mkdir(parents=True, exist_ok=True)
        dst = keep / f"{kind}-{path.name}"
        shutil.copytree(path, dst, dirs_exist_ok=True) if path.is_dir() else shutil.copy(path, dst)
    report.findings.append(Finding(kind, task["target"], str(path), detail))
    if "out" in task:
        Path(task["out"]).unlink(missing_ok=True)


def summary(report: Report) -> str:
    kinds: dict[str, int] = {}
    for f in report.findings:
        kinds[f.kind] = kinds.get(f.kind, 0) + 1
    return (
        f"{report.mutants} mutants ({', '.join(f'{k} {v}' for k, v in sorted(report.by_target.items()))}) "
        f"in {report.seconds:.0f} s, peak RSS {report.peak_rss / 2**20:.0f} MiB, findings: {kinds or 'none'}"
    )


__all__ = [
    "Finding",
    "Report",
    "make_bundle",
    "make_seeds",
    "mutate",
    "mutate_bundle",
    "replay",
    "run",
    "summary",
]
