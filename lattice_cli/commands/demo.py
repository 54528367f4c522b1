"""`lattice demo`: voxelize -> pool -> upsample on the bundled synthetic room, with a summary."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from lattice_cli.common import JsonOpt, error_message, fail, stdout_console


def demo(
    output_dir: Annotated[
        Path | None,
        typer.Option("--output-dir", "-d", help="Also write room.ply and the three tensors here."),
    ] = None,
    voxel_size: Annotated[float, typer.Option("--voxel-size", "-s", help="Voxel edge in metres.")] = 0.1,
    points: Annotated[
        int, typer.Option("--points", min=100, help="Points in the generated sample.")
    ] = 50_000,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the generated sample.")] = 0,
    as_json: JsonOpt = False,
) -> None:
    """Run the main job end to end on a bundled sample scan (no files needed) and print a summary."""
    from lattice.pipeline import run_demo

    try:
        result = run_demo(voxel_size=voxel_size, points=points, seed=seed, output_dir=output_dir)
    except Exception as err:  # one clear line, never a traceback
        fail(error_message(err))
    if as_json:
        typer.echo(json.dumps(result))
        return
    _print(result)


def _print(r: dict) -> None:
    from rich.table import Table

    console = stdout_console(highlight=False)
    console.print(f"[bold]lattice demo[/] on a {r['sample']}")
    table = Table("stage", "rows", "stride", "ms", box=None, pad_edge=False)
    strides = [None, r["stride"]["voxels"], r["stride"]["pooled"], r["stride"]["upsampled"]]
    for stage, stride in zip(r["stages"], strides, strict=True):
        table.add_row(
            stage["stage"],
            str(stage["rows"]),
            "" if stride is None else str(stride),
            f"{stage['seconds'] * 1e3:.1f}",
        )
    console.print(table)
    console.print(f"voxel size {r['voxel_size']} m; channels: {', '.join(r['feature_names'])}")
    change = ", ".join(f"{k} {v:g}" for k, v in r["mean_abs_change"].items())
    console.print(f"mean |upsampled - voxels| per channel: {change}")
    for path in r["written"]:
        console.print(f"wrote {path}")
