"""Entropy coding (documented ``mlx_lattice.ops.entropy``): out of scope.

lattice's drop-in does not provide mlx-lattice's range / rANS coders; importing this
module raises ``mlx_lattice._missing.NotProvidedError`` (an ``ImportError``) saying so.
"""

from mlx_lattice._missing import out_of_scope_module

raise out_of_scope_module(__name__)
