"""`lattice upsample`: sparse tensors to a finer stride, onto generated or explicit support."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from lattice_cli.batch import Outputs, run_files
from lattice_cli.commands.pool import is_sparse_file, rows_change
from lattice_cli.common import (
    InputsArg,
    JsonOpt,
    OutputDirOpt,
    OutputFormatOpt,
    OutputOpt,
    OverwriteOpt,
    PositionOpt,
    SchedulerOpt,
    WorkersOpt,
    check_output,
    check_position,
    error_message,
    fail,
    parse_triple,
    plural,
)


def describe(s: dict) -> str:
    """The one-line text summary of an upsample run."""
    support = "target support" if s["target"] else "generated support"
    channels = plural(s["channels"], "channel")
    return f"{rows_change(s)} ({s['method']}, {support}, {channels}) -> {s['output']}"


def upsample(
    inputs: InputsArg,
    output: OutputOpt = None,
    output_dir: OutputDirOpt = None,
    stride: Annotated[
        str, typer.Option("--stride", "-s", help="S or SX,SY,SZ; output stride = input stride / S.")
    ] = "2",
    target: Annotated[
        str | None,
        typer.Option(
            "--target", "-t", help="Sparse NPZ whose rows (and order) the output takes; at the finer stride."
        ),
    ] = None,
    method: Annotated[
        str,
        typer.Option(
            "--method", help="trilinear (normalised interpolation) or transpose (contributor average)."
        ),
    ] = "trilinear",
    kernel_size: Annotated[
        str | None,
        typer.Option("--kernel-size", "-k", help="transpose only: K or KX,KY,KZ (default: the stride)."),
    ] = None,
    position: PositionOpt = "centre",
    output_format: OutputFormatOpt = None,
    overwrite: OverwriteOpt = False,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Upsample a sparse tensor by a stride, by trilinear interpolation or a transposed pool."""
    from lattice.pipeline import UPSAMPLE_METHODS, upsample_file
    from lattice.pipeline.batch import Expect
    from lattice.pipeline.sparse import upsample_parameters

    if method not in UPSAMPLE_METHODS:
        fail(f"--method must be one of {', '.join(UPSAMPLE_METHODS)}, got {method!r}", code=2)
    if kernel_size is not None and method != "transpose":
        fail("--kernel-size applies to --method transpose only", code=2)
    s = parse_triple(stride, "--stride", int)
    k = parse_triple(kernel_size, "--kernel-size", int) if kernel_size is not None else None
    where = check_position(position)
    if where == "centroid":
        fail("--position centroid: upsampled voxels have no centroids; use centre", code=2)
    out_fmt = check_output(output, output_format, output_dir)
    tgt = None if target is None else str(target)
    job = functools.partial(
        upsample_file,
        stride=s,
        target=tgt,
        method=method,
        kernel_size=k,
        output_format=out_fmt,
        position=where,
    )
    try:
        expect = Expect("upsample", upsample_parameters(s, tgt, method, k, where, out_fmt))
    except ValueError as err:  # the library's range checks: one line, exit 1
        fail(error_message(err))
    outputs = Outputs(output, output_dir, out_fmt, overwrite, workers, as_json, scheduler)
    run_files(job, inputs, outputs, describe=describe, accept=is_sparse_file, expect=expect)
