"""Core data model: SparseTensor, coordinate manager, kernels, relations, coordinate sets and
occupancy (parents with child masks)."""

from lattice.core._checks import validate_coord_pair, validate_coords
from lattice.core.coordinates import CoordinateManager, CoordinateMapKey, RelationCacheKey
from lattice.core.coordsets import (
    CoordinateSet,
    contains_coords,
    downsample_coords,
    intersection_coords,
    inverse_map,
    lookup_coords,
    morton_codes,
    morton_order,
    morton_sort_coords,
    union_coords,
)
from lattice.core.kernel import KernelSpec, kernel_offsets
from lattice.core.occupancy import (
    OccupancyExpansion,
    SparseOccupancy,
    child_coords_from_indices,
    occupancy_downsample,
    occupancy_expand,
)
from lattice.core.points import SparseQuantization, sparse_quantize
from lattice.core.quantized import QuantizedWeight, dequantize_weight, quantize_weight
from lattice.core.relation import (
    EdgeCounter,
    KernelRelation,
    NeighborRelation,
    RelationEdges,
    RelationKind,
    WindowMap,
)
from lattice.core.relation_views import (
    NeighborEdges,
    RelationCSRView,
    RelationImplicitGemmView,
    RelationSortedImplicitGemmView,
    RelationView,
    SparseRelationContract,
)
from lattice.core.rows import host_reads
from lattice.core.tensor import SparseTensor, SparseTensorComponents

__all__ = [
    "CoordinateManager",
    "CoordinateMapKey",
    "CoordinateSet",
    "EdgeCounter",
    "KernelRelation",
    "KernelSpec",
    "NeighborEdges",
    "NeighborRelation",
    "OccupancyExpansion",
    "QuantizedWeight",
    "RelationCSRView",
    "RelationCacheKey",
    "RelationEdges",
    "RelationImplicitGemmView",
    "RelationKind",
    "RelationSortedImplicitGemmView",
    "RelationView",
    "SparseOccupancy",
    "SparseQuantization",
    "SparseRelationContract",
    "SparseTensor",
    "SparseTensorComponents",
    "WindowMap",
    "child_coords_from_indices",
    "contains_coords",
    "dequantize_weight",
    "downsample_coords",
    "host_reads",
    "intersection_coords",
    "inverse_map",
    "kernel_offsets",
    "lookup_coords",
    "morton_codes",
    "morton_order",
    "morton_sort_coords",
    "occupancy_downsample",
    "occupancy_expand",
    "quantize_weight",
    "sparse_quantize",
    "union_coords",
    "validate_coord_pair",
    "validate_coords",
]

# The ops come with the core: they attach the + - * operators to SparseTensor and register
# the explainable plans (lattice/__init__ imports neither until a name is used).
import lattice.ops  # noqa: E402, F401  isort: skip
