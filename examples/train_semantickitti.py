"""Train a SemanticKITTI segmentation model (MinkUNet14), on the GPU or the CPU, resumable.

    # the GPU run (NVIDIA H200, MLX CUDA): full width, 0.05 m, calls of at most ~9 minutes
    python examples/train_semantickitti.py --device gpu --data runs/data/semantickitti \\
        --output runs/ckpt --resume runs/ckpt --minutes 8 --budget-minutes 15
    # a CPU smoke run and its resume (identical state at step 6)
    python examples/train_semantickitti.py --steps 6 --stop-at 3 --width 8 --voxel-size 0.2 --output /tmp/s
    python examples/train_semantickitti.py --steps 6 --width 8 --voxel-size 0.2 --output /tmp/s --resume /tmp/s
    # leave-one-scan-out fold (never looks at the held-out scan)
    python examples/train_semantickitti.py --val-scan sqsv3_seq00_000001 --steps 300 --output runs/fold-1

Data (``--data``, default ``../shared/data/semantickitti``; see its SOURCES.md; SemanticKITTI,
CC BY-NC-SA). ``--data`` is read alone: copy these files there (17 MiB) for a machine
without ``../shared``:

- ``kitti_01_points_00000{0,1,2}.npy`` (sequence 01, highway) and ``demo_points_0007{00,50}.npy``
  (urban), xyz only, with their ``*_labels_*.npy`` learning ids (0 = unlabeled, 1..19);
- ``sqsv3_seq00_00000{0,1,2}.bin`` + ``.label`` (sequence 00, urban): x, y, z, remission,
  raw label ids mapped by ``LEARNING_MAP``;
- held out: ``seq00_000000.bin`` + ``.label`` (another urban scan with remission), never
  trained on and scored once, when the last step is done (not when ``--val-scan`` is given).

Inputs (the bundle's ``preprocessing``, which ``lattice model-run`` computes the same way):
a constant, the height ``z`` (normalised), the sub-voxel offsets, the remission
(``intensity`` / alias ``remission``, normalised with the training scans' statistics; a
cloud without it gets the training mean) and a "has remission" channel (``indicator``: 1
where the cloud has the attribute). The five ``.npy`` scans have no remission; a scan with
remission is shown without it with probability ``--remission-dropout``, so the model uses
the channel where present and does not depend on it.

Each step takes ``--batch`` scans (collated as a batch). Each is augmented: random point
dropout (up to ``--point-dropout``), rotation about z, mirror, roll / pitch (σ ``--tilt``°),
scale 0.9-1.1, per-point jitter (σ 1 cm, clipped at 5 cm), a height shift (σ ``--z-shift``); with
probability ``--mix`` it is mixed with a second scan (instance-free: the points of one on
one side of a random vertical plane through the sensor, the other's on the other side).
Voxels take the majority label of their points. The loss is the class-weighted
cross-entropy (weights ``frequency^-0.5``) plus ``--lovasz`` times the Lovász-softmax
(``lattice.models.losses``); AdamW, a linear warm-up then a cosine decay over the total
step count. The total is ``--steps``, or (``--steps 0``) what ``--budget-minutes`` of
training allows at the speed of the first timed steps; it is fixed then and saved.

Calls and resume: a call trains until the total is reached or ``--minutes`` of wall time
(less the ``--reserve`` seconds needed to save) are spent, then saves ``OUTPUT/checkpoint``:
a bundle (float32 weights and BatchNorm statistics), the optimizer state
(``optimizer.safetensors``) and ``state.json`` (step, total, seed, the RNG scheme, the
log so far). ``--resume DIR`` continues from DIR's checkpoint exactly: every step's
randomness is ``numpy.random.default_rng([seed, step])``, so a resumed run draws what an
uninterrupted one would; a DIR without a checkpoint starts afresh (one command line serves
every call). When the last step is done: precise BatchNorm (running statistics averaged
over ``--bn-passes`` augmented batches), then ``OUTPUT/final/``: ``float32/`` (the full
bundle), ``int8/`` (unless NAME is int8), ``NAME/`` (the bundle to ship, float32 if its weights are at most 10 MB, else
int8, else int4, or as ``--ship`` says; with README, train.log, scores), and
``scores.json``. ``--finish`` does this when the call stops, whatever the step (a run cut
short); the scores then say at which step.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import NamedTuple

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np
from mlx.utils import tree_flatten, tree_unflatten

from lattice import ops
from lattice.io import PointCloud, read_points
from lattice.models import (
    ClassInfo,
    FeatureSpec,
    Outputs,
    Preprocessing,
    domain_stats,
    format_scores,
    load_model,
    minkunet,
    point_features,
    predict_cloud,
    save_model,
    segmentation_scores,
)
from lattice.models.losses import lovasz_softmax, weighted_cross_entropy

DATA = Path(__file__).resolve().parents[1].parent / "shared/data/semantickitti"
SHIPPED = Path(__file__).resolve().parent / "models/minkunet14-semantickitti"
TRAIN_NPY = ["kitti_01_000000", "kitti_01_000001", "kitti_01_000002", "demo_000700", "demo_000750"]
TRAIN_BIN = ["sqsv3_seq00_000000", "sqsv3_seq00_000001", "sqsv3_seq00_000002"]
TRAIN = TRAIN_NPY + TRAIN_BIN
HELD_OUT = "seq00_000000"
MAX_BUNDLE_BYTES = 10_000_000

# SemanticKITTI raw id -> learning id (0 = unlabeled / ignored), as in semantic-kitti.yaml.
LEARNING_MAP = {
    0: 0, 1: 0, 10: 1, 11: 2, 13: 5, 15: 3, 16: 5, 18: 4, 20: 5, 30: 6, 31: 7, 32: 8, 40: 9, 44: 10,
    48: 11, 49: 12, 50: 13, 51: 14, 52: 0, 60: 9, 70: 15, 71: 16, 72: 17, 80: 18, 81: 19, 99: 0,
    252: 1, 253: 7, 254: 6, 255: 8, 256: 5, 257: 5, 258: 4, 259: 5,
}  # fmt: skip
# learning id -> (name, RGB colour, ASPRS LAS code), colours from semantic-kitti.yaml's color_map
# (stored there as BGR). ASPRS (LAS 1.4 R15): 1 unclassified (ASPRS has no vehicle, person,
# fence, pole or sign class), 2 ground, 5 high vegetation, 6 building, 11 road surface.
CLASSES = {
    1: ("car", (100, 150, 245), 1), 2: ("bicycle", (100, 230, 245), 1),
    3: ("motorcycle", (30, 60, 150), 1), 4: ("truck", (80, 30, 180), 1),
    5: ("other-vehicle", (0, 0, 255), 1), 6: ("person", (255, 30, 30), 1),
    7: ("bicyclist", (255, 40, 200), 1), 8: ("motorcyclist", (150, 30, 90), 1),
    9: ("road", (255, 0, 255), 11), 10: ("parking", (255, 150, 255), 2),
    11: ("sidewalk", (75, 0, 75), 2), 12: ("other-ground", (175, 0, 75), 2),
    13: ("building", (255, 200, 0), 6), 14: ("fence", (255, 120, 50), 1),
    15: ("vegetation", (0, 175, 0), 5), 16: ("trunk", (135, 60, 0), 5),
    17: ("terrain", (150, 240, 80), 2), 18: ("pole", (255, 240, 150), 1),
    19: ("traffic-sign", (255, 0, 0), 1),
}  # fmt: skip
IGNORE_ASPRS = 0  # unlabeled: "created, never classified"
N_CLASSES = len(CLASSES)
REMISSION = ("intensity", ("remission",))  # the attribute name read_points gives KITTI's 4th column


def log(message: str, sink: list[str]) -> None:
    """Print and keep a log line."""
    print(message, flush=True)
    sink.append(message)


def raw_to_learning(raw: np.ndarray) -> np.ndarray:
    """SemanticKITTI ``.label`` values (semantic id in the low 16 bits) -> learning ids 0..19."""
    lut = np.zeros(1 << 16, np.int32)
    for k, v in LEARNING_MAP.items():
        lut[k] = v
    return lut[np.asarray(raw, np.uint32) & 0xFFFF]


class Scan(NamedTuple):
    """A labelled scan: xyz float32 (N, 3), remission float32 (N,) or None, learning ids (N,),
    the sensor's probable position."""

    name: str
    points: np.ndarray
    remission: np.ndarray | None
    labels: np.ndarray
    sensor: np.ndarray  # (3,): where the sensor probably is (``sensor_xy``, z = 0); augment centres on it

    def cloud(self) -> PointCloud:
        """As ``lattice model-run`` reads it (remission as ``intensity``)."""
        return PointCloud(self.points, {} if self.remission is None else {REMISSION[0]: self.remission})


