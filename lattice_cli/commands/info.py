"""`lattice backend` (what this build can run on) and `lattice info` (what a file holds)."""

from __future__ import annotations

import dataclasses
import json
from typing import Annotated

import typer

from lattice_cli.common import ColumnsOpt, FormatOpt, JsonOpt, error_message, fail, input_stream


def backend(
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable summary."),
) -> None:
    """Show the version, compiled backends, BLAS and device."""
    import lattice

    info = dataclasses.asdict(lattice.backend_info())
    if as_json:
        typer.echo(json.dumps(info))
        return
    for k, v in info.items():
        typer.echo(f"{k:18} {v}")


def info(
    input: Annotated[str, typer.Argument(help="A point-cloud or sparse-tensor file; - reads stdin.")],
    fmt: FormatOpt = None,
    columns: ColumnsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show what a file holds: points, attributes and bounds, or a sparse tensor's rows, stride and channels."""
    from lattice.pipeline import describe_file

    try:
        d = describe_file(input_stream(input), format=fmt, columns=columns)
    except Exception as err:  # one clear line, never a traceback
        fail(error_message(err))
    d["file"] = input
    if as_json:
        typer.echo(json.dumps(d))
        return
    typer.echo("\n".join(_points_text(d) if d["kind"] == "points" else _sparse_text(d)))


def _fmt(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _points_text(d: dict) -> list[str]:
    lines = [
        f"{d['file']}: point cloud ({d['format']})",
        f"  points      {d['points']} ({d['dtype']}), {d['nonfinite']} with NaN/Inf coordinates",
    ]
    if d["bounds"]:
        lines.append(f"  bounds      min {_fmt(d['bounds']['min'])}  max {_fmt(d['bounds']['max'])}")
    if not d["attributes"]:
        lines.append("  attributes  none")
    for a in d["attributes"]:
        shape = f"x{a['shape'][0]}" if a["shape"] else ""
        lines.append(f"  {a['name']:<11} {a['dtype']}{shape}  min {_fmt(a['min'])}  max {_fmt(a['max'])}")
    return lines


def _sparse_text(d: dict) -> list[str]:
    lines = [
        f"{d['file']}: sparse tensor ({d['format']})",
        f"  rows        {d['rows']} in {d['batches']} batch(es) {d['rows_per_batch']}",
        f"  stride      {d['stride']}   voxel size {_fmt(d['voxel_size'])}   origin {_fmt(d['origin'])}",
        f"  channels    {d['channels']} ({d['feats_dtype']}): {', '.join(d['feature_names']) or 'none'}",
    ]
    if d["bounds"]:
        b = d["bounds"]
        lines.append(f"  coords      {b['coords_min']} .. {b['coords_max']}")
        lines.append(f"  bounds      min {_fmt(b['min'])}  max {_fmt(b['max'])}")
    for c in d["channel_stats"]:
        lines.append(f"  {c['name']:<11} min {_fmt(c['min'])}  max {_fmt(c['max'])}  mean {_fmt(c['mean'])}")
    return lines
