"""Sparse ``mlx.nn`` modules of the documented API (``mlx_lattice.nn``), served by ``lattice.nn``.

Submodules :mod:`~mlx_lattice.nn.conv`, ``pool``, ``feature``, ``quantized_conv`` and
``quantized_feature``; every class is lattice's own (``mlx_lattice.nn.Conv3d is
lattice.nn.Conv3d``).
"""

from __future__ import annotations

from mlx_lattice.nn import conv, feature, pool, quantized_conv, quantized_feature
from mlx_lattice.nn.conv import (
    Conv3d,
    ConvTranspose3d,
    GenerativeConvTranspose3d,
    NormalizedConvTranspose3d,
    NormalizedGenerativeConvTranspose3d,
    NormalizedSubmConv3d,
    SubmConv3d,
)
from mlx_lattice.nn.feature import (
    GELU,
    BatchNorm,
    Dropout,
    LayerNorm,
    LeakyReLU,
    Linear,
    ReLU,
    RMSNorm,
    Sigmoid,
    SiLU,
    Softplus,
    Tanh,
)
from mlx_lattice.nn.pool import (
    AvgPool3d,
    GlobalAvgPool,
    GlobalMaxPool,
    GlobalSumPool,
    MaxPool3d,
    Pool3d,
    PoolTranspose3d,
    SumPool3d,
    TrilinearUpsample3d,
)
from mlx_lattice.nn.quantized_conv import (
    QuantizedConv3d,
    QuantizedConvTranspose3d,
    QuantizedGenerativeConvTranspose3d,
    QuantizedSubmConv3d,
)
from mlx_lattice.nn.quantized_feature import QuantizedLinear

__all__ = [
    "conv",
    "feature",
    "pool",
    "quantized_conv",
    "quantized_feature",
    "Conv3d",
    "ConvTranspose3d",
    "GenerativeConvTranspose3d",
    "NormalizedConvTranspose3d",
    "NormalizedGenerativeConvTranspose3d",
    "NormalizedSubmConv3d",
    "SubmConv3d",
    "GELU",
    "BatchNorm",
    "Dropout",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "RMSNorm",
    "ReLU",
    "SiLU",
    "Sigmoid",
    "Softplus",
    "Tanh",
    "AvgPool3d",
    "GlobalAvgPool",
    "GlobalMaxPool",
    "GlobalSumPool",
    "MaxPool3d",
    "Pool3d",
    "PoolTranspose3d",
    "SumPool3d",
    "TrilinearUpsample3d",
    "QuantizedConv3d",
    "QuantizedConvTranspose3d",
    "QuantizedGenerativeConvTranspose3d",
    "QuantizedSubmConv3d",
    "QuantizedLinear",
]
