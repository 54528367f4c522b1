"""Score a segmentation bundle on the held-out SemanticKITTI scan, end to end as model-run runs it.

    python examples/evaluate_segmentation.py [examples/models/minkunet14-semantickitti] [--confusion]

Reads ``seq00_000000.bin`` with ``lattice.io.read_points``, predicts with
``lattice.models.predict_cloud`` (exactly what ``lattice model-run`` does), maps the
``.label`` raw ids to learning ids (``LEARNING_MAP`` of ``train_semantickitti.py``) and
prints per-class IoU over the classes present, mIoU and overall accuracy over the
labelled points (ground truth 0 = unlabeled is left out), then the time of each stage.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from train_semantickitti import DATA, HELD_OUT, N_CLASSES, SHIPPED, raw_to_learning

from lattice.io import read_points
from lattice.models import format_scores, load_model, predict_cloud, segmentation_scores


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path, nargs="?", default=SHIPPED)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--quantize", type=int, choices=(4, 8), default=None)
    ap.add_argument("--interpolation", choices=("nearest", "linear"), default=None)
    ap.add_argument("--confusion", action="store_true", help="also print the confusion matrix")
    args = ap.parse_args()
    bundle = load_model(args.model, quantize_bits=args.quantize)
    t0 = time.perf_counter()
    cloud = read_points(args.data / f"{HELD_OUT}.bin")
    t_read = time.perf_counter() - t0
    pred = predict_cloud(bundle, cloud, interpolation=args.interpolation)
    truth = raw_to_learning(np.fromfile(args.data / f"{HELD_OUT}.label", dtype=np.uint32))
    scores = segmentation_scores(truth, pred.labels, range(1, N_CLASSES + 1))
    print(f"{bundle.name} on {HELD_OUT}: {len(cloud):,} points, {pred.num_voxels:,} voxels")
    print(format_scores(scores, bundle.outputs.names))
    stages = {"read": t_read, **pred.timings}
    print("stages (ms): " + ", ".join(f"{k} {1e3 * v:.0f}" for k, v in stages.items()))
    if args.confusion:
        present = scores.present()
        names = [bundle.outputs.names[k][:6] for k in range(N_CLASSES)]
        print("truth \\ predicted: " + " ".join(f"{n:>6}" for n in names))
        for k in present:
            print(f"{names[k]:>18} " + " ".join(f"{v:6d}" for v in scores.confusion[k]))


if __name__ == "__main__":
    main()
