"""Kernel geometry (documented ``mlx_lattice.core.relations.specs``).

``KernelSpec`` is lattice's own (``size``, ``stride``, ``padding``, ``dilation`` as
triples; ``volume``, ``is_pointwise``). Differences from the documented class: ``size``
has no default (documented ``size=3``) and ``is_centered_submanifold`` is missing; see
docs/compat.md.
"""

from __future__ import annotations

from lattice.core import KernelSpec

__all__ = ["KernelSpec"]
