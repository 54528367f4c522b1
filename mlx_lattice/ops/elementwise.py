"""Artifact-backed elementwise ops (documented ``mlx_lattice.ops.elementwise``).

Every documented function here (``embedding_lookup_from_artifact``,
``elementwise_from_artifact``, ``softmax_from_artifact``) belongs to the MLIR artifact
runtime, which is out of scope for lattice's drop-in: accessing one raises
``mlx_lattice._missing.NotProvidedError`` (an ``ImportError``) saying so.
"""

from __future__ import annotations

from mlx_lattice._missing import module_getattr

__all__: list[str] = []

__getattr__ = module_getattr(__name__)
