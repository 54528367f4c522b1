"""Train the shipped SemanticKITTI segmentation model (a small MinkUNet14) on the CPU.

    python examples/train_semantickitti.py          # ~12 min on 2 cores -> runs/minkunet14-<time>/
    python examples/train_semantickitti.py --steps 50 --output /tmp/quick       # a smoke run
    python examples/train_semantickitti.py --output examples/models/minkunet14-semantickitti --overwrite
                                                    # rebuild the shipped bundle (only when told so)

The bundle goes to a new folder ``runs/minkunet14-<YYYYmmdd-HHMMSS>/`` unless ``--output``
names one; an existing non-empty folder is refused unless ``--overwrite``, so a run never
replaces the shipped ``examples/models/minkunet14-semantickitti`` by default.

Data (``../shared/data/semantickitti``, see its SOURCES.md; SemanticKITTI, CC BY-NC-SA):

- train: ``kitti_01_points_00000{0,1,2}.npy`` (sequence 01, highway) and
  ``demo_points_0007{00,50}.npy`` (urban), xyz only, with their ``*_labels_*.npy``
  learning ids (0 = unlabeled, 1..19 the classes);
- held out: ``seq00_000000.bin`` (sequence 00, urban, 123,389 points) with its raw
  ``.label`` ids mapped to learning ids by ``LEARNING_MAP`` below. It is never trained
  on; it is scored every ``--eval-every`` steps for the log only (the shipped model is
  the last step, not the best one on the held-out scan).

The training scans carry no remission, so the input features are geometric only: a
constant, the height ``z`` (normalised with the training mean / std) and the mean
offset of the voxel's points from its centre (``x_local``, ``y_local``, ``z_local``).
Each step takes one training scan, augmented (random rotation about z, mirror, scale
0.95-1.05, a random sub-voxel shift of the grid, a small height shift), voxelizes it at
0.1 m, gives every voxel the majority label of its points, and takes an AdamW step on
the class-weighted cross-entropy (weights ``(frequency)^-0.5``, normalised), with a
cosine learning-rate decay. Seeds are fixed (``--seed``); the log is written next to
the bundle (``train.log``). Only lattice and MLX (``mlx.optimizers``,
``nn.value_and_grad``) are used.

At the end the bundle records its training domain (``model.json``'s ``domain``:
statistics of the unaugmented training scans, ``lattice.models.domain_stats``), which
``lattice model-run`` compares every input with, and each class's ASPRS LAS code
(``CLASSES`` below; ``--to-classification``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from lattice import ops
from lattice.io import PointCloud, read_points
from lattice.models import (
    ClassInfo,
    Domain,
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

DATA = Path(__file__).resolve().parents[1].parent / "shared/data/semantickitti"


def _portable(path: Path) -> str:
    """A path as recorded in the bundle: relative to the checkout when it lies beside it."""
    base = Path(__file__).resolve().parents[1]
    try:
        return os.path.relpath(path.resolve(), base)
    except ValueError:
        return str(path)


SHIPPED = Path(__file__).resolve().parent / "models/minkunet14-semantickitti"
TRAIN = ["kitti_01_000000", "kitti_01_000001", "kitti_01_000002", "demo_000700", "demo_000750"]
HELD_OUT = "seq00_000000"

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


def load_train(data: Path, names: list[str] = TRAIN) -> list[tuple[np.ndarray, np.ndarray]]:
    """(points float32 (N, 3), learning ids int32 (N,)) of every training scan ``names``."""
    scans = []
    for name in names:
        prefix, number = name.rsplit("_", 1)
        pts = np.load(data / f"{prefix}_points_{number}.npy", allow_pickle=False).astype(np.float32)
        lab = np.load(data / f"{prefix}_labels_{number}.npy", allow_pickle=False).reshape(-1).astype(np.int32)
        scans.append((pts, lab))
    return scans


def load_held_out(data: Path):
    """The held-out scan as a PointCloud (x, y, z, intensity) and its learning ids."""
    cloud = read_points(data / f"{HELD_OUT}.bin")
    raw = np.fromfile(data / f"{HELD_OUT}.label", dtype=np.uint32)
    return cloud, raw_to_learning(raw)


def augment(pts: np.ndarray, rng: np.random.Generator, args: argparse.Namespace) -> np.ndarray:
    """Rotation about z, mirror in y, tilt, scale, sub-voxel grid shift and a height shift."""
    a = rng.uniform(0, 2 * np.pi)
    c, s = np.cos(a), np.sin(a)
    rot = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
    if rng.random() < 0.5:
        rot = rot @ np.diag([1.0, -1.0, 1.0])
    tx, ty = np.radians(rng.normal(0, args.tilt, size=2))
    tilt_x = np.array([[1, 0, 0], [0, np.cos(tx), -np.sin(tx)], [0, np.sin(tx), np.cos(tx)]])
    tilt_y = np.array([[np.cos(ty), 0, np.sin(ty)], [0, 1, 0], [-np.sin(ty), 0, np.cos(ty)]])
    out = pts.astype(np.float64) @ (tilt_x @ tilt_y @ rot).T * rng.uniform(0.95, 1.05)
    out[:, :2] += rng.uniform(0, args.voxel_size, size=2)
    out[:, 2] += rng.normal(0, args.z_shift)
    return out


def voxel_batch(pts: np.ndarray, labels: np.ndarray, pre: Preprocessing, batch: np.ndarray | None = None):
    """The network input for ``pts`` and the majority learning id of every voxel (0 only if all 0)."""
    feats = point_features(pts, {}, pre)
    x, index = ops.voxelize(
        pts, mx.array(feats), pre.voxel_size, origin=pre.origin, batch_indices=batch, return_index=True
    )
    inv = np.asarray(index).astype(np.int64)
    votes = np.bincount(inv * (N_CLASSES + 1) + labels, minlength=x.active_count * (N_CLASSES + 1))
    votes = votes.reshape(-1, N_CLASSES + 1)
    votes[:, 0] = np.where(votes[:, 1:].sum(axis=1) > 0, 0, votes[:, 0])
    return x, mx.array(votes.argmax(axis=1).astype(np.int32))


def sample_batch(scans, rng: np.random.Generator, args: argparse.Namespace, pre: Preprocessing):
    """One augmented highway scan (kitti_01) and one urban scan (demo), collated as batch 0 and 1.

    Both scene types in every step keep BatchNorm's batch statistics close to the
    running statistics used at inference.
    """
    picks = [scans[rng.integers(3)], scans[3 + rng.integers(2)]]
    pts = np.concatenate([augment(p, rng, args) for p, _ in picks])
    labels = np.concatenate([lab for _, lab in picks])
    batch = np.repeat(np.arange(len(picks)), [len(p) for p, _ in picks])
    return voxel_batch(pts, labels, pre, batch)


def recalibrate_batch_norm(model, scans, rng, args, pre, passes: int) -> None:
    """Precise BatchNorm: replace the running statistics by their average over ``passes``
    augmented training batches (forward passes only, cumulative average)."""
    norms = [m for _, m in model.named_modules() if isinstance(m, nn.BatchNorm)]
    model.train()
    for i in range(passes):
        for m in norms:
            m.momentum = 1.0 / (i + 1)
        x, _ = sample_batch(scans, rng, args, pre)
        mx.eval(model(x).feats, [(m.running_mean, m.running_var) for m in norms])
    for m in norms:
        m.momentum = 0.1
    model.eval()


def class_weights(scans) -> mx.array:
    """``frequency^-0.5`` over the training points, normalised to mean 1 over the classes seen."""
    counts = np.bincount(np.concatenate([lab for _, lab in scans]), minlength=N_CLASSES + 1)[1:]
    w = np.where(counts > 0, 1.0 / np.sqrt(np.maximum(counts, 1)), 0.0)
    return mx.array((w / w[counts > 0].mean()).astype(np.float32))


def preprocessing(scans, voxel: float) -> Preprocessing:
    """Features: a constant, z normalised with the training statistics, sub-voxel offsets."""
    z = np.concatenate([p[:, 2] for p, _ in scans]).astype(np.float64)
    return Preprocessing(
        (voxel,) * 3,
        (
            FeatureSpec("ones"),
            FeatureSpec("z", round(float(z.mean()), 4), round(float(z.std()), 4)),
            FeatureSpec("x_local"),
            FeatureSpec("y_local"),
            FeatureSpec("z_local"),
        ),
    )


def outputs() -> Outputs:
    """The 19 SemanticKITTI classes (logit k = learning id k + 1), 0 = unlabeled."""
    return Outputs(
        tuple(ClassInfo(i, name, color, code) for i, (name, color, code) in CLASSES.items()),
        ClassInfo(0, "unlabeled", (0, 0, 0), IGNORE_ASPRS),
    )


def training_domain(data: Path, pre: Preprocessing, names: list[str] = TRAIN) -> Domain:
    """The statistics of the (unaugmented) training scans, as ``model.json`` records them."""
    return domain_stats([PointCloud(points) for points, _ in load_train(data, names)], pre)


def output_folder(args: argparse.Namespace) -> Path:
    """``--output``, or a new ``runs/minkunet14-<time>``; a non-empty folder needs ``--overwrite``."""
    out = args.output or Path("runs") / f"minkunet14-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not args.overwrite:
        sys.exit(f"train_semantickitti.py: {out} exists and is not empty; pass --overwrite to replace it")
    return out


def evaluate(model, pre: Preprocessing, cloud, truth: np.ndarray) -> tuple[float, float]:
    """(overall accuracy, mIoU over present classes) on the held-out scan, nearest mapping."""
    model.eval()
    x, index = ops.voxelize(
        cloud.points, mx.array(point_features(cloud.points, {}, pre)), pre.voxel_size, return_index=True
    )
    pred = np.asarray(mx.argmax(model(x).feats, axis=1))[np.asarray(index)] + 1
    model.train()
    s = segmentation_scores(truth, pred, range(1, N_CLASSES + 1))
    return s.accuracy, s.miou


def train(args: argparse.Namespace, lines: list[str]):
    """Fit the network; returns (model, preprocessing, wall seconds)."""
    mx.random.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    scans = load_train(args.data)
    cloud, truth = load_held_out(args.data)
    pre = preprocessing(scans, args.voxel_size)
    weights = class_weights(scans)
    model = minkunet(14, len(pre.features), N_CLASSES, width=args.width, stem_kernel=args.stem_kernel)
    schedule = optim.cosine_decay(args.lr, args.steps, args.lr * 0.01)
    optimizer = optim.AdamW(learning_rate=schedule, weight_decay=1e-4)
    log(f"train {TRAIN}, held out {HELD_OUT}; {json.dumps(pre.to_json())}", lines)

    def loss_fn(model, x, y):
        logits = model(x).feats
        valid = y > 0
        target = mx.maximum(y - 1, 0)
        ce = nn.losses.cross_entropy(logits, target, reduction="none") * weights[target]
        return mx.sum(mx.where(valid, ce, 0.0)) / mx.maximum(
            mx.sum(mx.where(valid, weights[target], 0.0)), 1e-6
        )

    step = nn.value_and_grad(model, loss_fn)
    start = time.perf_counter()
    running = []
    for i in range(args.steps):
        x, y = sample_batch(scans, rng, args, pre)
        loss, grads = step(model, x, y)
        optimizer.update(model, grads)
        mx.eval(loss, model.parameters(), optimizer.state)
        running.append(float(loss))
        if (i + 1) % args.eval_every == 0 or i + 1 == args.steps:
            acc, miou = evaluate(model, pre, cloud, truth)
            log(
                f"step {i + 1:4d}  loss {np.mean(running):.4f}  held-out acc {acc:.3f} mIoU {miou:.3f}  "
                f"{time.perf_counter() - start:6.1f} s",
                lines,
            )
            running = []
    recalibrate_batch_norm(model, scans, rng, args, pre, args.bn_passes)
    acc, miou = evaluate(model, pre, cloud, truth)
    log(
        f"after BatchNorm recalibration ({args.bn_passes} passes): held-out acc {acc:.3f} mIoU {miou:.3f}",
        lines,
    )
    return model, pre, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument(
        "--output", "--out", type=Path, default=None, help="bundle folder (default: runs/minkunet14-<time>)"
    )
    ap.add_argument("--overwrite", action="store_true", help="replace a non-empty --output folder")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--bn-passes", type=int, default=30)
    ap.add_argument("--voxel-size", type=float, default=0.1)
    ap.add_argument("--width", type=int, default=8, help="MinkUNet width (32 in the paper)")
    ap.add_argument("--stem-kernel", type=int, default=3)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--z-shift", type=float, default=0.2, help="std of the random height shift (m)")
    ap.add_argument("--tilt", type=float, default=1.0, help="std of the random roll / pitch (degrees)")
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.output = output_folder(args)
    lines: list[str] = []
    model, pre, seconds = train(args, lines)
    log(f"trained {args.steps} steps in {seconds:.0f} s", lines)
    meta = {
        "training": {
            "script": "examples/train_semantickitti.py",
            "arguments": {
                k: _portable(v) if isinstance(v, Path) else v
                for k, v in vars(args).items()
                if k not in ("output", "overwrite")
            },
            "train_scans": TRAIN,
            "held_out": HELD_OUT,
            "wall_seconds": round(seconds, 1),
        },
        "license": "weights trained on SemanticKITTI (CC BY-NC-SA 4.0): research / test use only",
    }
    domain = training_domain(args.data, pre)
    save = dict(preprocessing=pre, outputs=outputs(), name=args.output.name, domain=domain)
    save_model(model, args.output, **save, metadata=meta)
    bundle = load_model(args.output)  # score the bundle as users get it: every point of the held-out scan
    cloud, truth = load_held_out(args.data)
    pred = predict_cloud(bundle, cloud)
    scores = segmentation_scores(truth, pred.labels, range(1, N_CLASSES + 1))
    log(format_scores(scores, bundle.outputs.names), lines)
    meta["held_out_scores"] = {
        "overall_accuracy": round(scores.accuracy, 4),
        "miou_present": round(scores.miou, 4),
        "iou": {bundle.outputs.names[k]: round(float(scores.iou[k]), 4) for k in scores.present()},
    }
    save_model(model, args.output, **save, metadata=meta)
    (args.output / "train.log").write_text("\n".join(lines) + "\n")
    (args.output / "README.md").write_text(readme(args, scores, bundle.outputs.names, seconds))


def readme(args: argparse.Namespace, scores, names, seconds: float) -> str:
    """The bundle's README: what it is, how it was made, its held-out scores, its licence."""
    return f"""# {args.output.name}

A MinkUNet14 (width {args.width}, {args.voxel_size} m voxels) for SemanticKITTI's 19 classes,
trained by `examples/train_semantickitti.py` (seed {args.seed}, {args.steps} steps,
{seconds / 60:.1f} min on the CPU) on {", ".join(TRAIN)} and scored on the held-out
{HELD_OUT} (every point, as `lattice model-run` predicts it):

{format_scores(scores, names)}

Inputs: x, y, z only (a constant, normalised height, sub-voxel offsets); the training
scans have no remission. See `docs/models.md` for what limits it.

    lattice model-run {args.output.name} scan.bin -o labels.ply

Licence: the weights are derived from SemanticKITTI labels and KITTI scans
(CC BY-NC-SA 4.0 / 3.0). They ship as a test and benchmark artefact for non-commercial
research use, under the same terms; they are not part of lattice's MIT-licensed code.
"""


if __name__ == "__main__":
    main()