def load_scan(data: Path, name: str) -> Scan:
    """One scan of ``--data`` by name (``kitti_01_000000``, ``sqsv3_seq00_000001``, ``seq00_000000``)."""
    if (data / f"{name}.bin").exists():
        cloud = read_points(data / f"{name}.bin")
        raw = np.fromfile(data / f"{name}.label", dtype=np.uint32)
        rem = np.asarray(cloud.attributes["intensity"], np.float32)
        pts = np.asarray(cloud.points, np.float32)
        return Scan(name, pts, rem, raw_to_learning(raw), np.array([*sensor_xy(pts), 0.0], np.float32))
    prefix, number = name.rsplit("_", 1)
    pts = np.load(data / f"{prefix}_points_{number}.npy", allow_pickle=False).astype(np.float32)
    lab = np.load(data / f"{prefix}_labels_{number}.npy", allow_pickle=False).reshape(-1).astype(np.int32)
    return Scan(name, pts, None, lab, np.array([*sensor_xy(pts), 0.0], np.float32))


def sensor_xy(pts: np.ndarray) -> np.ndarray:
    """Where the scan's sensor probably is in x, y: the origin, unless 99 % of the points are
    more than 10 m from it (demo_000700: 29.5 m at least, y -157..-25), then the bounding
    box's centre."""
    if np.percentile(np.hypot(pts[:, 0], pts[:, 1]), 1) <= 10:
        return np.zeros(2)
    return (pts[:, :2].min(axis=0) + pts[:, :2].max(axis=0)) / 2


