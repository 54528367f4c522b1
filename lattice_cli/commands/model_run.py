"""`lattice model-run`: run a model bundle on point clouds, write the predictions beside the input's fields."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Annotated

import typer

from lattice_cli.batch import Outputs, run_files
from lattice_cli.common import (
    EXIT_USAGE,
    ColumnsOpt,
    FormatOpt,
    InputsArg,
    JsonOpt,
    OutputDirOpt,
    OverwriteOpt,
    SchedulerOpt,
    WorkersOpt,
    error_message,
    fail,
    is_point_input,
    plural,
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


def describe(s: dict) -> str:
    """The one-line text summary of a model-run."""
    top = list(s["classes"].items())[:4]
    share = ", ".join(f"{name} {100 * n / max(s['points'], 1):.0f}%" for name, n in top)
    ms = " ".join(f"{k} {1e3 * s['timings'][k]:.0f}" for k in _STAGES)
    quant = f" ({s['quantization']})" if s["quantization"] else ""
    bad = s["nonfinite_points"]
    note = f"; {bad} points with non-finite coordinates get the ignore label" if bad else ""
    far = len(s["domain_warnings"])
    note += f"; {plural(far, 'statistic')} outside the training domain (warnings above)" if far else ""
    return (
        f"{s['input']}: {s['points']} points -> {s['voxels']} voxels -> {s['model']}{quant} -> "
        f"{s['label_field']} ({share}) -> {s['output']} [ms: {ms}]{note}"
    )


def run_and_warn(src, dst, **kwargs) -> dict:
    """``model_run_file``, with one ``lattice: warning:`` line per training-domain warning of an
    input it refuses (``--strict-domain``); those of a run are in its summary, printed by the
    caller (``domain_warnings``), so a Dask worker's reach the terminal too."""
    from lattice.pipeline.model_run import DomainError, model_run_file

    try:
        return model_run_file(src, dst, **kwargs)
    except DomainError as err:
        name = "<stdin>" if src == "-" or hasattr(src, "read") else str(src)
        for line in err.warnings:
            warn(f"{name}: {line}")
        raise


def check_usage(output: str | None, output_format: str | None, to_classification: bool) -> None:
    """Usage errors (exit 2) of the output options, before the bundle is loaded."""
    from lattice.io import format_from_name
    from lattice.pipeline.model_run import OUTPUT_FORMATS

    if output_format is not None:
        if output_format not in OUTPUT_FORMATS:
            fail(
                f"--output-format must be one of {', '.join(OUTPUT_FORMATS)}, got {output_format!r}",
                EXIT_USAGE,
            )
    if to_classification:
        fmt = output_format or (format_from_name(output) if output not in (None, "-") else None) or "npz"
        if fmt not in ("las", "laz"):
            fail(
                f"--to-classification writes the LAS/LAZ classification field; the output would be {fmt} "
                "(give -o OUT.las or --output-format las)",
                EXIT_USAGE,
            )


