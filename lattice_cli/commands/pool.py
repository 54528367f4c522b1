"""`lattice pool`: local sparse pooling of sparse-tensor NPZ files."""

from __future__ import annotations

import functools
from typing import Annotated

import typer

from lattice_cli.batch import Outputs, run_files
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


def is_sparse_file(path: str) -> bool | str:
    """Directory scans for sparse-tensor commands take ``*.npz`` files (a path or URL)."""
    return str(path).lower().endswith(".npz") or "not a sparse-tensor NPZ (.npz)"


def rows_change(s: dict) -> str:
    """``IN: N rows at stride S -> M rows at stride T``: how a pool or upsample summary begins."""
    return f"{s['input']}: {s['rows_in']} rows at stride {s['stride_in']} -> {s['rows_out']} rows at stride {s['stride_out']}"


def describe(s: dict) -> str:
    """The one-line text summary of a pool run."""
    channels = plural(s["channels"], "channel")
    return f"{rows_change(s)} ({s['mode']} pool, kernel {s['kernel_size']}, {channels}) -> {s['output']}"


def pool(
    inputs: InputsArg,
    output: OutputOpt = None,
    output_dir: OutputDirOpt = None,
    mode: Annotated[
        str, typer.Option("--mode", "-m", help="sum, max or avg (avg divides by contributors).")
    ] = "max",
    kernel_size: Annotated[str, typer.Option("--kernel-size", "-k", help="K or KX,KY,KZ.")] = "2",
    stride: Annotated[
        str, typer.Option("--stride", "-s", help="S or SX,SY,SZ; output stride = input stride * S.")
    ] = "2",
    position: PositionOpt = "centre",
    output_format: OutputFormatOpt = None,
    overwrite: OverwriteOpt = False,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Pool a sparse tensor: output support unique(floor(coords / stride)), sum / max / avg per channel.

    Categorical channels (class ids, by the file's schema) take the mode of the voxels they pool.
    The output's extension chooses the format: .npz the tensor, other point formats the voxels as points.
    """
    from lattice.pipeline import POOL_MODES, pool_file
    from lattice.pipeline.batch import Expect
    from lattice.pipeline.sparse import pool_parameters

    if mode not in POOL_MODES:
        fail(f"--mode must be one of {', '.join(POOL_MODES)}, got {mode!r}", code=2)
    k = parse_triple(kernel_size, "--kernel-size", int)
    s = parse_triple(stride, "--stride", int)
    where = check_position(position)
    if where == "centroid":
        fail("--position centroid: pooled voxels have no centroids; use centre", code=2)
    out_fmt = check_output(output, output_format, output_dir)
    job = functools.partial(
        pool_file, mode=mode, kernel_size=k, stride=s, output_format=out_fmt, position=where
    )
    try:
        expect = Expect("pool", pool_parameters(mode, k, s, where, out_fmt))
    except ValueError as err:  # the library's range checks: one line, exit 1
        fail(error_message(err))
    outputs = Outputs(output, output_dir, out_fmt, overwrite, workers, as_json, scheduler)
    run_files(job, inputs, outputs, describe=describe, accept=is_sparse_file, expect=expect)
