"""Route tables: each family declares its routes here, the backends register their
implementations under the same ids, and ``dispatch`` runs the one a route names.

A family (``routing/<family>.py``) owns one ``RouteTable`` per implementation contract
(the arguments every implementation of it takes): its route function takes the table's
ids, ``lattice/backends/<device>/<family>.py`` registers one implementation per id.
``lattice.explain`` reports routes of the same ids and ``check_tables`` (run when
``lattice.backends`` is imported, and by the tests) fails on a declared route without an
implementation; registering an undeclared id fails at once.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lattice.routing.types import Backend, Route, RouteId, describe

KERNEL_BACKENDS = (Backend.CUDA, Backend.METAL)

_TABLES: dict[str, RouteTable] = {}


class NotRepresentable(ValueError):
    """A GPU route cannot give what the CPU core would (an overflow, or an input the CPU
    core rejects): the caller runs the CPU route, which gives it or raises the precise error."""


@dataclass(frozen=True)
class Vjp:
    """The implementation of a backward route: the VJP of a forward implementation, which
    takes the path this backward route names (the forward op fixes it)."""

    forward: str
    how: str

    def __str__(self) -> str:
        return f"VJP of {self.forward} ({self.how})"


@dataclass(frozen=True)
class KernelRoutes:
    """One algorithm of lattice's GPU kernels under both dialects: ``routes[backend]`` is
    its ``cuda.*`` or ``metal.*`` id (the same implementation serves both)."""

    cuda: RouteId
    metal: RouteId

    @property
    def algorithm(self) -> str:
        return self.cuda.algorithm

    def __getitem__(self, backend: Backend) -> RouteId:
        if backend == Backend.CUDA:
            return self.cuda
        if backend == Backend.METAL:
            return self.metal
        raise KeyError(
            f"[routing] {self.algorithm} runs on lattice's GPU kernels (cuda, metal), not {backend}"
        )


class RouteTable:
    """The routes of one family and contract, and their implementations."""

    def __init__(self, family: str, contract: str) -> None:
        if family in _TABLES:
            raise ValueError(f"[routing] route table {family!r} declared twice")
        self.family = family
        self.contract = contract
        self.routes: dict[RouteId, str] = {}  # declared route -> one-line summary
        self.impls: dict[RouteId, object] = {}  # what dispatch runs
        self.twins: list[KernelRoutes] = []
        _TABLES[family] = self

    def __repr__(self) -> str:
        return f"RouteTable({self.family!r}, {len(self.routes)} routes)"

    def route(self, backend: Backend, algorithm: str, summary: str = "") -> RouteId:
        """Declares ``backend.algorithm``; returns its id (a module constant of the family)."""
        rid = RouteId(Backend(backend), algorithm, self.family, self)
        if rid in self.routes:
            raise ValueError(f"[routing] {self.family} route {rid.name} declared twice")
        self.routes[rid] = summary
        return rid

    def kernels(self, algorithm: str, summary: str = "") -> KernelRoutes:
        """Declares ``cuda.algorithm`` and ``metal.algorithm`` (lattice's GPU kernels)."""
        twin = KernelRoutes(
            self.route(Backend.CUDA, algorithm, summary), self.route(Backend.METAL, algorithm, summary)
        )
        self.twins.append(twin)
        return twin

    def register(self, route: RouteId, impl: object) -> object:
        """Registers ``impl`` as the implementation of the declared ``route``."""
        if route not in self.routes:
            raise LookupError(f"[routing] {route.name} is not a declared {self.family} route")
        if route in self.impls:
            raise LookupError(f"[routing] {self.family} route {route.name} has two implementations")
        self.impls[route] = impl
        return impl

    def missing(self) -> list[RouteId]:
        """Declared routes without an implementation."""
        return [r for r in self.routes if r not in self.impls]


def implements(*routes: RouteId) -> Callable:
    """Decorator: registers the function as the implementation of ``routes`` (in their tables)."""

    def wrap(fn):
        for r in routes:
            if r.table is None:
                raise LookupError(f"[routing] {r.name} is not a declared route (no table)")
            r.table.register(r, fn)
        return fn

    return wrap


def load_backends() -> None:
    """Imports ``lattice.backends`` (each backend registers its implementations, then every
    table is checked) unless it is imported already. ``import lattice`` does not load them:
    the first dispatch or route listing does."""
    importlib.import_module("lattice.backends")


def dispatch(route: Route, *args, **kwargs):
    """Runs the implementation registered for ``route`` with the family's arguments."""
    rid = route.id
    impl = None if rid.table is None else rid.table.impls.get(rid)
    if impl is None and rid.table is not None:
        load_backends()
        impl = rid.table.impls.get(rid)
    if impl is None:
        raise RuntimeError(f"[{route.op}] route {rid.name} has no implementation in this build")
    return impl(*args, **kwargs)


def dispatch_or_cpu(route: Route, cpu_route: Callable[[], Route], *args) -> tuple[Route, object]:
    """(route taken, result) of ``dispatch(route, *args)``; where its implementation raises
    ``NotRepresentable``, of the CPU route ``cpu_route()`` names instead (which gives the
    result or raises the precise error)."""
    try:
        return route, dispatch(route, *args)
    except NotRepresentable:
        cpu = cpu_route()
        return cpu, dispatch(cpu, *args)


def tables() -> Iterator[RouteTable]:
    """Every declared route table, in declaration order, with the backends' implementations
    registered."""
    load_backends()
    return iter(list(_TABLES.values()))


def check_tables() -> None:
    """Raises where a declared route has no implementation (in any table)."""
    missing = [f"{t.family}: {r.name}" for t in tables() for r in t.missing()]
    if missing:
        raise RuntimeError(f"[routing] declared routes without an implementation: {', '.join(missing)}")


@dataclass(frozen=True)
class RouteRow:
    """One declared route: its family, name, implementation (or None) and summary."""

    family: str
    route: str
    backend: str
    algorithm: str
    implementation: str | None
    summary: str


def route_tables() -> list[RouteRow]:
    """Every declared route of every family, with the implementation dispatch runs."""
    return [
        RouteRow(
            t.family,
            r.name,
            str(r.backend),
            r.algorithm,
            describe(t.impls.get(r)),
            summary,
        )
        for t in tables()
        for r, summary in t.routes.items()
    ]
