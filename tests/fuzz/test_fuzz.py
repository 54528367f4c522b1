"""The fuzz campaign as a CI test (issue 22): a fixed seed, about two minutes, at least 3,000
mutants across every reader and the bundle loader, under a 4 GiB address-space cap; no crash, no
hang, no traceback, every message one line naming the file, peak RSS within 1 GB. Findings of
longer local runs (``python -m fuzz --fuzz-minutes N``) are kept in ``tests/data/fuzz/`` and
replayed here."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fuzz.harness import replay, run, summary

SECONDS = float(os.environ.get("LATTICE_FUZZ_SECONDS", "110"))
REGRESSIONS = Path(__file__).resolve().parents[1] / "data" / "fuzz"


def test_fuzz_campaign(tmp_path):
    report = run(
        tmp_path, seed=20261201, seconds=SECONDS, min_mutants=3000, memory_limit=4 << 30, per_mutant=8
    )
    findings = "\n".join(f"{f.kind} {f.target} {Path(f.path).name}: {f.detail}" for f in report.findings[:20])
    assert report.findings == [], summary(report) + "\n" + findings
    assert report.mutants >= 3000 and report.by_target.get("bundle", 0) >= 300
    assert report.peak_rss <= 1 << 30, summary(report)


@pytest.mark.parametrize(
    "path", sorted(REGRESSIONS.glob("*")) if REGRESSIONS.is_dir() else [], ids=lambda p: p.name
)
def test_fuzz_regressions(tmp_path, path):
    """Mutants that once broke a promise: each gives a clean answer now."""
    report = replay(tmp_path, [path], memory_limit=4 << 30, per_mutant=8)
    assert report.findings == [], [f"{f.kind}: {f.detail}" for f in report.findings]
