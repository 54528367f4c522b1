"""Backend implementation layer (Python side), one package per device with the family
stems of the native core and kernel sources (``cpu/`` as ``csrc/backend/cpu/``,
``cuda/`` as ``kernels/``): each module registers its implementations under its
family's route ids (``lattice.routing.<family>``), which ``dispatch`` runs.

- ``cpu``: the native core (``lattice._ext``) on the CPU stream;
- ``gpu``: MLX's own GPU kernels (the ``gpu.*`` routes);
- ``cuda``: lattice's GPU kernels, CUDA dialect (the ``cuda.*`` routes);
- ``metal``: the same glue under the ``metal.*`` routes — never run on Apple hardware.

Importing this package checks that every declared route has an implementation.
"""

from lattice.backends import cpu, cuda, gpu, metal
from lattice.routing.registry import check_tables

check_tables()

__all__ = ["cpu", "cuda", "gpu", "metal"]
