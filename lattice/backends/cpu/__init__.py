"""The CPU backend: wrappers over the native core (``csrc/backend/cpu/<stem>``, same stems),
each registering its implementations under the routes of its family."""

from lattice.backends.cpu import blas, conv, coords, features, joins, pool, relations

__all__ = ["blas", "conv", "coords", "features", "joins", "pool", "relations"]
