"""Kernel geometry (documented ``mlx_lattice.core.relations.specs``).

``KernelSpec`` is lattice's own (``size``, ``stride``, ``padding``, ``dilation`` as
triples; ``volume``, ``is_pointwise``, ``is_centered_submanifold``). Its ``size`` has no
default (documented ``size=3``); see docs/compat.md.
"""

from __future__ import annotations

from lattice.core import KernelSpec

__all__ = ["KernelSpec"]
