"""Add the training-domain record (and ASPRS class codes) to a SemanticKITTI bundle trained before them.

    python examples/record_training_domain.py examples/models/minkunet14-semantickitti [--asprs]

Reads the bundle's ``model.json``, recomputes the statistics of the training scans its
``metadata.training`` names (``train_scans``, from ``arguments.data``) with
``lattice.models.domain_stats`` and the bundle's own ``preprocessing``, and writes them
as ``domain``; ``--asprs`` also gives every class the ASPRS LAS code of
``train_semantickitti.CLASSES``. Nothing else changes: ``weights.safetensors`` is not
opened for writing, its sha256 in ``model.json`` stays, and the bundle still loads
(checked at the end). ``examples/train_semantickitti.py`` writes both records itself.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from train_semantickitti import CLASSES, DATA, IGNORE_ASPRS, training_domain

from lattice.io.atomic import atomic_write
from lattice.models import Preprocessing, load_model, read_model_json

REPO = Path(__file__).resolve().parents[1]


def with_records(doc: dict, data: Path, asprs: bool) -> dict:
    """``doc`` (a parsed model.json) with ``domain`` before ``metadata`` and, if asked, ASPRS codes."""
    training = doc.get("metadata", {}).get("training", {})
    names = training.get("train_scans")
    if not names:
        raise SystemExit("model.json's metadata.training names no train_scans; cannot recompute the domain")
    domain = training_domain(data, Preprocessing.from_json(doc["preprocessing"]), list(names))
    out = {k: v for k, v in doc.items() if k not in ("domain", "metadata")}
    out["domain"] = domain.to_json()
    out["metadata"] = doc.get("metadata", {})
    if asprs:
        for c in out["outputs"]["classes"]:
            c["asprs"] = CLASSES[c["id"]][2]
        out["outputs"]["ignore"]["asprs"] = IGNORE_ASPRS
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bundle", type=Path)
    ap.add_argument(
        "--data", type=Path, default=None, help="training data (default: the one model.json names)"
    )
    ap.add_argument("--asprs", action="store_true", help="also write each class's ASPRS LAS code")
    args = ap.parse_args()
    doc = read_model_json(args.bundle)
    recorded = doc.get("metadata", {}).get("training", {}).get("arguments", {}).get("data")
    data = args.data or (REPO / recorded if recorded else DATA)
    new = with_records(doc, data, args.asprs)
    with atomic_write(args.bundle / "model.json") as f:
        f.write((json.dumps(new, indent=2) + "\n").encode())
    bundle = load_model(args.bundle)  # the weights' sha256 is checked on load
    print(
        f"{args.bundle}: domain of {bundle.domain.scans} training scans recorded; asprs codes: {args.asprs}"
    )


if __name__ == "__main__":
    main()