def augment(scan: Scan, rng: np.random.Generator, args) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """(points float32, remission or None, labels) of one augmented copy of ``scan``."""
    keep = rng.random(len(scan.points), dtype=np.float32) >= rng.uniform(0, args.point_dropout)
    a = rng.uniform(0, 2 * np.pi)
    c, s = np.cos(a), np.sin(a)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    if rng.random() < 0.5:
        rot = rot @ np.diag([1.0, -1.0, 1.0])
    tx, ty = np.radians(rng.normal(0, args.tilt, size=2))
    tilt_x = np.array([[1, 0, 0], [0, np.cos(tx), -np.sin(tx)], [0, np.sin(tx), np.cos(tx)]])
    tilt_y = np.array([[np.cos(ty), 0, np.sin(ty)], [0, 1, 0], [-np.sin(ty), 0, np.cos(ty)]])
    m = (tilt_x @ tilt_y @ rot).T * rng.uniform(0.9, 1.1)
    shift = np.array([*rng.uniform(0, args.voxel_size, size=2), rng.normal(0, args.z_shift)])
    pts = scan.points[keep]
    jitter = rng.standard_normal(pts.shape, dtype=np.float32)
    np.clip(jitter, -5.0, 5.0, out=jitter)
    pts = pts - scan.sensor
    m, shift = m.astype(np.float32), shift.astype(np.float32)
    # column by column: NumPy's (N, 3) @ (3, 3) took 48 ms for 120k points here, this 3 ms
    cols = [pts[:, 0] * m[0, j] + pts[:, 1] * m[1, j] + pts[:, 2] * m[2, j] + shift[j] for j in range(3)]
    pts = np.stack(cols, axis=1) + jitter * np.float32(0.01)
    rem = None if scan.remission is None else scan.remission[keep]
    return pts, rem, scan.labels[keep]


def sample_scan(scans: list[Scan], rng: np.random.Generator, args):
    """One training example: an augmented scan, or (``--mix``) two mixed across a vertical plane."""
    first = scans[rng.integers(len(scans))]
    pts, rem, lab = augment(first, rng, args)
    if len(scans) > 1 and rng.random() < args.mix:
        second = scans[rng.integers(len(scans))]
        p2, r2, l2 = augment(second, rng, args)
        a = rng.uniform(0, 2 * np.pi)
        n = np.array([np.cos(a), np.sin(a)])
        s1, s2 = pts[:, :2] @ n >= 0, p2[:, :2] @ n < 0
        both = rem is not None and r2 is not None  # remission only when both halves have it
        rem = np.concatenate([rem[s1], r2[s2]]) if both else None
        pts, lab = np.concatenate([pts[s1], p2[s2]]), np.concatenate([lab[s1], l2[s2]])
    if rem is not None and rng.random() < args.remission_dropout:
        rem = None
    return pts, rem, lab


def host_batch(scans: list[Scan], pre: Preprocessing, args, step: int, stream: str = "train"):
    """The NumPy part of step ``step``'s batch: (points, features, labels, batch index).

    Its randomness is ``default_rng([seed, step])`` (``stream`` keeps other uses apart),
    so any step can be redrawn exactly, in any order, in a worker thread.
    """
    rng = np.random.default_rng([args.seed, step, 0 if stream == "train" else 1])
    parts = [sample_scan(scans, rng, args) for _ in range(args.batch)]
    feats = [point_features(p, {} if r is None else {REMISSION[0]: r}, pre) for p, r, _ in parts]
    pts = np.concatenate([p for p, _, _ in parts])
    batch = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p) for p, _, _ in parts])
    return pts, np.concatenate(feats), np.concatenate([lab for _, _, lab in parts]), batch


