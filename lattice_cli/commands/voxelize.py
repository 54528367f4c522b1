"""`lattice voxelize`: point clouds -> sparse voxel tensors (``lattice.sparse/1`` NPZ) or voxel points."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from lattice_cli.batch import Outputs, run_files
from lattice_cli.common import (
    ColumnsOpt,
    FormatOpt,
    InputsArg,
    JsonOpt,
    OutputDirOpt,
    OutputFormatOpt,
    OutputOpt,
    OverwriteOpt,
    PositionOpt,
    SchedulerOpt,
    StrictOpt,
    WorkersOpt,
    check_output,
    check_position,
    error_message,
    fail,
    is_point_input,
    parse_names,
    parse_reductions,
    parse_triple,
    plural,
)


def describe(s: dict) -> str:
    """The one-line text summary of a voxelize run."""
    names = ", ".join(f"{n} {s['reductions'][n]}" for n in s["feature_names"]) if s.get("reductions") else ""
    how = "streamed" if s["streamed"] else "in memory"
    what = (
        "" if s.get("output_format", "npz") == "npz" else f" as {s['output_format']} points ({s['position']})"
    )
    return (
        f"{s['input']}: {s['points']} points -> {s['voxels']} voxels, {plural(s['channels'], 'channel')} "
        f"({names}) at voxel size {s['voxel_size']} [{how}] -> {s['output']}{what}"
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
        list[str] | None,
        typer.Option(
            "--reduce",
            "-r",
            help="Per-voxel reduction: R for every attribute or NAME=R for one (repeatable; R is mean, sum, "
            "min, max, mode, first or count). Default: by kind - mean for measurements and colours, mode for "
            "class ids, renormalised mean for normals. A bare 'count' gives the point count only.",
        ),
    ] = None,
    features: Annotated[
        str | None,
        typer.Option(
            "--features",
            "-f",
            help="Attributes to carry, e.g. intensity,red,green,blue (default: every numeric one; "
            "'none' gives the point count).",
        ),
    ] = None,
    position: PositionOpt = "centre",
    output_format: OutputFormatOpt = None,
    fmt: FormatOpt = None,
    columns: ColumnsOpt = None,
    strict: StrictOpt = False,
    overwrite: OverwriteOpt = False,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Voxelize point clouds: voxel index floor((p - origin) / voxel_size), one row per occupied voxel.

    Every attribute is reduced by its kind unless --reduce says otherwise; the output is the
    sparse tensor (.npz) or the voxels as points in the format of the output's extension.
    """
    from lattice.io.kinds import REDUCTIONS
    from lattice.pipeline import VoxelizeOptions, voxelize_file
    from lattice.pipeline.voxelize import voxelize_parameters

    size = parse_triple(voxel_size, "--voxel-size")
    grid_origin = "min" if origin.strip().lower() == "min" else parse_triple(origin, "--origin")
    reduction, reductions = parse_reductions(reduce, REDUCTIONS)
    where = check_position(position)
    out_fmt = check_output(output, output_format, output_dir)
    try:
        options = VoxelizeOptions(
            size, grid_origin, reduction, parse_names(features), strict, reductions=reductions,
            centroids=where == "centroid",
        )  # fmt: skip
    except ValueError as err:
        fail(error_message(err))
    job = functools.partial(
        voxelize_file, options=options, format=fmt, output_format=out_fmt, position=where, columns=columns
    )
    from lattice.pipeline.batch import Expect

    expect = Expect("voxelize", voxelize_parameters(options, where, out_fmt))
    outputs = Outputs(output, output_dir, out_fmt, overwrite, workers, as_json, scheduler)
    run_files(job, inputs, outputs, describe=describe, accept=is_point_input, expect=expect)
