"""Route values: what the routing layer returns and every op dispatches on."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum


class Tier(StrEnum):
    """Device capability tiers, detected once per process."""

    CPU = "cpu"
    GPU_CUDA = "gpu-cuda"
    GPU_METAL = "gpu-metal"


@dataclass(frozen=True)
class Rejection:
    """A route that was considered and not taken, with the predicate that failed."""

    backend: str
    algorithm: str
    predicate: str


@dataclass(frozen=True)
class Route:
    """The chosen route of one call: backend, algorithm, why, and what was rejected."""

    op: str
    backend: str
    algorithm: str
    reason: str
    rejected: tuple[Rejection, ...] = ()
    facts: dict = field(default_factory=dict, compare=False)

    @property
    def name(self) -> str:
        return f"{self.backend}.{self.algorithm}"

    def require(self, *implemented: str) -> Route:
        """For ops with fixed implementations: this route, or an error naming it."""
        if self.name not in implemented:
            raise RuntimeError(f"[{self.op}] no implementation for route {self.name}")
        return self

    def as_dict(self) -> dict:
        return {
            "op": self.op,
            "route": self.name,
            "backend": self.backend,
            "algorithm": self.algorithm,
            "reason": self.reason,
            "rejected": [
                {"route": f"{r.backend}.{r.algorithm}", "failed": r.predicate} for r in self.rejected
            ],
            "facts": dict(self.facts),
        }


class RouteBuilder:
    """Collects rejections while a route function walks its decision order."""

    def __init__(self, op: str, facts: dict) -> None:
        self.op = op
        self.facts = facts
        self._rejected: list[Rejection] = []

    def reject(self, backend: str, algorithm: str, predicate: str) -> None:
        self._rejected.append(Rejection(backend, algorithm, predicate))

    def take(self, backend: str, algorithm: str, reason: str) -> Route:
        return Route(self.op, backend, algorithm, reason, tuple(self._rejected), self.facts)


def edge_facts(edges: int | None, n_out: int, average: str) -> dict:
    """The ``edges`` and average-per-output-row facts of a relation; a GPU map whose edges
    were not counted (counting is a host read) says so instead of a number."""
    if edges is None:
        return {"edges": "not counted (GPU map)"}
    return {"edges": edges, average: round(edges / n_out, 3) if n_out else 0.0}
