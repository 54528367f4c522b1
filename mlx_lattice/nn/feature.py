"""Feature modules (documented ``mlx_lattice.nn.feature``): lattice's own classes,
subclasses of the ``mlx.nn`` ones that also accept a SparseTensor."""

from __future__ import annotations

from lattice.nn import (
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

__all__ = [
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
]
