# The one place the version is written: pyproject.toml reads it (scikit-build-core
# metadata.version), `lattice --version` and lattice.__version__ import it.
__version__ = "0.1.0"
