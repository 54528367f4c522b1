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
- ``run_demo``: voxelize -> pool -> upsample on the bundled synthetic sample;
- ``run_batch`` (``BatchSummary``, ``FileResult``, ``Expect``): one of those file functions
  over many inputs, with the parameter-aware skip, on an executor: ``InProcessExecutor``,
  ``ProcessExecutor`` (local processes that survive a dead worker) or ``DaskExecutor``.

Each name is imported from its module the first time it is used (PEP 562), so
``describe_file`` (``lattice info``) does not load MLX or the native core.
"""

from __future__ import annotations

from lattice._lazy import lazy_attributes

_MODULES = {
    "batch": (
        "BatchError",
        "BatchSummary",
        "BatchUsageError",
        "Expect",
        "FileFinished",
        "FileResult",
        "FileStarted",
        "Task",
        "plan_tasks",
        "run_batch",
    ),
    "dask_executor": ("DaskExecutor",),
    "executors": ("InProcessExecutor", "ProcessExecutor", "executor_for"),
    "demo": ("run_demo",),
    "describe": ("describe_cloud", "describe_file", "describe_job", "describe_sparse"),
    "sources": ("DEFAULT_CHUNK_POINTS", "PointSource", "memory_source", "open_source"),
    "sparse": (
        "POOL_MODES",
        "UPSAMPLE_METHODS",
        "from_tensor",
        "pool_file",
        "pool_sparse",
        "to_tensor",
        "upsample_file",
        "upsample_sparse",
    ),
    "voxelize": (
        "REDUCTIONS",
        "StreamingVoxelizer",
        "VoxelizeOptions",
        "feature_columns",
        "voxelize_cloud",
        "voxelize_file",
        "voxelize_source",
        "write_sparse_file",
    ),
}

__all__ = sorted(name for names in _MODULES.values() for name in names)


__getattr__, __dir__ = lazy_attributes(
    __name__,
    globals(),
    {name: f"{__name__}.{module}" for module, names in _MODULES.items() for name in names},
)
