"""Score a SemanticKITTI segmentation bundle, end to end as model-run runs it; leave-one-scan-out tables.

    python examples/evaluate_segmentation.py [BUNDLE] [--scan NAME ...] [--quantize 8] [--confusion] [--json F]
    python examples/evaluate_segmentation.py --loso runs/loso --steps 200 -- --width 8 --voxel-size 0.1
    python examples/evaluate_segmentation.py --loso runs/loso --table-only

Scoring (default): each ``--scan`` (default the held-out ``seq00_000000``; any scan of
``train_semantickitti.py``'s list, ``.bin`` + ``.label`` or ``.npy`` pairs) is read as
``lattice model-run`` reads it (``.bin``: ``lattice.io.read_points``, remission included),
predicted with ``lattice.models.predict_cloud``, its raw ``.label`` ids mapped to learning
ids (``LEARNING_MAP``), and scored: per-class IoU over the classes present in the truth,
mIoU and overall accuracy over the labelled points (truth 0 = unlabeled is left out); then
the time of each stage. ``--no-remission`` withholds the remission (what the model does
on an xyz-only cloud).

Leave-one-scan-out (``--loso DIR``): for every training scan NAME (or those of ``--folds``),
``train_semantickitti.py --val-scan NAME --output DIR/fold-NAME --steps S`` plus the
arguments after ``--``, unless that fold already has ``final/scores.json`` (so the folds
can be run elsewhere, e.g. on the GPU, and tabulated here); then one table: per fold the
accuracy and mIoU on the scan left out, and per class the IoU over the folds where the
class is present. The held-out scan is never looked at.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from train_semantickitti import DATA, HELD_OUT, N_CLASSES, SHIPPED, TRAIN, load_scan

from lattice.io import PointCloud
from lattice.models import format_scores, load_model, predict_cloud, segmentation_scores

HERE = Path(__file__).resolve().parent


def score(bundle, data: Path, name: str, args) -> dict:
    """Scores of ``bundle`` on scan ``name``; prints the table."""
    t0 = time.perf_counter()
    scan = load_scan(data, name)
    cloud = PointCloud(scan.points) if args.no_remission else scan.cloud()
    t_read = time.perf_counter() - t0
    pred = predict_cloud(bundle, cloud, interpolation=args.interpolation)
    s = segmentation_scores(scan.labels, pred.labels, range(1, N_CLASSES + 1))
    names = bundle.outputs.names
    print(f"{bundle.name} on {name}: {len(cloud):,} points, {pred.num_voxels:,} voxels")
    print(format_scores(s, names))
    stages = {"read": t_read, **pred.timings}
    print("stages (ms): " + ", ".join(f"{k} {1e3 * v:.0f}" for k, v in stages.items()))
    if args.confusion:
        short = [n[:6] for n in names]
        print("truth \\ predicted: " + " ".join(f"{n:>6}" for n in short))
        for k in s.present():
            print(f"{short[k]:>18} " + " ".join(f"{v:6d}" for v in s.confusion[k]))
    return {
        "scan": name,
        "overall_accuracy": round(s.accuracy, 4),
        "miou_present": round(s.miou, 4),
        "iou": {names[k]: round(float(s.iou[k]), 4) for k in s.present()},
        "points": {names[k]: int(s.confusion[k].sum()) for k in s.present()},
    }


def loso_table(folds: dict[str, dict]) -> str:
    """Markdown: accuracy / mIoU per fold, then the per-class IoU over the folds."""
    lines = ["| left-out scan | accuracy | mIoU |", "| --- | ---: | ---: |"]
    for name, s in folds.items():
        lines.append(f"| {name} | {s['overall_accuracy']:.3f} | {s['miou_present']:.3f} |")
    acc = np.mean([s["overall_accuracy"] for s in folds.values()])
    miou = np.mean([s["miou_present"] for s in folds.values()])
    lines.append(f"| **mean of {len(folds)} folds** | **{acc:.3f}** | **{miou:.3f}** |")
    classes: dict[str, list[float]] = {}
    for s in folds.values():
        for c, v in s["iou"].items():
            classes.setdefault(c, []).append(v)
    lines += ["", "| class | folds present | mean IoU | min | max |", "| --- | ---: | ---: | ---: | ---: |"]
    for c, v in classes.items():
        lines.append(f"| {c} | {len(v)} | {np.mean(v):.3f} | {min(v):.3f} | {max(v):.3f} |")
    return "\n".join(lines)


CURVE = re.compile(r"^step\s+(\d+)/\d+ .* val \S+ acc ([\d.]+) mIoU ([\d.]+)")


def learning_curves(root: Path, names) -> str:
    """Markdown: each fold's ``--eval-every`` scores from its train.log (before the final
    BatchNorm recalibration), accuracy / mIoU by step; empty when no fold logged any."""
    curves = {}
    for name in names:
        log = root / f"fold-{name}" / "train.log"
        if log.exists():
            points = [CURVE.match(line) for line in log.read_text().splitlines()]
            curves[name] = {int(m[1]): (float(m[2]), float(m[3])) for m in points if m}
    steps = sorted({k for c in curves.values() for k in c})
    if not steps:
        return ""
    lines = ["| left-out scan | " + " | ".join(f"step {k}" for k in steps) + " |"]
    lines.append("| --- |" + " ---: |" * len(steps))
    for name, c in curves.items():
        cells = [f"{c[k][0]:.3f} / {c[k][1]:.3f}" if k in c else "" for k in steps]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def loso(args, extra: list[str]) -> None:
    root: Path = args.loso
    folds = {}
    for name in args.folds or TRAIN:
        out = root / f"fold-{name}"
        scores = out / "final" / "scores.json"
        if not scores.exists() and not args.table_only:
            cmd = [sys.executable, str(HERE / "train_semantickitti.py"), "--val-scan", name]
            cmd += [
                "--data",
                str(args.data),
                "--output",
                str(out),
                "--resume",
                str(out),
                "--steps",
                str(args.steps),
            ]
            cmd += extra
            print("$ " + " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
        if scores.exists():
            s = json.loads(scores.read_text())
            folds[name] = {**s["float32"], "step": s.get("step")}
        else:
            print(f"fold {name}: no {scores}", flush=True)
    if not folds:
        sys.exit("evaluate_segmentation.py: no fold has scores yet")
    table = loso_table(folds)
    curves = learning_curves(root, folds)
    if curves:
        table += "\n\nValidation accuracy / mIoU during training (`--eval-every`):\n\n" + curves
    print(table)
    (root / "loso.md").write_text(table + "\n")
    (root / "loso.json").write_text(json.dumps(folds, indent=1) + "\n")


def main() -> None:
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    argv = argv[: argv.index("--")] if "--" in argv else argv
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, nargs="?", default=SHIPPED)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--scan", action="append", default=None, help=f"scan to score (default {HELD_OUT})")
    ap.add_argument("--quantize", type=int, choices=(4, 8), default=None)
    ap.add_argument("--interpolation", choices=("nearest", "linear"), default=None)
    ap.add_argument("--no-remission", action="store_true", help="withhold the scans' remission")
    ap.add_argument("--confusion", action="store_true", help="also print the confusion matrix")
    ap.add_argument("--json", type=Path, default=None, help="write the scores here")
    ap.add_argument(
        "--loso", type=Path, default=None, help="leave-one-scan-out folder (runs or tabulates folds)"
    )
    ap.add_argument("--folds", nargs="+", choices=TRAIN, default=None, help="the folds (default: every scan)")
    ap.add_argument("--steps", type=int, default=200, help="training steps per fold")
    ap.add_argument(
        "--table-only", action="store_true", help="tabulate the folds that have scores; train none"
    )
    args = ap.parse_args(argv)
    if args.loso is not None:
        loso(args, extra)
        return
    bundle = load_model(args.model, quantize_bits=args.quantize)
    results = [score(bundle, args.data, name, args) for name in args.scan or [HELD_OUT]]
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
