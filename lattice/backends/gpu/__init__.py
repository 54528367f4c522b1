"""The ``gpu.*`` routes: built from MLX's own GPU kernels (no lattice kernel)."""

from lattice.backends.gpu import blas, conv, features

__all__ = ["blas", "conv", "features"]
