"""Plain library functions behind the ``lattice`` commands, importable and testable without the CLI.

Each command of ``lattice_cli`` parses its arguments, calls one function from here, and
prints the summary dict it returns:

- ``voxelize_file`` / ``voxelize_cloud`` / ``voxelize_source`` (``VoxelizeOptions``):
  points -> sparse voxel tensor, streamed chunk by chunk where the format allows
  (``open_source``, ``StreamingVoxelizer``);
- ``pool_file`` / ``pool_sparse`` and ``upsample_file`` / ``upsample_sparse``: sparse
  tensor files through ``lattice.ops.pool3d``, ``trilinear_upsample3d`` and
  ``pool_transpose3d``;
- ``describe_file``: what a point-cloud or sparse-tensor file holds;
- ``run_demo``: voxelize -> pool -> upsample on the bundled synthetic sample.
"""

from lattice.pipeline.demo import run_demo
from lattice.pipeline.describe import describe_cloud, describe_file, describe_sparse
from lattice.pipeline.sources import DEFAULT_CHUNK_POINTS, PointSource, memory_source, open_source
from lattice.pipeline.sparse import (
    POOL_MODES,
    UPSAMPLE_METHODS,
    from_tensor,
    pool_file,
    pool_sparse,
    to_tensor,
    upsample_file,
    upsample_sparse,
)
from lattice.pipeline.voxelize import (
    REDUCTIONS,
    StreamingVoxelizer,
    VoxelizeOptions,
    feature_columns,
    voxelize_cloud,
    voxelize_file,
    voxelize_source,
    write_sparse_file,
)

__all__ = [
    "DEFAULT_CHUNK_POINTS",
    "POOL_MODES",
    "REDUCTIONS",
    "UPSAMPLE_METHODS",
    "PointSource",
    "StreamingVoxelizer",
    "VoxelizeOptions",
    "describe_cloud",
    "describe_file",
    "describe_sparse",
    "feature_columns",
    "from_tensor",
    "memory_source",
    "open_source",
    "pool_file",
    "pool_sparse",
    "run_demo",
    "to_tensor",
    "upsample_file",
    "upsample_sparse",
    "voxelize_cloud",
    "voxelize_file",
    "voxelize_source",
    "write_sparse_file",
]
