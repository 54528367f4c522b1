"""MLIR artifact bundles (documented ``mlx_lattice.artifact``): out of scope.

lattice's drop-in does not provide mlx-lattice's artifact IO, validation or runtime;
importing this module raises ``mlx_lattice._missing.NotProvidedError`` (an
``ImportError``) saying so.
"""

from mlx_lattice._missing import out_of_scope_module

raise out_of_scope_module(__name__)