def voxel_batch(pts, feats, labels, batch, pre: Preprocessing):
    """The network input and the majority learning id of every voxel (0 only if all its points are 0)."""
    x, index = ops.voxelize(
        pts, mx.array(feats), pre.voxel_size, origin=pre.origin, batch_indices=batch, return_index=True
    )
    inv = np.asarray(index).astype(np.int64)
    votes = np.bincount(inv * (N_CLASSES + 1) + labels, minlength=x.active_count * (N_CLASSES + 1))
    votes = votes.reshape(-1, N_CLASSES + 1)
    votes[:, 0] = np.where(votes[:, 1:].sum(axis=1) > 0, 0, votes[:, 0])
    return x, votes.argmax(axis=1).astype(np.int32)


def class_weights(scans: list[Scan]) -> mx.array:
    """``frequency^-0.5`` over the training points, normalised to mean 1 over the classes seen."""
    counts = np.bincount(np.concatenate([s.labels for s in scans]), minlength=N_CLASSES + 1)[1:]
    w = np.where(counts > 0, 1.0 / np.sqrt(np.maximum(counts, 1)), 0.0)
    return mx.array((w / w[counts > 0].mean()).astype(np.float32))


def preprocessing(scans: list[Scan], voxel: float) -> Preprocessing:
    """Features: a constant, normalised z, sub-voxel offsets, remission and whether it is there."""
    z = np.concatenate([s.points[:, 2] for s in scans]).astype(np.float64)
    feats = [
        FeatureSpec("ones"),
        FeatureSpec("z", round(float(z.mean()), 4), round(float(z.std()), 4)),
        FeatureSpec("x_local"),
        FeatureSpec("y_local"),
        FeatureSpec("z_local"),
    ]
    rem = [s.remission for s in scans if s.remission is not None]
    if rem:
        r = np.concatenate(rem).astype(np.float64)
        mean, std = round(float(r.mean()), 4), round(float(max(r.std(), 1e-3)), 4)
        name, aliases = REMISSION
        feats += [
            FeatureSpec(name, mean, std, aliases, missing=mean),
            FeatureSpec(name, aliases=aliases, indicator=True),
        ]
    return Preprocessing((voxel,) * 3, tuple(feats))


def outputs() -> Outputs:
    """The 19 SemanticKITTI classes (logit k = learning id k + 1), 0 = unlabeled."""
    return Outputs(
        tuple(ClassInfo(i, name, color, code) for i, (name, color, code) in CLASSES.items()),
        ClassInfo(0, "unlabeled", (0, 0, 0), IGNORE_ASPRS),
    )


