"""Route selection: pure functions from (op, dtype, shapes, relation metadata, weight
layout, device capability) to a Route value. Ops call these and dispatch on the result;
``lattice.explain`` calls the same functions, so diagnostics cannot drift.
"""

from lattice.routing.conv import ConvRequest, route_conv
from lattice.routing.device import Capability, capability, requested_device
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
from lattice.routing.relations import CoordinateRequest, RelationRequest, route_coordinates, route_relation
from lattice.routing.types import Rejection, Route, Tier

__all__ = [
    "Capability",
    "ConvRequest",
    "CoordinateRequest",
    "LinearRequest",
    "Rejection",
    "RelationRequest",
    "Route",
    "Tier",
    "capability",
    "requested_device",
    "route_conv",
    "route_coordinates",
    "route_linear",
    "route_relation",
    "GlobalPoolRequest",
    "PoolRequest",
    "UpsampleRequest",
    "route_global_pool",
    "route_pool",
    "route_pool_backward",
    "route_upsample",
    "route_upsample_backward",
]
