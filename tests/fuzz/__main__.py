"""A longer local fuzz run: ``cd tests && python -m fuzz --fuzz-minutes 10 [--seed N] [--keep DIR]``."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from fuzz.harness import run, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--fuzz-minutes", type=float, default=10.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--keep", type=Path, default=Path("fuzz-findings"), help="where findings' mutants are copied"
    )
    ap.add_argument("--memory-gib", type=float, default=4.0, help="the worker's address-space cap")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = run(Path(tmp), seed=args.seed, seconds=60 * args.fuzz_minutes, keep=args.keep,
                     memory_limit=int(args.memory_gib * 2**30))  # fmt: skip
    print(summary(report))
    for f in report.findings:
        print(f"{f.kind:10} {f.target:7} {f.path}: {f.detail}")


if __name__ == "__main__":
    main()
