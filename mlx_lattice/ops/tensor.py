"""Sparse tensor algebra and row selection (documented ``mlx_lattice.ops.tensor``).

Joins follow database semantics (``inner`` / ``left`` / ``right`` / ``outer``); a side
missing a coordinate reads its fill value. Most functions are lattice's own;
``sparse_collate`` is an adapter (documented argument names ``coords`` / ``feats``) and
``sparse_binary_op`` is ``lattice.ops.sparse_binary`` under its documented second name, and
``align_sparse`` is ``lattice.ops.sparse_alignment`` under its documented name (a
``SparseAlignment`` record, ``join='inner'``; lattice's own ``lattice.ops.align_sparse``
returns the two aligned tensors instead). ``gather_aligned_features``,
``sparse_cat_aligned`` and ``topk_rows`` are lattice's own. The ``*_from_artifact``
functions are out of scope: they raise ``mlx_lattice._missing.NotProvidedError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, TypeAlias

from lattice import ops as _ops
from lattice.ops import (
    cat,
    crop,
    gather_aligned_features,
    prune,
    prune_mask,
    reindex_sparse,
    replace_feature,
    sparse_add,
    sparse_alignment,
    sparse_binary,
    sparse_cat_aligned,
    sparse_from_coordinates,
    sparse_maximum,
    sparse_minimum,
    sparse_mul,
    sparse_sub,
    topk_rows,
)
from mlx_lattice._missing import module_getattr
from mlx_lattice.core.coords.alignment import SparseJoin

SparseBinaryMode: TypeAlias = Literal["add", "sub", "mul", "maximum", "minimum"]
DuplicateReduction: TypeAlias = Literal["none", "mean"]

#: The documented second name of ``sparse_binary`` (the same function).
sparse_binary_op = sparse_binary
#: The documented name of ``lattice.ops.sparse_alignment`` (the same function).
align_sparse = sparse_alignment


def sparse_collate(coords: Sequence, feats: Sequence, *, stride=1, duplicate_reduction: str = "none"):
    """One batched SparseTensor from per-sample ``(n_i, 3)`` coords and ``(n_i, C)`` feats.

    Sample ``i`` gets batch index ``i`` and ``batch_counts`` records the rows per sample.
    Maps to ``lattice.ops.sparse_collate(coords, feats, ...)`` (whose arguments are named
    ``coords_list`` / ``feats_list``).
    """
    return _ops.sparse_collate(coords, feats, stride=stride, duplicate_reduction=duplicate_reduction)


__all__ = [
    "DuplicateReduction",
    "SparseBinaryMode",
    "SparseJoin",
    "align_sparse",
    "cat",
    "crop",
    "gather_aligned_features",
    "prune",
    "prune_mask",
    "reindex_sparse",
    "replace_feature",
    "sparse_add",
    "sparse_binary",
    "sparse_binary_op",
    "sparse_cat_aligned",
    "sparse_collate",
    "sparse_from_coordinates",
    "sparse_maximum",
    "sparse_minimum",
    "sparse_mul",
    "sparse_sub",
    "topk_rows",
]

__getattr__ = module_getattr(__name__)
