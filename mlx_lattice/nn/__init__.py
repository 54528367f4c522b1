"""Sparse ``mlx.nn`` modules of the documented API (``mlx_lattice.nn``), served by ``lattice.nn``.

Submodules :mod:`~mlx_lattice.nn.conv`, ``pool``, ``feature``, ``quantized_conv`` and
``quantized_feature``; every class is lattice's own (``mlx_lattice.nn.Conv3d is
lattice.nn.Conv3d``).
"""

from __future__ import annotations

from mlx_lattice.nn import conv, feature, pool, quantized_conv, quantized_feature
from mlx_lattice.nn.conv import *  # noqa: F403 - the package is its submodules' union
from mlx_lattice.nn.feature import *  # noqa: F403
from mlx_lattice.nn.pool import *  # noqa: F403
from mlx_lattice.nn.quantized_conv import *  # noqa: F403
from mlx_lattice.nn.quantized_feature import *  # noqa: F403

_SUBMODULES = (conv, feature, pool, quantized_conv, quantized_feature)
__all__ = [m.__name__.rsplit(".", 1)[1] for m in _SUBMODULES] + [n for m in _SUBMODULES for n in m.__all__]
