"""Neural-network modules (``mlx.nn.Module`` subclasses) taking and returning SparseTensors.

- :mod:`lattice.nn.conv` — ``Conv3d``, ``SubmConv3d``, ``ConvTranspose3d``,
  ``GenerativeConvTranspose3d`` and their ``Normalized*`` variants;
- :mod:`lattice.nn.feature` — ``Linear``, ``ReLU``, ``Sigmoid``, ``GELU``, ``SiLU``,
  ``LeakyReLU``, ``Tanh``, ``Softplus``, ``Dropout``, ``BatchNorm``, ``LayerNorm``, ``RMSNorm``.

Everything in the submodules is importable from ``lattice.nn`` (and ``mlx_lattice.nn``).
"""

from lattice.nn import conv, feature
from lattice.nn.conv import *  # noqa: F403
from lattice.nn.feature import *  # noqa: F403

__all__ = [
    "conv",
    "feature",
    *conv.__all__,
    *feature.__all__,
]
