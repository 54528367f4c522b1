"""Train the aerial LiDAR ground / non-ground model (a small MinkUNet14) on the CPU.

    python examples/train_aerial.py --output runs/aerial          # ~10 min on 2 cores
    python examples/train_aerial.py --steps 4 --output /tmp/a     # a smoke run
    python examples/train_aerial.py --output examples/models/minkunet14-aerial-ground --overwrite
    python examples/train_aerial.py --evaluate examples/models/minkunet14-aerial-ground   # scores only

Data (``../shared/data``, see its SOURCES.md; ``--data`` names that folder):

- train: ``aerial_lidar/autzen_trim.las`` (Oregon, feet, converted to metres),
  ``aerial_lidar/pdal_extra/hexbin-crop.las`` (UTM, metres), ``pdal_extra/4_6_crop.las``
  (US survey feet, converted), and IGN LiDAR HD tiles of ``aerial_lidar/ign_lidarhd/``
  (Lambert-93, metres): ``Semis_2022_...``, ``las_with_several_extra_byte_bloc`` and the
  six ``test_data_*`` tiles, ``test_semis_2021_...``. Labels from the ASPRS
  ``classification``: 2 = ground; 1, 3-6, 14, 17 and IGN's 64-67 = non-ground; 0, 7, 9,
  12, 18 and others ignored.
- held out (never trained on, scored once at the end): ``isprs_terrain/samp11-utm.pcd``
  (ISPRS filter test site 1 sample 11; ground = its points that are in
  ``samp11-utm-ground.pcd``), and four more airborne scans from other sites:
  ``aerial_lidar/simple.las`` (feet), ``pdal_extra/sample_c.las``, ``pdal_extra/warsaw_small.las``
  and IGN's ``St_Barth_...`` tile (Saint-Barthélemy, Caribbean; its unclassified points,
  left at ground height by its producer, are not scored). ``--hold-out FILE`` moves a
  training tile to the held-out scans.

Inputs (``model.json`` ``preprocessing``; ``lattice model-run`` computes them the same
way): a constant, ``z_local``, the height above the lowest point of the surrounding
30 m, 8 m and 3 m cells (``height_above_min``; the 3 m one still separates ground on
steep sites), the planarity of the 3 m cell (``planarity``), ``return_number`` and
``number_of_returns`` (1 where a cloud has none) and whether the cloud has returns; a
window is shown without its returns with probability ``--returns-dropout`` (0.3), so an
xyz-only scan is not an input the model never saw. No absolute coordinate. **Coordinates must be in metres**: a scan in
feet (autzen) has heights 3.3 times too large for the model.

Each step takes ``--batch`` tiles, each a random square window of ``--window`` metres,
thinned to a random density (keep ``--thin`` 5 % to 100 % of the points, log-uniform; the
tiles hold 0.07 to 35 points per m²), rotated, mirrored,
scaled 0.95-1.05; voxels of 1 m x 1 m x 0.5 m take the majority label of their points.
Class-weighted cross-entropy plus Lovász-softmax, AdamW, cosine schedule, then precise
BatchNorm. Scores: ground / non-ground accuracy and the ISPRS filter-test errors, Type I
(ground called non-ground / ground), Type II (non-ground called ground / non-ground) and
total, on every held-out scan.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import NamedTuple

import mlx.core as mx
import mlx.nn as nn
import mlx.optimizers as optim
import numpy as np

from lattice import ops
from lattice.io import PointCloud, read_points
from lattice.models import (
    ClassInfo,
    FeatureSpec,
    Outputs,
    Preprocessing,
    domain_stats,
    load_model,
    minkunet,
    point_features,
    predict_cloud,
    save_model,
)
from lattice.models.losses import lovasz_softmax, weighted_cross_entropy

DATA = Path(__file__).resolve().parents[1].parent / "shared/data"
FOOT, US_FOOT = 0.3048, 1200 / 3937
TRAIN = {
    "aerial_lidar/autzen_trim.las": FOOT,
    "aerial_lidar/pdal_extra/hexbin-crop.las": 1.0,
    "aerial_lidar/pdal_extra/4_6_crop.las": US_FOOT,
    "aerial_lidar/ign_lidarhd/Semis_2022_0906_6665_LA93_IGN69_ok.laz": 1.0,
    "aerial_lidar/ign_lidarhd/las_with_several_extra_byte_bloc.laz": 1.0,
    "aerial_lidar/ign_lidarhd/test_semis_2021_0382_6565_LA93_IGN69_cropped.laz": 1.0,
    **{
        f"aerial_lidar/ign_lidarhd/test_data_{t}_LA93_IGN69.laz": 1.0
        for t in (
            "77050_627755",
            "77050_627760",
            "77055_627755",
            "77055_627760",
            "77060_627755",
            "77060_627760",
        )
    },
}
HELD_OUT = {
    "isprs_terrain/samp11-utm.pcd": 1.0,
    "aerial_lidar/simple.las": FOOT,
    "aerial_lidar/pdal_extra/sample_c.las": 1.0,
    "aerial_lidar/pdal_extra/warsaw_small.las": 1.0,
    "aerial_lidar/ign_lidarhd/St_Barth_RGAF09_UTM20N_IGN_1988_SB_subset_100m.laz": 1.0,
}
# Codes a file's producer left unjudged. St_Barth's 114,784 "unclassified" (1) points lie at
# ground height (median 2.66 m against its ground's 2.53 m): its ground was never finished,
# so they are neither ground nor non-ground there (autzen's 1 is everything not ground).
UNJUDGED = {"St_Barth_RGAF09_UTM20N_IGN_1988_SB_subset_100m.laz": (1,)}
GROUND, NON_GROUND = 1, 2
NON_GROUND_CODES = (1, 3, 4, 5, 6, 14, 17, 64, 65, 66, 67)
CLASSES = {GROUND: ("ground", (170, 110, 40), 2), NON_GROUND: ("non-ground", (40, 160, 60), 1)}
VOXEL = (1.0, 1.0, 0.5)


class Scan(NamedTuple):
    name: str
    points: np.ndarray  # float64 (N, 3), metres
    attributes: dict
    labels: np.ndarray  # int32: 0 ignore, 1 ground, 2 non-ground


def load(data: Path, rel: str, factor: float) -> Scan:
    """A scan in metres with its ground / non-ground labels."""
    cloud = read_points(data / rel)
    pts = np.asarray(cloud.points, np.float64) * factor
    attrs = {
        k: np.asarray(cloud.attributes[k])
        for k in ("return_number", "number_of_returns")
        if k in cloud.attributes
    }
    if rel.endswith("samp11-utm.pcd"):
        ground = np.asarray(read_points(data / "isprs_terrain/samp11-utm-ground.pcd").points, np.float64)
        key = lambda p: np.round(p * 100).astype(np.int64)  # noqa: E731  (cm: the files share coordinates)
        gset = {tuple(r) for r in key(ground)}
        labels = np.array([GROUND if tuple(r) in gset else NON_GROUND for r in key(pts)], np.int32)
    else:
        cls = np.asarray(cloud.attributes["classification"]).astype(np.int64)
        non_ground = np.isin(cls, NON_GROUND_CODES) & ~np.isin(cls, UNJUDGED.get(rel.rsplit("/", 1)[-1], ()))
        labels = np.where(cls == 2, GROUND, np.where(non_ground, NON_GROUND, 0)).astype(np.int32)
    return Scan(rel.rsplit("/", 1)[-1], pts, attrs, labels)


def split(hold_out: list[str]) -> tuple[dict, dict]:
    """TRAIN less the ``--hold-out`` tiles, and HELD_OUT with them first."""
    names = {rel.rsplit("/", 1)[-1]: rel for rel in TRAIN}
    unknown = [n for n in hold_out if n not in names]
    if unknown:
        sys.exit(f"train_aerial.py: --hold-out {unknown[0]} is not a training tile ({', '.join(names)})")
    out = {names[n]: TRAIN[names[n]] for n in hold_out}
    return {r: f for r, f in TRAIN.items() if r not in out}, {**out, **HELD_OUT}


def preprocessing() -> Preprocessing:
    ret = ("return_number", "number_of_returns")
    return Preprocessing(
        VOXEL,
        (
            FeatureSpec("ones"),
            FeatureSpec("z_local"),
            FeatureSpec("height_above_min", 3.0, 5.0, scale=30.0),
            FeatureSpec("height_above_min", 1.0, 3.0, scale=8.0),
            FeatureSpec("height_above_min", 0.5, 1.0, scale=3.0),  # slope-robust: steep sites
            FeatureSpec("planarity", 0.5, 0.3, scale=3.0),
            FeatureSpec(ret[0], 1.2, 0.5, missing=1.0),
            FeatureSpec(ret[1], 1.4, 0.8, missing=1.0),
            FeatureSpec(ret[0], indicator=True),
        ),
    )


def outputs() -> Outputs:
    return Outputs(
        tuple(ClassInfo(i, n, c, code) for i, (n, c, code) in CLASSES.items()),
        ClassInfo(0, "unlabeled", (0, 0, 0), 0),
    )


def sample(scan: Scan, rng: np.random.Generator, args):
    """A random window of ``scan``, thinned, rotated, mirrored and scaled: (points, attributes, labels)."""
    pts = scan.points
    lo, hi = pts[:, :2].min(axis=0), pts[:, :2].max(axis=0)
    corner = lo + rng.uniform(0, 1, 2) * np.maximum(hi - lo - args.window, 0)
    keep = ((pts[:, :2] >= corner) & (pts[:, :2] < corner + args.window)).all(axis=1)
    keep &= rng.random(len(pts)) < np.exp(rng.uniform(np.log(args.thin), 0))
    if keep.sum() < 50:
        keep = rng.random(len(pts)) < min(1.0, 20000 / len(pts))
    p = pts[keep] - [*(corner + args.window / 2), 0.0]
    a = rng.uniform(0, 2 * np.pi)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    if rng.random() < 0.5:
        rot = rot @ np.diag([1.0, -1.0])
    xy = np.stack([p[:, 0] * rot[0, j] + p[:, 1] * rot[1, j] for j in range(2)], axis=1)
    p = np.column_stack([xy, p[:, 2] - p[:, 2].min()]) * rng.uniform(0.95, 1.05)
    p[:, :2] += rng.uniform(0, 1, 2)
    attrs = {k: v[keep] for k, v in scan.attributes.items()}
    if rng.random() < args.returns_dropout:  # as a scan without returns (xyz only) shows them
        attrs = {}
    return p, attrs, scan.labels[keep]


def batch(scans, rng, args, pre):
    parts = [sample(scans[rng.integers(len(scans))], rng, args) for _ in range(args.batch)]
    feats = np.concatenate([point_features(p, a, pre) for p, a, _ in parts])
    pts = np.concatenate([p for p, _, _ in parts]).astype(np.float32)
    lab = np.concatenate([lab for _, _, lab in parts])
    b = np.repeat(np.arange(len(parts), dtype=np.int32), [len(p) for p, _, _ in parts])
    x, index = ops.voxelize(pts, mx.array(feats), pre.voxel_size, batch_indices=b, return_index=True)
    inv = np.asarray(index).astype(np.int64)
    votes = np.bincount(inv * 3 + lab, minlength=x.active_count * 3).reshape(-1, 3)
    votes[:, 0] = np.where(votes[:, 1:].sum(axis=1) > 0, 0, votes[:, 0])
    return x, votes.argmax(axis=1).astype(np.int32)


def filter_scores(truth: np.ndarray, pred: np.ndarray) -> dict:
    """Accuracy and the ISPRS filter-test errors over the labelled points."""
    m = truth > 0
    t, p = truth[m], pred[m]
    g, ng = t == GROUND, t == NON_GROUND
    type1 = float(((p != GROUND) & g).sum() / max(g.sum(), 1))
    type2 = float(((p == GROUND) & ng).sum() / max(ng.sum(), 1))
    acc = float((p == t).mean())
    pg = float((p == GROUND).mean())
    chance = g.mean() * pg + ng.mean() * (1 - pg)  # Cohen's kappa, as Pingel et al. report SMRF
    kappa = (acc - chance) / (1 - chance) if chance < 1 else 0.0
    return {
        "points": int(m.sum()),
        "ground": int(g.sum()),
        "accuracy": round(acc, 4),
        "kappa": round(float(kappa), 4),
        "type_I": round(type1, 4),
        "type_II": round(type2, 4),
        "total_error": round(float((p != t).mean()), 4),
    }


def recalibrate(model, scans, rng, args, pre, passes: int) -> None:
    norms = [m for _, m in model.named_modules() if isinstance(m, nn.BatchNorm)]
    model.train()
    for i in range(passes):
        for m in norms:
            m.momentum = 1.0 / (i + 1)
        x, _ = batch(scans, rng, args, pre)
        mx.eval(model(x).feats, [(m.running_mean, m.running_var) for m in norms])
    for m in norms:
        m.momentum = 0.1
    model.eval()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--output", type=Path, default=None)
    ap.add_argument("--overwrite", action="store_true")
    ap.add_argument("--name", default="minkunet14-aerial-ground")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--minutes", type=float, default=10.0, help="stop training after this many minutes")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--window", type=float, default=120.0, help="side of the training windows (m)")
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--lovasz", type=float, default=1.0)
    ap.add_argument(
        "--returns-dropout",
        type=float,
        default=0.3,
        help="probability that a window is shown without returns",
    )
    ap.add_argument(
        "--hold-out",
        action="append",
        default=[],
        metavar="FILE",
        help="leave this training tile (its file name) out of training and score it with the held-out scans",
    )
    ap.add_argument(
        "--thin",
        type=float,
        default=0.05,
        help="smallest fraction of a window's points kept (log-uniform up to 1)",
    )
    ap.add_argument("--bn-passes", type=int, default=20)
    ap.add_argument("--log-every", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--evaluate", type=Path, default=None, help="only score this bundle on the held-out scans"
    )
    ap.add_argument("--update", action="store_true", help="with --evaluate: write the scores into the bundle")
    args = ap.parse_args()
    train, held_out = split(args.hold_out)
    if args.evaluate is not None:
        bundle = load_model(args.evaluate)
        scores = {}
        trained = set(bundle.metadata.get("training", {}).get("train_scans", TRAIN))
        for rel, f in {**TRAIN, **HELD_OUT}.items():
            if rel in trained:
                continue
            s = load(args.data, rel, f)
            t0 = time.perf_counter()
            pred = predict_cloud(bundle, PointCloud(s.points, s.attributes))
            ms = 1e3 * (time.perf_counter() - t0)
            scores[s.name] = filter_scores(s.labels, pred.labels)
            print(f"{s.name}: {json.dumps(scores[s.name])} ({ms:.0f} ms)")
        if args.update:  # the scores into model.json and README (weights untouched)
            meta, t = dict(bundle.metadata), bundle.metadata["training"]
            meta["held_out_scores"] = scores
            doc = json.loads((args.evaluate / "model.json").read_text())
            doc["metadata"] = meta
            (args.evaluate / "model.json").write_text(json.dumps(doc, indent=2) + "\n")
            load_model(args.evaluate, require_checksum=True)
            run = argparse.Namespace(**{**t["arguments"], "name": bundle.name})
            (args.evaluate / "README.md").write_text(readme(run, scores, t["steps"], t["wall_seconds"]))
        return
    out = args.output or Path("runs") / f"aerial-{time.strftime('%Y%m%d-%H%M%S')}"
    if out.exists() and any(out.iterdir()) and not args.overwrite:
        sys.exit(f"train_aerial.py: {out} exists and is not empty; pass --overwrite to replace it")
    mx.random.seed(args.seed)
    rng = np.random.default_rng(args.seed)
    lines: list[str] = []

    def log(msg: str) -> None:
        print(msg, flush=True)
        lines.append(msg)

    log("$ python " + " ".join(sys.argv))
    scans = [load(args.data, rel, f) for rel, f in train.items()]
    pre = preprocessing()
    counts = np.bincount(np.concatenate([s.labels for s in scans]), minlength=3)[1:]
    w = 1.0 / np.sqrt(np.maximum(counts, 1))
    weights = mx.array((w / w.mean()).astype(np.float32))
    log(f"train {[s.name for s in scans]}: ground {counts[0]:,}, non-ground {counts[1]:,} points")
    model = minkunet(14, len(pre.features), 2, width=args.width, stem_kernel=3)
    sched = optim.cosine_decay(args.lr, args.steps, args.lr * 0.01)
    opt = optim.AdamW(learning_rate=sched, weight_decay=1e-4)

    def loss_fn(model, x, y, rows):
        logits = mx.take(model(x).feats, rows, axis=0)
        ce = weighted_cross_entropy(logits, y, weights)
        return ce + args.lovasz * lovasz_softmax(mx.softmax(logits, axis=-1), y)

    step_fn = nn.value_and_grad(model, loss_fn)
    start, running, done = time.perf_counter(), [], 0
    for i in range(args.steps):
        if time.perf_counter() - start > args.minutes * 60:
            log(f"--minutes {args.minutes} reached at step {i}")
            break
        x, y = batch(scans, rng, args, pre)
        rows = np.flatnonzero(y > 0).astype(np.int32)
        loss, grads = step_fn(model, x, mx.array(y[rows] - 1), mx.array(rows))
        opt.update(model, grads)
        mx.eval(loss, model.parameters(), opt.state)
        running.append(float(loss))
        done = i + 1
        if done % args.log_every == 0:
            log(
                f"step {done:4d}  loss {np.mean(running):.4f}  {x.active_count:,} voxels  {time.perf_counter() - start:5.0f} s"
            )
            running = []
    seconds = time.perf_counter() - start
    recalibrate(model, scans, rng, args, pre, args.bn_passes)
    log(f"trained {done} steps in {seconds:.0f} s; BatchNorm recalibrated over {args.bn_passes} batches")
    domain = domain_stats([PointCloud(s.points, s.attributes) for s in scans], pre)
    meta = {
        "training": {
            "script": "examples/train_aerial.py",
            "arguments": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "train_scans": list(train),
            "unit_factors": {**TRAIN, **HELD_OUT},
            "held_out": list(held_out),
            "steps": done,
            "wall_seconds": round(seconds, 1),
        },
        "license": "trained on PDAL test data (BSD), IGN LiDAR HD tiles (Etalab 2.0 open data, via IGNF repositories, MIT code)",
    }
    save = dict(preprocessing=pre, outputs=outputs(), name=args.name, domain=domain)
    save_model(model, out, **save, metadata=meta)
    bundle = load_model(out)
    scores = {}
    for rel, f in held_out.items():
        s = load(args.data, rel, f)
        pred = predict_cloud(bundle, PointCloud(s.points, s.attributes))
        scores[s.name] = filter_scores(s.labels, pred.labels)
        log(f"held-out {s.name}: {json.dumps(scores[s.name])}")
    meta["held_out_scores"] = scores
    save_model(model, out, **save, metadata=meta)
    (out / "train.log").write_text("\n".join(lines) + "\n")
    (out / "README.md").write_text(readme(args, scores, done, seconds))


def readme(args, scores: dict, steps: int, seconds: float) -> str:
    rows = "".join(
        f"| {n} | {s['points']:,} | {s['accuracy']:.3f} | {s['kappa']:.3f} | {s['type_I']:.3f} | {s['type_II']:.3f} | {s['total_error']:.3f} |\n"
        for n, s in scores.items()
    )
    hold = list(getattr(args, "hold_out", []) or [])
    flags = "".join(f" --hold-out {h}" for h in hold)
    if getattr(args, "thin", 0.05) != 0.05:
        flags += f" --thin {args.thin:g}"
    held = f"; {', '.join(hold)} was left out of them and scored" if hold else ""
    return f"""# {args.name}

