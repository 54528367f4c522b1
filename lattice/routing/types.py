"""Route values: what the routing layer returns and every op dispatches on."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import StrEnum
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lattice.routing.registry import RouteTable


class Tier(StrEnum):
    """Device capability tiers, detected once per process."""

    CPU = "cpu"
    GPU_CUDA = "gpu-cuda"
    GPU_METAL = "gpu-metal"


class Backend(StrEnum):
    """Who runs a route: the native CPU core, MLX's own GPU kernels, or lattice's GPU
    kernels in one of their two dialects (``metal``: never run on Apple hardware)."""

    CPU = "cpu"
    GPU = "gpu"
    CUDA = "cuda"
    METAL = "metal"


@dataclass(frozen=True)
class RouteId:
    """One route of one family: ``backend.algorithm``. Declared routes come from their
    family's ``RouteTable`` (which ``dispatch`` reads); other ids only name an alternative
    that was considered and rejected."""

    backend: Backend
    algorithm: str
    family: str = ""
    table: RouteTable | None = field(default=None, compare=False, repr=False)

    @property
    def name(self) -> str:
        return f"{self.backend}.{self.algorithm}"

    @property
    def implementation(self) -> object | None:
        """What ``dispatch`` runs for this route (None for an undeclared or unimplemented id)."""
        if self.table is None:
            return None
        from lattice.routing.registry import load_backends  # the backends register on first use

        load_backends()
        return self.table.impls.get(self)


def describe(impl: object) -> str | None:
    """``module.name`` of an implementation (its text for a descriptor such as ``Vjp``)."""
    if impl is None:
        return None
    name = getattr(impl, "__qualname__", None)
    module = getattr(impl, "__module__", None)
    return f"{module}.{name}" if name and module else str(impl)


@dataclass(frozen=True)
class Rejection:
    """A route that was considered and not taken, with the predicate that failed."""

    backend: str
    algorithm: str
    predicate: str

    @property
    def name(self) -> str:
        return f"{self.backend}.{self.algorithm}"


@dataclass(frozen=True)
class Route:
    """The chosen route of one call: its id, why, and what was rejected."""

    op: str
    id: RouteId
    reason: str
    rejected: tuple[Rejection, ...] = ()
    facts: dict = field(default_factory=dict, compare=False)

    backend = property(attrgetter("id.backend"), doc="The route's Backend.")
    algorithm = property(attrgetter("id.algorithm"), doc="The route's algorithm name.")
    name = property(attrgetter("id.name"), doc="``backend.algorithm``, as explain reports it.")

    def require(self, *implemented: str) -> Route:
        """This route, or an error naming it where a caller takes only ``implemented`` (for
        callers outside the dispatch tables; ops ``dispatch``)."""
        if self.name not in implemented:
            raise RuntimeError(f"[{self.op}] no implementation for route {self.name}")
        return self

    def with_facts(self, **facts) -> Route:
        """This route with more facts (measured after the choice, e.g. the edges it reads)."""
        return replace(self, facts=self.facts | facts)

    def as_dict(self) -> dict:
        return {
            "op": self.op,
            "route": self.name,
            "backend": str(self.backend),
            "algorithm": self.algorithm,
            "reason": self.reason,
            "implementation": describe(self.id.implementation),
            "rejected": [{"route": r.name, "failed": r.predicate} for r in self.rejected],
            "facts": dict(self.facts),
        }


class RouteBuilder:
    """Collects rejections while a route function walks its decision order."""

    def __init__(self, op: str, facts: dict) -> None:
        self.op = op
        self.facts = facts
        self._rejected: list[Rejection] = []

    def reject(self, route: RouteId, predicate: str) -> None:
        self._rejected.append(Rejection(str(route.backend), route.algorithm, predicate))

    def take(self, route: RouteId, reason: str) -> Route:
        return Route(self.op, route, reason, tuple(self._rejected), self.facts)


def facts_of(req, *fields: str) -> dict:
    """The named fields of a request value, as route facts (in that order)."""
    return {f: getattr(req, f) for f in fields}


def edge_facts(edges: int | None, n_out: int, average: str) -> dict:
    """The ``edges`` and average-per-output-row facts of a relation; a GPU map whose edges
    were not counted (counting is a host read) says so instead of a number."""
    if edges is None:
        return {"edges": "not counted (GPU map)"}
    return {"edges": edges, average: round(edges / n_out, 3) if n_out else 0.0}
