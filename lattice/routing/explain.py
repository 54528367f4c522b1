"""``lattice.explain``: which route an op takes for these inputs, and why.

An explainable op is declared once: its body validates, builds or fetches the relation,
asks the route function and returns a *plan* — an object with ``.route`` and ``.run()``.
``@explainable`` makes the body the op (calling it runs the plan); ``explain`` runs the
same body and stops before ``run``, so diagnostics cannot drift from behaviour.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lattice.routing.types import Route

if TYPE_CHECKING:  # lattice.core imports this module (its ops are explainable)
    from lattice.core.relation import EdgeCounter

_PLANS: dict[str, Callable] = {}
_EXAMPLES: dict[str, Callable] = {}


@dataclass(frozen=True)
class CallPlan:
    """The plan of an op whose work after routing is one call (``run`` makes it): the
    row-wise feature ops, the joins, the relation and coordinate-set functions."""

    route: Route
    call: Callable[[], object]

    def run(self):
        return self.call()


def explainable(
    *, example: Callable | None = None, keywords: Callable | None = None, returns: object = None
) -> Callable[[Callable], Callable]:
    """Makes ``body`` (the op's one declaration, returning its plan) the op ``body.__name__``.

    The op has the body's signature; its return annotation is that of the plan's ``run``.
    ``keywords``: a function whose keyword-only parameters the body takes as ``**kwargs``
    (ops that share them — e.g. the kernel geometry of the pooling ops — declare them once
    there); the op's signature lists them after the body's own.
    ``example(x, request)`` builds the op's call ``(args, kwargs)`` for ``lattice explain``
    from a tensor and an ``ExplainRequest`` (channels, kernel, dtype...): tensor ops pass
    ``x`` first, point ops (voxelize, devoxelize) sample points from it.
    ``returns``: the op's return annotation where the body returns a ``CallPlan`` (else it
    is read from the plan class's ``run``).
    """

    def wrap(body: Callable) -> Callable:
        @functools.wraps(body)
        def op(*args, **kwargs):
            return body(*args, **kwargs).run()

        op.__signature__ = _op_signature(body, keywords, returns)
        op.__lattice_plan__ = body
        _PLANS[op.__name__] = op
        if example is not None:
            _EXAMPLES[op.__name__] = example
        return op

    return wrap


def _op_signature(
    body: Callable, keywords: Callable | None = None, returns: object = None
) -> inspect.Signature:
    """The body's signature (with ``keywords``' keyword-only parameters for its ``**kwargs``)
    returning what its plan's ``run`` returns: read once, at import."""
    sig = inspect.signature(body)
    params = [p for p in sig.parameters.values() if p.kind is not p.VAR_KEYWORD]
    if keywords is not None:
        own = {p.name for p in params}
        shared = inspect.signature(keywords).parameters.values()
        params += [p for p in shared if p.kind is p.KEYWORD_ONLY and p.name not in own]
    if returns is not None:
        return sig.replace(parameters=params, return_annotation=returns)
    plan = sig.return_annotation
    if isinstance(plan, str):
        plan = body.__globals__.get(plan)
    run = getattr(plan, "run", None)
    returns = inspect.signature(run).return_annotation if run is not None else inspect.Signature.empty
    return sig.replace(parameters=params, return_annotation=returns)


def _load_ops() -> None:
    """The ops register their plans as they are imported (with ``lattice.core``)."""
    import lattice.core  # noqa: F401


def explainable_ops() -> list[str]:
    _load_ops()
    return sorted(_PLANS)


def explain(op: Callable | str, *args, edge_counter: EdgeCounter | None = None, **kwargs) -> Route:
    """The Route that ``op(*args, **kwargs)`` would take, without running its kernels.

    ``op`` is an op function (``lattice.ops.conv3d``) or its name. Relations are
    built (and cached) as the op itself would build them. The route names the edges of the
    relation it runs over: a relation built on the GPU is counted by ``edge_counter`` (one
    host read; a new ``EdgeCounter`` where None), then the plan is made again from the
    cached relation, so what is reported is still what the op's own body decided.
    """
    if isinstance(op, str):
        _load_ops()
        if op not in _PLANS:
            raise ValueError(f"[explain] unknown op {op!r}; explainable ops: {', '.join(explainable_ops())}")
        op = _PLANS[op]
    plan = plan_of(op, *args, **kwargs)
    uncounted = [r for r in _relations(plan) if r.known_edge_count is None]
    if uncounted:
        from lattice.core.relation import EdgeCounter

        counter = EdgeCounter() if edge_counter is None else edge_counter
        for relation in uncounted:
            counter(relation)
        plan = plan_of(op, *args, **kwargs)
    return plan.route


