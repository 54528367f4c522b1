"""`lattice convert`: any supported point-cloud format to any other, every attribute kept by kind."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from lattice_cli.batch import Outputs, run_files
from lattice_cli.common import (
    ColumnsOpt,
    FormatOpt,
    JsonOpt,
    OutputDirOpt,
    OutputFormatOpt,
    OverwriteOpt,
    PositionOpt,
    SchedulerOpt,
    WorkersOpt,
    check_output,
    check_position,
    is_point_input,
)


def describe(s: dict) -> str:
    """The one-line text summary of a conversion."""
    what = f"{s['points']} {'voxels' if s['kind'] == 'sparse' else 'points'}"
    attrs = ", ".join(s["attributes"]) or "no attributes"
    return f"{s['input']} ({s['input_format']}) -> {s['output']} ({s['output_format']}): {what}, {attrs}"


def convert(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="IN [OUT]: the input (a file, - for stdin) and the output (its extension chooses the format); "
            "or several inputs, directories or globs with --output-dir.",
            show_default=False,
        ),
    ],
    output: Annotated[
        str | None, typer.Option("--output", "-o", help="Output file, or - for stdout (instead of OUT).")
    ] = None,
    output_dir: OutputDirOpt = None,
    output_format: OutputFormatOpt = None,
    position: PositionOpt = "centre",
    fmt: FormatOpt = None,
    columns: ColumnsOpt = None,
    overwrite: OverwriteOpt = False,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Convert point clouds between PLY, LAS/LAZ, PCD, NPZ, text, NPY and KITTI .bin (PDAL's translate).

    Every attribute is kept by kind: colours re-encoded to the output's convention, class ids
    as integers, LAS headers and CRS records kept. A sparse-tensor NPZ is written as one point
    per voxel (--position centre or centroid).
    """
    from lattice.pipeline.convert import convert_file, convert_parameters

    if output is None and output_dir is None and len(inputs) == 2:
        inputs, output = [inputs[0]], inputs[1]
    where = check_position(position)
    out_fmt = check_output(output, output_format, output_dir)
    job = functools.partial(convert_file, format=fmt, output_format=out_fmt, position=where, columns=columns)
    from lattice.pipeline.batch import Expect

    expect = Expect("convert", convert_parameters(where, out_fmt, columns))
    outputs = Outputs(output, output_dir, out_fmt, overwrite, workers, as_json, scheduler)
    run_files(job, inputs, outputs, describe=describe, accept=is_point_input, expect=expect)
