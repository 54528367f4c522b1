"""`lattice model-run`: run a model bundle on point clouds, write one label per point."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer

from lattice_cli.batch import run_files
from lattice_cli.common import (
    EXIT_USAGE,
    ColumnsOpt,
    FormatOpt,
    InputsArg,
    JsonOpt,
    OutputDirOpt,
    OverwriteOpt,
    WorkersOpt,
    error_message,
    fail,
    warn,
)

OutputOpt = Annotated[
    str | None,
    typer.Option(
        "--output",
        "-o",
        help="Output file (.ply, .npz, .las, .laz or .pcd), or - for stdout. One input only.",
    ),
]
_STAGES = ("read", "voxelize", "network", "map_back", "write")


def is_point_file(path: Path) -> bool:
    """Directory scans take files with a point-cloud extension (``*.pcd.bin`` too: the run says why)."""
    from lattice.io import PointCloudError, format_from_name

    try:
        return format_from_name(path.name) is not None
    except PointCloudError:
        return True


def describe(s: dict) -> str:
    """The one-line text summary of a model-run."""
    top = list(s["classes"].items())[:4]
    share = ", ".join(f"{name} {100 * n / max(s['points'], 1):.0f}%" for name, n in top)
    ms = " ".join(f"{k} {1e3 * s['timings'][k]:.0f}" for k in _STAGES)
    quant = f" ({s['quantization']})" if s["quantization"] else ""
    bad = s["nonfinite_points"]
    note = f"; {bad} points with non-finite coordinates get the ignore label" if bad else ""
    return (
        f"{s['input']}: {s['points']} points -> {s['voxels']} voxels -> {s['model']}{quant} -> labels "
        f"({share}) -> {s['output']} [ms: {ms}]{note}"
    )


def model_run(
    model: Annotated[
        Path,
        typer.Argument(help="Model bundle directory (model.json + weights.safetensors).", show_default=False),
    ],
    inputs: InputsArg,
    output: OutputOpt = None,
    output_dir: OutputDirOpt = None,
    output_format: Annotated[
        str | None,
        typer.Option(
            "--output-format",
            "-F",
            help="ply, npz, las, laz or pcd (default: the -o extension; npz for - and in batch mode).",
        ),
    ] = None,
    probabilities: Annotated[
        bool, typer.Option("--probabilities", "-p", help="Also write per-point class probabilities (N, K).")
    ] = False,
    colors: Annotated[
        bool, typer.Option("--colors/--no-colors", help="Colour points by class (replaces input colours).")
    ] = True,
    interpolation: Annotated[
        str | None,
        typer.Option(
            "--interpolation",
            help="nearest (each point's voxel) or linear (trilinear); default: the bundle's.",
        ),
    ] = None,
    quantize: Annotated[
        str | None, typer.Option("--quantize", "-q", help="Pack the weights at load: int8 or int4.")
    ] = None,
    device: Annotated[str, typer.Option("--device", help="cpu or gpu (for MLX's own ops).")] = "cpu",
    fmt: FormatOpt = None,
    columns: ColumnsOpt = None,
    overwrite: OverwriteOpt = False,
    workers: WorkersOpt = 1,
    as_json: JsonOpt = False,
) -> None:
    """Run a model bundle on point clouds: preprocess as model.json says, predict, map back to every point.

    Writes the input cloud plus `label` (class id per point), class colours and, with
    --probabilities, `probabilities`; PLY/NPZ also record the class names.
    """
    from lattice.models.spec import INTERPOLATIONS
    from lattice.pipeline.model_run import OUTPUT_FORMATS, QUANTIZE, cached_bundle, model_run_file

    if quantize is not None and quantize not in QUANTIZE:
        fail(f"--quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}", EXIT_USAGE)
    if device not in ("cpu", "gpu"):
        fail(f"--device must be cpu or gpu, got {device!r}", EXIT_USAGE)
    if interpolation is not None and interpolation not in INTERPOLATIONS:
        fail(f"--interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}", EXIT_USAGE)
    if output_format is not None:
        output_format = output_format.lower().lstrip(".")
        if output_format not in OUTPUT_FORMATS:
            fail(
                f"--output-format must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}",
                EXIT_USAGE,
            )
        if output is None and output_format != "npz":
            fail("batch mode writes <name>.npz files; --output-format applies to -o only", EXIT_USAGE)
    try:
        bundle = cached_bundle(str(model), quantize)  # a bad bundle fails once, before any input is read
    except Exception as err:  # one clear line, never a traceback
        fail(error_message(err))
    if device == "gpu":
        import mlx.core as mx

        if not mx.is_available(mx.gpu):
            fail("--device gpu: no GPU is available to MLX on this machine")
    if bundle.task == "classification":
        warn(f"{model}: a classifier gives every point of a cloud the cloud's label")
    job = functools.partial(
        model_run_file,
        model=str(model),
        quantize=quantize,
        format=fmt,
        columns=columns,
        output_format=output_format,
        probabilities=probabilities,
        colors=colors,
        interpolation=interpolation,
        device=device,
    )
    run_files(
        job,
        inputs,
        output=output,
        output_dir=output_dir,
        describe=describe,
        as_json=as_json,
        overwrite=overwrite,
        workers=workers,
        accept=is_point_file,
    )
