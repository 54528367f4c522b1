"""Exception classes lattice raises beyond the built-in ones (a leaf module: no imports)."""


class DTypeError(TypeError, ValueError):
    """An unsupported dtype (integer features to pooling, float coordinates, ...).

    Both a ``TypeError`` (what lattice raised before) and a ``ValueError`` (what the
    documented mlx-lattice API raises for bad dtypes), as NumPy's ``AxisError`` is both an
    ``IndexError`` and a ``ValueError``: code written for either keeps catching it."""


__all__ = ["DTypeError"]
