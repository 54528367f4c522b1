"""`lattice voxelize`: point clouds -> sparse voxel tensors (``lattice.sparse/1`` NPZ)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer

from lattice_cli.batch import run_files
from lattice_cli.common import (
    ColumnsOpt,
    FormatOpt,
    InputsArg,
    JsonOpt,
    OutputDirOpt,
    OutputOpt,
    OverwriteOpt,
    StrictOpt,
    WorkersOpt,
    error_message,
    fail,
    parse_names,
    parse_triple,
    plural,
)


def _is_point_file(path: Path) -> bool:
    from lattice.io import PointCloudError, format_from_name

    try:
        return format_from_name(path.name) is not None
    except PointCloudError:  # *.pcd.bin: ambiguous, let the run say so
        return True


def describe(s: dict) -> str:
    """The one-line text summary of a voxelize run."""
    names = ", ".join(s["feature_names"])
    how = "streamed" if s["streamed"] else "in memory"
    return (
        f"{s['input']}: {s['points']} points -> {s['voxels']} voxels, {plural(s['channels'], 'channel')} "
        f"({names}; {s['reduction']}) at voxel size {s['voxel_size']} [{how}] -> {s['output']}"
    )


def voxelize(
    inputs: InputsArg,
    output: OutputOpt = None,
    output_dir: OutputDirOpt = None,
    voxel_size: Annotated[
        str, typer.Option("--voxel-size", "-s", help="Voxel edge S, or SX,SY,SZ (same units as the points).")
    ] = ...,
    origin: Annotated[
        str, typer.Option("--origin", help="Grid origin x,y,z, or 'min' for the minimum of the points.")
    ] = "0",
    reduce: Annotated[
        str, typer.Option("--reduce", "-r", help="Per-voxel reduction: mean, sum, max, first or count.")
    ] = "mean",
    features: Annotated[
        str | None,
        typer.Option(
            "--features",
            "-f",
            help="Attributes to carry, e.g. intensity,red,green,blue (default: every numeric one; "
            "'none' gives the point count).",
        ),
    ] = None,
    fmt: FormatOpt = None,
    columns: ColumnsOpt = None,
    strict: StrictOpt = False,
    overwrite: OverwriteOpt = False,
    workers: WorkersOpt = 1,
    as_json: JsonOpt = False,
) -> None:
    """Voxelize point clouds: voxel index floor((p - origin) / voxel_size), one row per occupied voxel."""
    from lattice.pipeline import VoxelizeOptions, voxelize_file

    size = parse_triple(voxel_size, "--voxel-size")
    grid_origin = "min" if origin.strip().lower() == "min" else parse_triple(origin, "--origin")
    try:
        options = VoxelizeOptions(size, grid_origin, reduce, parse_names(features), strict)
    except ValueError as err:
        fail(error_message(err))
    job = functools.partial(voxelize_file, options=options, format=fmt, columns=columns)
    run_files(
        job,
        inputs,
        output=output,
        output_dir=output_dir,
        describe=describe,
        as_json=as_json,
        overwrite=overwrite,
        workers=workers,
        accept=_is_point_file,
    )
