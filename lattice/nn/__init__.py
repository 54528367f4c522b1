"""Neural-network modules (``mlx.nn.Module`` subclasses) taking and returning SparseTensors.

- :mod:`lattice.nn.conv` — ``Conv3d``, ``SubmConv3d``, ``ConvTranspose3d``,
  ``GenerativeConvTranspose3d`` and their ``Normalized*`` variants;
- :mod:`lattice.nn.feature` — ``Linear``, ``ReLU``, ``Sigmoid``, ``GELU``, ``SiLU``,
  ``LeakyReLU``, ``Tanh``, ``Softplus``, ``Dropout``, ``BatchNorm``, ``LayerNorm``, ``RMSNorm``;
- :mod:`lattice.nn.pool` — ``Pool3d``, ``SumPool3d``, ``MaxPool3d``, ``AvgPool3d``,
  ``PoolTranspose3d``, ``TrilinearUpsample3d``, ``GlobalSumPool``, ``GlobalAvgPool``,
  ``GlobalMaxPool``;
- :mod:`lattice.nn.quantized` — ``QuantizedConv3d``, ``QuantizedSubmConv3d``,
  ``QuantizedConvTranspose3d``, ``QuantizedGenerativeConvTranspose3d``, ``QuantizedLinear``
  and ``quantize(model)``.

Everything in the submodules is importable from ``lattice.nn`` (and ``mlx_lattice.nn``).
"""

from lattice.nn import conv, feature, pool, quantized
from lattice.nn.conv import *  # noqa: F403
from lattice.nn.feature import *  # noqa: F403
from lattice.nn.pool import *  # noqa: F403
from lattice.nn.quantized import *  # noqa: F403

__all__ = [
    "conv",
    "feature",
    "pool",
    "quantized",
    *conv.__all__,
    *feature.__all__,
    *pool.__all__,
    *quantized.__all__,
]