def learning_rate(step: int, total: int, args) -> float:
    """Linear warm-up over ``--warmup`` steps, then cosine decay to 1 % at ``total``."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = min(1.0, (step - args.warmup) / max(1, total - args.warmup))
    return args.lr * (0.01 + 0.99 * 0.5 * (1 + np.cos(np.pi * t)))


def recalibrate_batch_norm(model, scans, pre, args, passes: int) -> None:
    """Precise BatchNorm: the running statistics become their average over ``passes``
    augmented training batches (forward passes only; randomness apart from training's)."""
    norms = [m for _, m in model.named_modules() if isinstance(m, nn.BatchNorm)]
    model.train()
    for i in range(passes):
        for m in norms:
            m.momentum = 1.0 / (i + 1)
        x, _ = voxel_batch(*host_batch(scans, pre, args, i, stream="bn"), pre)
        mx.eval(model(x).feats, [(m.running_mean, m.running_var) for m in norms])
    for m in norms:
        m.momentum = 0.1
    model.eval()


def score_scan(model, pre: Preprocessing, scan: Scan):
    """Segmentation scores of ``model`` on every point of ``scan`` (nearest mapping)."""
    was_training = model.training
    model.eval()
    cloud = scan.cloud()
    feats = point_features(cloud.points, cloud.attributes, pre)
    x, index = ops.voxelize(
        cloud.points, mx.array(feats), pre.voxel_size, origin=pre.origin, return_index=True
    )
    pred = np.asarray(mx.argmax(model(x).feats, axis=1))[np.asarray(index)] + 1
    model.train(was_training)
    return segmentation_scores(scan.labels, pred, range(1, N_CLASSES + 1))


def scores_json(scores, names) -> dict:
    """Accuracy, mIoU and per-class IoU, rounded, for JSON."""
    return {
        "overall_accuracy": round(scores.accuracy, 4),
        "miou_present": round(scores.miou, 4),
        "iou": {names[k]: round(float(scores.iou[k]), 4) for k in scores.present()},
        "points": {names[k]: int(scores.confusion[k].sum()) for k in scores.present()},
    }


# ---------------------------------------------------------------------------- checkpoints


def save_checkpoint(folder: Path, model, optimizer, state: dict, pre, meta: dict) -> None:
    """``folder``: a float32 bundle, the optimizer state and ``state.json``, written to a
    temporary folder first and then swapped in, so a call killed while saving leaves the
    previous checkpoint whole."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_model(model, tmp, preprocessing=pre, outputs=outputs(), name="checkpoint", metadata=meta)
    flat = dict(tree_flatten(optimizer.state))
    mx.save_safetensors(str(tmp / "optimizer.safetensors"), flat)
    (tmp / "state.json").write_text(json.dumps(state, indent=1) + "\n")
    old = folder.with_name(folder.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)


def load_checkpoint(folder: Path, model, optimizer) -> dict:
    """Weights (BatchNorm statistics included) and optimizer state from ``folder``; its state.json."""
    bundle = load_model(folder, require_checksum=True)
    model.update(bundle.model.parameters())
    optimizer.init(model.trainable_parameters())
    saved = mx.load(str(folder / "optimizer.safetensors"))
    want = {k for k, _ in tree_flatten(optimizer.state)}
    if set(saved) != want:
        sys.exit(f"train_semantickitti.py: {folder}: the optimizer state does not fit this model")
    optimizer.state = tree_unflatten(list(saved.items()))
    return json.loads((folder / "state.json").read_text())


# ---------------------------------------------------------------------------- training


def run_args(args) -> dict:
    """The arguments that define the training run (a resume must not change them)."""
    keys = (
        "width", "voxel_size", "stem_kernel", "batch", "lr", "warmup", "weight_decay", "lovasz",
        "point_dropout", "mix", "remission_dropout", "tilt", "z_shift", "seed", "val_scan",
    )  # fmt: skip
    return {k: getattr(args, k) for k in keys}


def train(args) -> None:
    out: Path = args.output
    ckpt = out / "checkpoint"
    train_names = [n for n in TRAIN if n != args.val_scan]
    scans = [load_scan(args.data, n) for n in train_names]
    val = load_scan(args.data, args.val_scan) if args.val_scan else None
    pre = preprocessing(scans, args.voxel_size)
    weights = class_weights(scans)
    mx.random.seed(args.seed)
    model = minkunet(14, len(pre.features), N_CLASSES, width=args.width, stem_kernel=args.stem_kernel)
    optimizer = optim.AdamW(learning_rate=args.lr, weight_decay=args.weight_decay)
    lines: list[str] = []
    step, total, trained_seconds = 0, args.steps, 0.0
    resume = args.resume / "checkpoint" if args.resume else None
    if resume is not None and (resume / "state.json").exists():
        state = load_checkpoint(resume, model, optimizer)
        if state["run"] != run_args(args):
            diff = {k: (v, run_args(args)[k]) for k, v in state["run"].items() if run_args(args)[k] != v}
            sys.exit(
                f"train_semantickitti.py: --resume {args.resume}: these arguments differ (saved, given): {diff}"
            )
        step, total, trained_seconds, lines = state["step"], state["total"], state["seconds"], state["log"]
        log(
            f"resumed {args.resume} at step {step} of {total} ({trained_seconds:.0f} s trained so far)", lines
        )
    else:
        if resume is not None:
            log(f"--resume {args.resume}: no checkpoint there, starting afresh", lines)
        log(f"device {mx.default_device()}, MLX {mx.__version__}; train {train_names}; "
            f"{'val ' + args.val_scan if val else 'held out ' + HELD_OUT + ' (scored once, at the end)'}", lines)  # fmt: skip
        log(f"arguments {json.dumps(run_args(args))}", lines)
        log(f"preprocessing {json.dumps(pre.to_json())}", lines)
    log("$ python " + " ".join(sys.argv), lines)
    params = sum(v.size for _, v in tree_flatten(model.parameters()))
    log(f"MinkUNet14 width {args.width}: {params:,} values; batch {args.batch}", lines)

    def loss_fn(model, x, y, rows):
        logits = model(x).feats
        logits = mx.take(logits, rows, axis=0)
        ce = weighted_cross_entropy(logits, y, weights)
        if args.lovasz <= 0:
            return ce, ce
        lz = lovasz_softmax(mx.softmax(logits, axis=-1), y)
        return ce + args.lovasz * lz, ce

    grad_step = nn.value_and_grad(model, loss_fn)
    budget = args.minutes * 60 - args.reserve
    call_start = time.perf_counter()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    pending = pool.submit(host_batch, scans, pre, args, step)
    running, voxels, timed = [], [], []
    model.train()
    stopped = "done"
    while total == 0 or step < total:
        if args.stop_at is not None and step >= args.stop_at:
            stopped = f"--stop-at {args.stop_at}"
            break
        if time.perf_counter() - call_start > budget:
            stopped = f"--minutes {args.minutes}"
            break
        t0 = time.perf_counter()
        host = pending.result()
        pending = pool.submit(host_batch, scans, pre, args, step + 1)
        x, y = voxel_batch(*host, pre)
        rows = np.flatnonzero(y > 0).astype(np.int32)
        optimizer.learning_rate = mx.array(learning_rate(step, total or 10**9, args), mx.float32)
        (loss, ce), grads = grad_step(model, x, mx.array(y[rows] - 1), mx.array(rows))
        optimizer.update(model, grads)
        mx.eval(loss, ce, model.parameters(), optimizer.state)
        step += 1
        dt = time.perf_counter() - t0
        trained_seconds += dt
        running.append((float(loss), float(ce)))
        voxels.append(x.active_count)
        timed.append(dt)
        if total == 0 and len(timed) == args.timing_steps + 3:
            per_step = float(np.median(timed[3:]))  # the first steps compile and warm caches
            total = max(step + 1, int(args.budget_minutes * 60 / per_step))
            log(f"{per_step:.3f} s per step at {np.mean(voxels):,.0f} voxels: --budget-minutes "
                f"{args.budget_minutes} -> {total} steps in all", lines)  # fmt: skip
        if step % args.log_every == 0 or step == total:
            lo, c = np.mean(running, axis=0)
            msg = (
                f"step {step:5d}/{total}  loss {lo:.4f} (ce {c:.4f})  lr {learning_rate(step - 1, total or 10**9, args):.2e}  "
                f"{np.mean(voxels):,.0f} voxels  {np.median(timed[-len(running) :]):.3f} s/step  {trained_seconds:6.0f} s"
            )
            if val is not None and args.eval_every and (step % args.eval_every == 0 or step == total):
                s = score_scan(model, pre, val)
                msg += f"  val {args.val_scan} acc {s.accuracy:.3f} mIoU {s.miou:.3f}"
            log(msg, lines)
            running, voxels = [], []
    pool.shutdown(wait=True, cancel_futures=True)
    log(
        f"stopped at step {step} of {total} ({stopped}); {time.perf_counter() - call_start:.0f} s this call",
        lines,
    )
    meta = training_metadata(args, train_names, trained_seconds, total)
    meta["training"]["steps_done"] = step
    state = {
        "step": step,
        "total": total,
        "seconds": round(trained_seconds, 2),
        "seed": args.seed,
        "rng": "numpy.random.default_rng([seed, step, 0]) draws step's batch; [seed, i, 1] the BatchNorm pass i",
        "run": run_args(args),
        "log": lines,
    }
    save_checkpoint(ckpt, model, optimizer, state, pre, meta)
    (out / "train.log").write_text("\n".join(lines) + "\n")
    print(f"checkpoint saved: {ckpt} (step {step})", flush=True)
    if (total and step >= total) or args.finish:
        # the held-out scan is scored only once the last step is done; a --val-scan at any finish
        finish(args, model, pre, scans, val, lines, meta, score=val is not None or step >= total > 0)
        (out / "train.log").write_text("\n".join(lines) + "\n")


def training_metadata(args, train_names, seconds: float, total: int) -> dict:
    def portable(v):
        if not isinstance(v, Path):
            return v
        base = Path(__file__).resolve().parents[1]
        try:
            return os.path.relpath(v.resolve(), base)
        except ValueError:
            return str(v)

    skip = ("output", "resume", "overwrite", "stop_at", "finish")
    return {
        "training": {
            "script": "examples/train_semantickitti.py",
            "arguments": {k: portable(v) for k, v in vars(args).items() if k not in skip},
            "train_scans": train_names,
            "held_out": args.val_scan or HELD_OUT,
            "train_seconds": round(seconds, 1),
            "total_steps": total,
        },
        "license": "weights trained on SemanticKITTI (CC BY-NC-SA 4.0): research / test use only",
    }


def finish(args, model, pre, scans, val, lines, meta, *, score: bool = True) -> None:
    """BatchNorm recalibration, the float32 and shipped bundles and (``score``) the scores on
    the ``--val-scan`` or the one held-out score."""
    final = args.output / "final"
    shutil.rmtree(final, ignore_errors=True)
    recalibrate_batch_norm(model, scans, pre, args, args.bn_passes)
    log(f"BatchNorm recalibrated over {args.bn_passes} augmented batches", lines)
    domain = training_domain(args.data, pre, [s.name for s in scans])
    save = dict(preprocessing=pre, outputs=outputs(), domain=domain, metadata=meta)
    full = save_model(model, final / "float32", name=args.name, **save)
    ship, storage = final / args.name, None
    choices = {"auto": (None, 8, 4), "float32": (None,), "int8": (8,), "int4": (4,)}[args.ship]
    for bits in choices:
        bundle = load_model(full, quantize_bits=bits)
        shutil.rmtree(ship, ignore_errors=True)
        save_model(bundle.model, ship, name=args.name, **save)
        storage = "float32" if bits is None else f"int{bits}"
        size = (ship / "weights.safetensors").stat().st_size
        log(f"{storage} weights: {size / 1e6:.1f} MB", lines)
        if size <= MAX_BUNDLE_BYTES:
            break
    if storage != "int8":  # int8 too, small enough to come back from a device machine (16 MiB a file)
        save_model(load_model(full, quantize_bits=8).model, final / "int8", name=args.name, **save)
    if not score:
        step = meta["training"]["steps_done"]
        note = (
            f"Not scored: the run stopped at step {step} of {meta['training']['total_steps']} (`--finish`), "
            f"and the held-out {HELD_OUT} is scored only after the last step. Score it once, when this "
            f"is the bundle kept: `python examples/evaluate_segmentation.py {args.name}`."
        )
        meta = {**meta, "scores": {"scan": None, "step": step, "storage": storage}}
        bundle = load_model(ship)
        save_model(bundle.model, ship, name=args.name, **{**save, "metadata": meta})
        (ship / "train.log").write_text("\n".join(lines) + "\n")
        (ship / "README.md").write_text(readme(args, meta, note, storage, lines))
        log(f"unscored bundle (step {step}): {ship} ({storage})", lines)
        return
    target = val if val is not None else load_scan(args.data, HELD_OUT)
    what = f"val {target.name}" if val is not None else f"held-out {target.name}"
    results = {}
    for label, bits in (("float32", None), ("int8", 8), ("int4", 4)):
        bundle = load_model(full, quantize_bits=bits)
        pred = predict_cloud(bundle, target.cloud())
        s = segmentation_scores(target.labels, pred.labels, range(1, N_CLASSES + 1))
        results[label] = scores_json(s, bundle.outputs.names)
        log(f"{what}, {label}: acc {s.accuracy:.4f} mIoU {s.miou:.4f}", lines)
        if label == "float32":
            table = format_scores(s, bundle.outputs.names)
            log(table, lines)
    no_rem = predict_cloud(load_model(full), PointCloud(target.points))
    s = segmentation_scores(target.labels, no_rem.labels, range(1, N_CLASSES + 1))
    results["float32_without_remission"] = scores_json(s, outputs().names)
    log(f"{what}, float32, remission withheld: acc {s.accuracy:.4f} mIoU {s.miou:.4f}", lines)
    scores = {"scan": target.name, "step": meta["training"]["steps_done"], "storage": storage, **results}
    meta = {**meta, "scores": scores}
    bundle = load_model(ship)
    save_model(bundle.model, ship, name=args.name, **{**save, "metadata": meta})
    (final / "scores.json").write_text(json.dumps(meta["scores"], indent=1) + "\n")
    (ship / "train.log").write_text("\n".join(lines) + "\n")
    (ship / "README.md").write_text(readme(args, meta, table, storage, lines))
    log(f"shipped bundle: {ship} ({storage})", lines)


def readme(args, meta: dict, table: str, storage: str, lines: list[str]) -> str:
    """The bundle's README: what it is, how it was made, its scores, its licence."""
    t, sc = meta["training"], meta["scores"]
    cmd = "\n    ".join(line[2:] for line in lines if line.startswith("$ ")) or "python " + " ".join(sys.argv)
    rows = "".join(
        f"| {k} | {v['overall_accuracy']:.3f} | {v['miou_present']:.3f} |\n"
        for k, v in sc.items()
        if isinstance(v, dict)
    )
    if rows:
        rows = "\n| weights | overall accuracy | mIoU |\n| --- | ---: | ---: |\n" + rows
    return (
        f"""# {args.name}

A MinkUNet14 (width {args.width}, {args.voxel_size} m voxels) for SemanticKITTI's 19 classes,
trained by `examples/train_semantickitti.py` (seed {args.seed}, {t["steps_done"]} of {t["total_steps"]} steps,
{t["train_seconds"] / 60:.1f} min of training on {mx.default_device()}) on {", ".join(t["train_scans"])}.
Weights stored as {storage}.

Scores on {sc["scan"] or "no scan yet"} (every point, as `lattice model-run` predicts it, float32 weights):

{table}
"""
        + rows
        + f"""
Inputs: a constant, normalised height, sub-voxel offsets, remission (`intensity` /
`remission`; clouds without it get the training mean) and a has-remission channel.
Training: batches of {args.batch} augmented scans (point dropout, rotation, mirror,
tilt, scale, jitter, instance-free mixing of two scans), class-weighted cross-entropy
plus {args.lovasz} × Lovász-softmax, AdamW with a cosine schedule. See `train.log` and
`docs/models.md`.

Commands (one per call; a run may span several resumed calls, see `train.log`):

    {cmd}

    lattice model-run {args.name} scan.bin -o labels.ply

Licence: the weights are derived from SemanticKITTI labels and KITTI scans
(CC BY-NC-SA 4.0 / 3.0). They ship as a test and benchmark artefact for non-commercial
research use, under the same terms; they are not part of lattice's MIT-licensed code.
"""
    )


def training_domain(data: Path, pre: Preprocessing, names: list[str] = TRAIN):
    """The statistics of the (unaugmented) training scans, as ``model.json`` records them."""
    return domain_stats([load_scan(data, n).cloud() for n in names], pre)


def output_folder(args: argparse.Namespace) -> Path:
    """``--output`` (or ``--resume``), else a new ``runs/minkunet14-<time>``; a non-empty
    folder needs ``--overwrite``, unless it is the one being resumed."""
    resume = getattr(args, "resume", None)
    out = args.output or resume or Path("runs") / f"minkunet14-{time.strftime('%Y%m%d-%H%M%S')}"
    same = resume is not None and Path(resume).resolve() == Path(out).resolve()
    if not same and out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
        sys.exit(
            f"train_semantickitti.py: {out} exists and is not empty; pass --overwrite to replace it (or --resume it)"
        )
    return out


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--data", type=Path, default=DATA, help="folder with the scans (read alone)")
    ap.add_argument(
        "--output", "--out", type=Path, default=None, help="run folder (default runs/minkunet14-<time>)"
    )
    ap.add_argument(
        "--resume", type=Path, default=None, help="continue from DIR/checkpoint (fresh start if none)"
    )
    ap.add_argument("--overwrite", action="store_true", help="replace a non-empty --output folder")
    ap.add_argument("--name", default="minkunet14-semantickitti", help="the shipped bundle's name")
    ap.add_argument("--steps", type=int, default=0, help="total steps (0: from --budget-minutes)")
    ap.add_argument(
        "--budget-minutes", type=float, default=15.0, help="training minutes in all, with --steps 0"
    )
    ap.add_argument("--timing-steps", type=int, default=10, help="steps timed for --budget-minutes")
    ap.add_argument("--minutes", type=float, default=8.0, help="wall minutes of this call")
    ap.add_argument(
        "--reserve", type=float, default=None, help="seconds kept for saving (default 60 cpu, 90 gpu)"
    )
    ap.add_argument(
        "--finish",
        action="store_true",
        help="finish (BatchNorm, bundles, scores) when this call stops, at any step",
    )
    ap.add_argument(
        "--ship",
        choices=("auto", "float32", "int8", "int4"),
        default="auto",
        help="the shipped bundle's storage (auto: the first of float32, int8, int4 at most 10 MB)",
    )
    ap.add_argument(
        "--stop-at", type=int, default=None, help="stop this call after this step (testing resume)"
    )
    ap.add_argument("--batch", type=int, default=None, help="scans per step (default 4 gpu, 2 cpu)")
    ap.add_argument("--width", type=int, default=32)
    ap.add_argument("--voxel-size", type=float, default=0.05)
    ap.add_argument("--stem-kernel", type=int, default=3)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--weight-decay", type=float, default=1e-4)
    ap.add_argument("--lovasz", type=float, default=1.0, help="weight of the Lovász-softmax term (0: off)")
    ap.add_argument("--point-dropout", type=float, default=0.2, help="largest fraction of points dropped")
    ap.add_argument("--mix", type=float, default=0.5, help="probability of mixing two scans")
    ap.add_argument("--remission-dropout", type=float, default=0.3)
    ap.add_argument("--tilt", type=float, default=1.0, help="std of the random roll / pitch (degrees)")
    ap.add_argument("--z-shift", type=float, default=0.1, help="std of the random height shift (m)")
    ap.add_argument("--bn-passes", type=int, default=30)
    ap.add_argument(
        "--val-scan", default=None, choices=TRAIN, help="leave this training scan out and score it"
    )
    ap.add_argument(
        "--eval-every", type=int, default=0, help="score --val-scan every N steps (0: at the end)"
    )
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if args.batch is None:
        args.batch = 4 if args.device == "gpu" else 2
    if args.reserve is None:
        args.reserve = 90.0 if args.device == "gpu" else 60.0
    args.output = output_folder(args)
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
    args.output.mkdir(parents=True, exist_ok=True)
    train(args)


if __name__ == "__main__":
    main()
