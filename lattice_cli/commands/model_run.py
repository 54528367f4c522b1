"""`lattice model-run`: run a model bundle on point clouds (not available until models land)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lattice_cli.common import InputsArg, JsonOpt, OutputDirOpt, OutputOpt, fail

NOT_AVAILABLE = (
    "model-run is not available yet: the model issue has not landed, so no model bundle "
    "(model.json + weights.safetensors, DESIGN.md section 6) can be loaded in this version"
)


def model_run(
    model: Annotated[Path, typer.Argument(help="Model bundle directory (model.json + weights.safetensors).")],
    inputs: InputsArg,
    output: OutputOpt = None,
    output_dir: OutputDirOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Run a model bundle on point clouds and write per-point / per-voxel outputs (not available yet)."""
    fail(NOT_AVAILABLE)