def _relations(plan) -> list:
    """The relations a plan runs over (a conv plan's ``relation``, a pooling plan's
    ``edges``): those whose edges its route describes."""
    found = (getattr(plan, name, None) for name in ("relation", "edges"))
    return [r for r in found if r is not None and hasattr(r, "known_edge_count")]


def plan_of(op: Callable, *args, **kwargs):
    """The plan ``op(*args, **kwargs)`` would run — its route and what it runs over (the
    relation, the weight...) — without running it (``plan.run()`` does)."""
    body = getattr(op, "__lattice_plan__", None)
    if body is None:
        raise ValueError(f"[explain] {getattr(op, '__name__', repr(op))} is not an explainable lattice op")
    return body(*args, **kwargs)


@dataclass(frozen=True)
class ExplainRequest:
    """The shape of a call that ``lattice explain`` describes."""

    channels: tuple[int, ...] = (32, 32)
    kernel_size: int = 3
    stride: int = 1
    dtype: str = "float32"
    device: str | None = None
    quantize: int | None = None  # bits of a packed weight (4 or 8), None for dense


def explain_on(op: str, x, request: ExplainRequest) -> Route:
    """Route of ``op`` on tensor ``x`` with the arguments ``request`` describes."""
    _load_ops()
    if op not in _PLANS:
        raise ValueError(f"[explain] unknown op {op!r}; explainable ops: {', '.join(explainable_ops())}")
    if op not in _EXAMPLES:
        raise ValueError(f"[explain] {op} cannot be explained from the command line yet")
    args, kwargs = _EXAMPLES[op](x, request)
    return explain(op, *args, **kwargs)


TRANSPOSED_OPS = (
    "conv_transpose3d",
    "generative_conv_transpose3d",
    "normalized_conv_transpose3d",
    "normalized_generative_conv_transpose3d",
    "pool_transpose3d",
    "trilinear_upsample3d",
    "transposed_kernel_relation",
    "generative_kernel_relation",
)


def input_level(op: str, request: ExplainRequest) -> int:
    """Tensor stride the op's input needs: transposed ops start from a coarse level."""
    return request.stride if op in TRANSPOSED_OPS else 1


def synthetic_input(op: str, request: ExplainRequest, rows: int = 100_000, seed: int = 0):
    """A random sparse tensor of about ``rows`` voxels at 10 % occupancy of a cube."""
    import mlx.core as mx
    import numpy as np

    from lattice.core.tensor import SparseTensor

    rng = np.random.default_rng(seed)
    side = max(2, round((rows / 0.1) ** (1 / 3)))
    flat = rng.choice(side**3, size=min(rows, side**3), replace=False)
    xyz = np.stack(np.unravel_index(flat, (side,) * 3), axis=1).astype(np.int32)
    coords = np.concatenate([np.zeros((len(xyz), 1), np.int32), xyz], axis=1)
    feats = mx.zeros((len(coords), request.channels[0]), dtype=getattr(mx, request.dtype))
    return SparseTensor(coords, feats, input_level(op, request))


def points_input(op: str, request: ExplainRequest, points, voxel_size: float):
    """Points voxelized at ``voxel_size`` (first occurrence), as the op's input tensor."""
    import mlx.core as mx

    from lattice.core.points import sparse_quantize
    from lattice.core.tensor import SparseTensor

    q = sparse_quantize(points, voxel_size)
    level = input_level(op, request)
    coords = q.coords
    if level != 1:
        from lattice.core.coordsets import downsample_coords

        coords = downsample_coords(coords, level).coords
    feats = mx.zeros((coords.shape[0], request.channels[0]), dtype=getattr(mx, request.dtype))
    return SparseTensor(coords, feats, level)
