"""Slow, obviously-correct NumPy reference oracles that every fast route is compared against.

- :mod:`reference.coords` — coordinate functions (downsample, union, intersection,
  lookup, inverse map, Morton codes and order, sparse_quantize, knn / radius by
  brute force);
- :mod:`reference.relations` — the five kernel-relation kinds and the check that
  compares a native ``KernelRelation`` with a reference one;
- :mod:`reference.occupancy` — occupancy downsample / expand, child coordinates;
- :mod:`reference.rows` — joins of two sets as row maps (alignment), per-batch top-k rows.
- :mod:`reference.views` — the documented relation views (CSR, implicit-GEMM map, masks,
  sorted view) from a relation's edges, and integer knn / radius with squared distances.
"""

from . import coords, occupancy, relations, rows, views

__all__ = ["coords", "occupancy", "relations", "rows", "views"]
