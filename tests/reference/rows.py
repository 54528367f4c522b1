"""Slow, obviously-correct oracles for the rows a join or a selection gives: joins of two
coordinate sets as row maps (alignment) and per-batch top-k rows. Dicts and loops."""

from __future__ import annotations

from .coords import Coord, tuples


def align(lhs, rhs, join: str) -> tuple[list[Coord], list[int], list[int]]:
    """(coords, lhs row, rhs row) of a join of two sets (-1: that side lacks the row).

    inner: lhs rows found in rhs, lhs order; left: every lhs row; right: every rhs row;
    outer: every lhs row, then the rhs rows lhs lacks, rhs order.
    """
    lt, rt = tuples(lhs), tuples(rhs)
    lrow = {c: i for i, c in enumerate(lt)}
    rrow = {c: i for i, c in enumerate(rt)}
    if join == "right":
        return rt, [lrow.get(c, -1) for c in rt], list(range(len(rt)))
    out = [(c, i, rrow.get(c, -1)) for i, c in enumerate(lt) if join != "inner" or c in rrow]
    if join == "outer":
        out += [(c, -1, j) for j, c in enumerate(rt) if c not in lrow]
    return [o[0] for o in out], [o[1] for o in out], [o[2] for o in out]


def topk_rows(batch, scores, counts, rho: float) -> list[int]:
    """Per batch member b (in order), the rows with the ``min(int(int(counts[b]) * rho), n_b)``
    largest (score, row) pairs, listed in ascending (score, row) order."""
    out: list[int] = []
    for b, keep in enumerate(counts):
        rows = [i for i in range(len(batch)) if int(batch[i]) == b]
        k = min(int(int(keep) * rho), len(rows))
        if k > 0:
            ranked = sorted(rows, key=lambda i: (float(scores[i]), i))
            out += ranked[len(ranked) - k :]
    return out


__all__ = ["align", "topk_rows"]
