"""Segmentation metrics: confusion matrix, per-class IoU, mIoU and overall accuracy.

Points whose ground truth is the ignore id are left out of every number (the
SemanticKITTI convention for ``unlabeled``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SegmentationScores:
    """Scores over the labelled points.

    ``confusion[i, j]``: points of true class ``class_ids[i]`` predicted ``class_ids[j]``
    (predictions outside ``class_ids``, e.g. the ignore id, count as wrong and are not in
    the matrix). ``iou[k]`` is NaN for a class absent from both truth and prediction.
    ``miou``: mean IoU over the classes present in the ground truth.
    """

    class_ids: tuple[int, ...]
    confusion: np.ndarray
    iou: np.ndarray
    support: np.ndarray
    accuracy: float
    miou: float
    labelled: int

    def present(self) -> list[int]:
        """Indices of the classes with ground-truth points."""
        return [k for k in range(len(self.class_ids)) if self.support[k] > 0]


def segmentation_scores(
    truth: np.ndarray, pred: np.ndarray, class_ids: Sequence[int], *, ignore: int | None = 0
) -> SegmentationScores:
    """Compare per-point ``pred`` with ``truth`` (both class ids, same length)."""
    t = np.asarray(truth).reshape(-1).astype(np.int64)
    p = np.asarray(pred).reshape(-1).astype(np.int64)
    if t.shape != p.shape:
        raise ValueError(f"truth and pred must have the same length, got {t.shape[0]} and {p.shape[0]}")
    ids = np.asarray(list(class_ids), np.int64)
    keep = np.ones_like(t, bool) if ignore is None else t != ignore
    t, p = t[keep], p[keep]
    lut_size = int(max(ids.max(initial=0), t.max(initial=0), p.max(initial=0))) + 1
    lut = np.full(lut_size, -1, np.int64)
    lut[ids[ids >= 0]] = np.nonzero(ids >= 0)[0]
    ti = lut[np.clip(t, 0, None)]
    pi = lut[np.clip(p, 0, None)]
    pi[p < 0] = -1
    if np.any(ti < 0):
        raise ValueError(f"truth holds ids outside class_ids: {sorted(set(t[ti < 0].tolist()))[:10]}")
    k = len(ids)
    ok = pi >= 0
    confusion = np.bincount(ti[ok] * k + pi[ok], minlength=k * k).reshape(k, k)
    support = np.bincount(ti, minlength=k)
    tp = np.diag(confusion).astype(np.float64)
    predicted = confusion.sum(axis=0)
    union = support + predicted - tp
    iou = np.divide(tp, union, out=np.full(k, np.nan), where=union > 0)
    present = support > 0
    labelled = int(len(t))
    return SegmentationScores(
        tuple(int(i) for i in ids),
        confusion,
        iou,
        support,
        float(tp.sum() / labelled) if labelled else float("nan"),
        float(np.mean(iou[present])) if present.any() else float("nan"),
        labelled,
    )


def format_scores(scores: SegmentationScores, names: Sequence[str]) -> str:
    """A Markdown table of per-class IoU (classes present in the truth), then mIoU and accuracy."""
    lines = ["| class | points | IoU |", "| --- | ---: | ---: |"]
    for k in scores.present():
        lines.append(f"| {names[k]} | {int(scores.support[k]):,} | {scores.iou[k]:.3f} |")
    lines.append(f"| **mIoU** ({len(scores.present())} classes present) | | **{scores.miou:.3f}** |")
    lines.append(f"| **overall accuracy** | {scores.labelled:,} labelled | **{scores.accuracy:.3f}** |")
    return "\n".join(lines)


__all__ = ["SegmentationScores", "format_scores", "segmentation_scores"]