def check_checksum(model: Path, bundle, required: bool) -> None:
    """A warning, or with ``--require-checksum`` an error (exit 1), for weights loaded unchecked."""
    if bundle.checksum_verified:
        return
    missing = f"{model}: model.json records no weights.sha256"
    if required:
        fail(f"{missing}, and --require-checksum refuses weights that cannot be checked")
    warn(
        f"{missing}: the weights were loaded without an integrity check (--require-checksum refuses such bundles)"
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
    label_field: Annotated[
        str, typer.Option("--label-field", help="Name of the predicted class-id field.")
    ] = "pred_label",
    replace_field: Annotated[
        bool,
        typer.Option("--replace-field", help="Allow writing over an input attribute of the same name."),
    ] = False,
    probabilities: Annotated[
        bool,
        typer.Option("--probabilities", "-p", help="Also write pred_prob_<class> (float32) per class."),
    ] = False,
    colorize: Annotated[
        bool,
        typer.Option(
            "--colorize",
            help="Write class colours: pred_red/green/blue, or red/green/blue if the input has none.",
        ),
    ] = False,
    no_colors: Annotated[
        bool, typer.Option("--no-colors", hidden=True, help="Deprecated: colours are off unless --colorize.")
    ] = False,
    to_classification: Annotated[
        bool,
        typer.Option(
            "--to-classification",
            help="LAS/LAZ output: write the ASPRS codes of the classes into classification.",
        ),
    ] = False,
    strict_domain: Annotated[
        bool,
        typer.Option(
            "--strict-domain", help="Fail (exit 1, nothing written) for inputs outside the training domain."
        ),
    ] = False,
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
    require_checksum: Annotated[
        bool,
        typer.Option(
            "--require-checksum",
            help="Fail (exit 1) for a bundle whose model.json records no weights.sha256 (default: warn).",
        ),
    ] = False,
    fmt: FormatOpt = None,
    columns: ColumnsOpt = None,
    overwrite: OverwriteOpt = False,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a model bundle on point clouds: preprocess as model.json says, predict, map back to every point.

    Writes the input cloud, every attribute kept, plus `pred_label` (class id per point),
    `pred_class` names (NPZ), and on request `pred_prob_<class>`, class colours
    (--colorize) and LAS `classification` (--to-classification). Warns about inputs far
    from the bundle's training domain.
    """
    from lattice.models.spec import INTERPOLATIONS
    from lattice.pipeline.model_run import QUANTIZE, cached_bundle

    if quantize is not None and quantize not in QUANTIZE:
        fail(f"--quantize must be one of {', '.join(QUANTIZE)}, got {quantize!r}", EXIT_USAGE)
    if device not in ("cpu", "gpu"):
        fail(f"--device must be cpu or gpu, got {device!r}", EXIT_USAGE)
    if interpolation is not None and interpolation not in INTERPOLATIONS:
        fail(f"--interpolation must be one of {', '.join(INTERPOLATIONS)}, got {interpolation!r}", EXIT_USAGE)
    if output_format is not None:
        output_format = output_format.lower().lstrip(".")
    check_usage(output, output_format, to_classification)
    if no_colors:
        warn("--no-colors is deprecated and does nothing: class colours are written only with --colorize")
    try:
        bundle = cached_bundle(str(model), quantize)  # a bad bundle fails once, before any input is read
    except Exception as err:  # one clear line, never a traceback
        fail(error_message(err))
    check_checksum(model, bundle, require_checksum)
    if device == "gpu":
        from lattice_cli.commands.explain import gpu_available

        if not gpu_available():
            fail(
                "--device gpu: no GPU is available to MLX on this machine (lattice backend lists the devices)"
            )
    if bundle.task == "classification":
        warn(f"{model}: a classifier gives every point of a cloud the cloud's label")
    if strict_domain and bundle.domain is None:
        warn(f"{model}: the bundle records no training domain; --strict-domain checks nothing")
    from lattice.pipeline.model_run import model_run_parameters

    options = {  # what changes the output: passed to the job and recorded by its outputs
        "quantize": quantize,
        "probabilities": probabilities,
        "label_field": label_field,
        "replace_field": replace_field,
        "colorize": colorize,
        "to_classification": to_classification,
        "strict_domain": strict_domain,
        "interpolation": interpolation,
        "device": device,
    }
    job = functools.partial(
        run_and_warn, model=str(model), format=fmt, columns=columns, output_format=output_format, **options
    )
    parameters = model_run_parameters(model=str(model), output_format=output_format or "npz", **options)
    from lattice.pipeline.batch import Expect

    expect = Expect("model-run", parameters)
    outputs = Outputs(output, output_dir, output_format or "npz", overwrite, workers, as_json, scheduler)
    run_files(job, inputs, outputs, describe=describe, accept=is_point_input, expect=expect)
