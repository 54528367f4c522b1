"""``lattice.explain``: which route an op takes for these inputs, and why.

Every explainable op is built from a *plan* function (validate, build or fetch the
relation, call the route function) and an executor. ``explain`` runs only the plan —
the very code the op runs — so diagnostics cannot drift from behaviour.
"""

from __future__ import annotations

from collections.abc import Callable

from lattice.routing.types import Route

_PLANS: dict[str, Callable] = {}


def explainable(plan: Callable) -> Callable[[Callable], Callable]:
    """Marks ``op`` as planned by ``plan`` (same arguments; returns an object with ``.route``)."""

    def wrap(op: Callable) -> Callable:
        op.__lattice_plan__ = plan
        _PLANS[op.__name__] = op
        return op

    return wrap


def explainable_ops() -> list[str]:
    return sorted(_PLANS)


def explain(op: Callable | str, *args, **kwargs) -> Route:
    """The Route that ``op(*args, **kwargs)`` would take, without running its kernels.

    ``op`` is an op function (``lattice.ops.conv3d``) or its name. Relations are
    built (and cached) as the op itself would build them.
    """
    if isinstance(op, str):
        if op not in _PLANS:
            raise ValueError(f"[explain] unknown op {op!r}; explainable ops: {', '.join(explainable_ops())}")
        op = _PLANS[op]
    plan = getattr(op, "__lattice_plan__", None)
    if plan is None:
        name = getattr(op, "__name__", repr(op))
        raise ValueError(f"[explain] {name} is not an explainable lattice op")
    return plan(*args, **kwargs).route