Ground / non-ground for airborne LiDAR: a MinkUNet14 (width {args.width}, voxels
{VOXEL[0]} x {VOXEL[1]} x {VOXEL[2]} m), trained by `examples/train_aerial.py` (seed
{args.seed}, {steps} steps, {seconds / 60:.1f} min on 2 CPU cores) on {len(TRAIN) - len(hold)} tiles
from Oregon (autzen), two other PDAL test sites and IGN LiDAR HD (France){held}; every
step is in `train.log`. The command:

    python examples/train_aerial.py --output OUT --steps {args.steps} --batch {args.batch} --window {args.window:g} --minutes {args.minutes:g}{flags}

Scans it never trained on (every labelled point, as `lattice model-run` predicts it;
Type I = ground called non-ground / ground, Type II = non-ground called ground /
non-ground, as in the ISPRS filter test; St_Barth's unclassified points, left at ground
height by its producer, are not scored):

| scan | points | accuracy | kappa | Type I | Type II | total error |
| --- | ---: | ---: | ---: | ---: | ---: | ---: |
{rows}
Inputs: a constant, the sub-voxel height, the height above the lowest point of the
surrounding 30 m, 8 m and 3 m cells, the planarity of the 3 m cell, and the return number
and count where the file has them (windows were shown without them, so xyz-only scans
are inputs it has seen). No absolute coordinate, so the site does not matter; **the units
do: coordinates must be metres** (convert feet first).

    lattice model-run {args.name} tile.laz -o out.laz --to-classification   # ASPRS 2 ground, 1 other

What limits it: a dozen training tiles from a handful of sites. It is reliable on IGN-like
tiles (St_Barth) and unreliable on sites unlike them: steep terrain (samp11), very sparse
scans (simple.las), roofs filling a small tile (sample_c); see `docs/models.md`.

Licence: trained on PDAL's test data (BSD) and IGN LiDAR HD tiles (IGN open data,
Etalab 2.0, as published in IGNF's MIT-licensed repositories); the ISPRS samp11 scan
used for scoring only. The weights are a test and benchmark artefact.
"""


if __name__ == "__main__":
    main()
