"""Route selection: pure functions from (op, dtype, shapes, relation metadata, weight
layout, device capability) to a Route value. Ops call these and dispatch on the result;
``lattice.explain`` calls the same functions, so diagnostics cannot drift.

Each family (``conv``, ``pool``, ``points``, ``relations``, ``coords``, ``linear``,
``features``) declares its routes in ``RouteTable``s beside its route function (every
family module is imported here, so the tables are declared in one order whatever is
imported first); the backends
(``lattice/backends/<device>/<family>.py``) register the implementations under the
same ids, and ``dispatch(route, ...)`` runs them. ``route_tables()`` lists them all.
"""

from lattice.routing import points as _points  # noqa: F401 -- declares its tables here
from lattice.routing.conv import ConvRequest, route_conv
from lattice.routing.coords import CoordinateRequest, route_coordinates
from lattice.routing.device import Capability, capability, requested_device
from lattice.routing.features import AffineRequest, route_affine
from lattice.routing.linear import LinearRequest, route_linear
from lattice.routing.pool import (
    GlobalPoolRequest,
    PoolRequest,
    UpsampleRequest,
    route_global_pool,
    route_pool,
    route_pool_backward,
    route_upsample,
    route_upsample_backward,
)
from lattice.routing.registry import RouteTable, check_tables, dispatch, route_tables
from lattice.routing.relations import RelationRequest, route_relation
from lattice.routing.types import Backend, Rejection, Route, RouteId, Tier

__all__ = [
    "AffineRequest",
    "Backend",
    "Capability",
    "ConvRequest",
    "CoordinateRequest",
    "LinearRequest",
    "Rejection",
    "RelationRequest",
    "Route",
    "RouteId",
    "RouteTable",
    "Tier",
    "capability",
    "check_tables",
    "dispatch",
    "requested_device",
    "route_affine",
    "route_conv",
    "route_coordinates",
    "route_linear",
    "route_relation",
    "route_tables",
    "GlobalPoolRequest",
    "PoolRequest",
    "UpsampleRequest",
    "route_global_pool",
    "route_pool",
    "route_pool_backward",
    "route_upsample",
    "route_upsample_backward",
]
