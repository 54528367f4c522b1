"""`lattice backend` (what this build can run on) and `lattice info` (what a file holds).

``info`` prints ``lattice.pipeline.describe_file``'s dict: as JSON with ``--json`` (full
precision), else as aligned text, one fact per line, never wrapped (pipes and logs get the
same lines a terminal does). Over several files it runs ``describe_job`` through the batch
engine (``run_batch``, any executor) and prints each description in input order.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Annotated

import typer

from lattice_cli.common import (
    EXIT_FAILED,
    EXIT_USAGE,
    STDIO,
    ColumnsOpt,
    FormatOpt,
    JsonOpt,
    SchedulerOpt,
    WorkersOpt,
    error_message,
    fail,
    input_stream,
    is_directory,
    is_point_input,
    warn,
)


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
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Point-cloud or sparse-tensor files, directories, quoted globs or s3:// URLs; - reads stdin."
        ),
    ],
    fmt: FormatOpt = None,
    columns: ColumnsOpt = None,
    workers: WorkersOpt = None,
    scheduler: SchedulerOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Show what a file holds: points, bounds, attribute kinds, statistics and class counts, a LAS
    header and its CRS; or a sparse tensor's rows, stride, channels, provenance and source.
    Several files, a directory or a glob are described one after the other (--workers / --scheduler
    spread them out), then counted."""
    if len(inputs) == 1 and not (set("*?[") & set(inputs[0])) and not is_directory(inputs[0]):
        if workers is not None or scheduler is not None:
            fail("--workers and --scheduler apply to several inputs, a directory or a pattern", EXIT_USAGE)
        _one(inputs[0], fmt, columns, as_json)
        return
    if STDIO in inputs:
        fail("- (stdin) cannot be described with other inputs; give it alone", EXIT_USAGE)
    _many(inputs, fmt, columns, workers, scheduler, as_json)


def _one(input: str, fmt, columns, as_json: bool) -> None:
    from lattice.pipeline import describe_file

    try:
        d = describe_file(input_stream(input), format=fmt, columns=columns)
    except Exception as err:  # one clear line, never a traceback
        fail(error_message(err))
    d["file"] = input
    if as_json:
        typer.echo(json.dumps(d))
        return
    typer.echo("\n".join(describe_text(d)))


def describe_text(d: dict) -> list[str]:
    """The text lines of one ``describe_file`` dict."""
    return points_text(d) if d["kind"] == "points" else sparse_text(d)


def _many(inputs: list[str], fmt, columns, workers, scheduler, as_json: bool) -> None:
    """Every file through ``lattice.pipeline.run_batch`` (no outputs): the descriptions in input
    order, then the counts; ``--json``: the batch summary, each file's description as its summary."""
    import functools

    from lattice.pipeline.describe import describe_job
    from lattice_cli.batch import Outputs, run_reads

    job = functools.partial(describe_job, format=fmt, columns=columns)
    outputs = Outputs(None, None, workers=workers, as_json=as_json, scheduler=scheduler)
    summary = run_reads(job, inputs, outputs, is_point_input)
    if as_json:
        typer.echo(json.dumps(summary.to_dict()))
    else:
        for f in summary.files:
            if f.status == "skipped":
                warn(f"skipped {f.input}: {f.reason}")
            elif f.summary is not None:
                typer.echo("\n".join(describe_text({**f.summary, "file": f.input})) + "\n")
        typer.echo(
            f"described {summary.done}, skipped {summary.skipped}, failed {summary.failed} ({len(summary.files)} inputs)"
        )
    if summary.failed:
        raise typer.Exit(EXIT_FAILED)


# ---- text -------------------------------------------------------------------------------


def num(v) -> str:
    """A number as the JSON holds it: ints plainly, floats by their shortest exact text."""
    if isinstance(v, list):
        return "[" + ", ".join(num(x) for x in v) + "]"
    if v is None:
        return "-"
    return repr(v) if isinstance(v, float) else str(v)


def _mean(v) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_mean(x) for x in v) + "]"
    return "-" if v is None else f"{v:.10g}"


def table(rows: Sequence[Sequence[str]], indent: int = 4, right: Sequence[int] = ()) -> list[str]:
    """``rows`` as lines of left-aligned columns (``right``: indices of right-aligned ones)."""
    if not rows:
        return []
    widths = [max(len(r[i]) for r in rows if i < len(r)) for i in range(max(map(len, rows)))]
    lines = []
    for r in rows:
        cells = [c.rjust(widths[i]) if i in right else c.ljust(widths[i]) for i, c in enumerate(r)]
        lines.append((" " * indent + "  ".join(cells)).rstrip())
    return lines


def _bounds(b: dict) -> list[str]:
    rows = [["", "x", "y", "z"], ["min", *map(num, b["min"])], ["max", *map(num, b["max"])]]
    return ["  bounds", *table(rows, right=(1, 2, 3))]


def _kind(a: dict) -> str:
    kind = a.get("kind") or "-"
    return f"{kind} ({a['scale']:g})" if a.get("scale") is not None else kind


def _attributes(attrs: list[dict], title: str = "attributes") -> list[str]:
    if not attrs:
        return [f"  {title:<13} none"]
    rows = [["name", "kind", "dtype", "reduce", "min", "max", "mean"]]
    for a in attrs:
        dtype = a.get("source_dtype") or a["dtype"]
        dtype += f"x{a['shape'][0]}" if a.get("shape") else ""
        rows.append(
            [
                a["name"],
                _kind(a),
                dtype,
                a.get("reduction") or "-",
                num(a["min"]),
                num(a["max"]),
                _mean(a["mean"]),
            ]
        )
    return [f"  {title}", *table(rows, right=(4, 5, 6))]


def _histogram(name: str, h: dict) -> list[str]:
    bins = h["bins"]
    if not bins and not h["nan"]:
        return []
    if len(bins) == 1 and not h["other_values"] and not h["nan"]:
        label = f"{num(bins[0]['value'])}" + (f" {bins[0]['name']}" if bins[0].get("name") else "")
        return [f"  {name}: all {label} ({bins[0]['count']:,})"]
    head = f"  {name}: {h['distinct']} values" + (
        f", the {len(bins)} most frequent:" if h["other_values"] else ""
    )
    named = any("name" in b for b in bins)
    rows = [[num(b["value"]), *([b.get("name") or ""] if named else []), f"{b['count']:,}"] for b in bins]
    if h["other_values"]:
        rows.append([f"{h['other_values']} others", *([""] if named else []), f"{h['other_count']:,}"])
    if h["nan"]:
        rows.append(["NaN", *([""] if named else []), f"{h['nan']:,}"])
    return [head, *table(rows, right=(0, len(rows[-1]) - 1))]


def _records(title: str, records: list[dict]) -> list[str]:
    rows = [
        [r["user_id"] or "", str(r["record_id"]), r["description"] or "", f"{r['bytes']} bytes"]
        for r in records
    ]
    return [f"    {title:<13} {len(records) or 'none'}", *table(rows, indent=6, right=(1, 3))]


def _las(h: dict) -> list[str]:
    fields = [
        ("version", h["version"]),
        ("point format", h["point_format"]),
        ("point count", h["points"]),
        ("scale", " ".join(map(num, h["scales"]))),
        ("offset", " ".join(map(num, h["offsets"]))),
        ("system id", h["system_identifier"]),
        ("software", h["generating_software"]),
        ("created", h["creation_date"] or "not stated"),
        ("encoding", h["global_encoding"]),
        ("file source", h["file_source_id"]),
        ("project id", h["guid"]),
    ]
    lines = ["  LAS header", *(f"    {k:<13} {v}" for k, v in fields)]
    return lines + _records("VLRs", h["vlrs"]) + (_records("EVLRs", h["evlrs"]) if h["evlrs"] else [])


def _crs(d: dict) -> list[str]:
    crs = d.get("crs")
    lines = []
    if crs:
        lines.append(f"  CRS           {crs['name'] or '(no name stated)'}")
        lines.append(f"    EPSG        {crs['epsg'] if crs['epsg'] is not None else 'not stated'}")
        for key, label in (
            ("geographic_epsg", "base EPSG"),
            ("vertical_epsg", "vertical EPSG"),
            ("units", "units"),
        ):
            if crs.get(key) is not None:
                lines.append(f"    {label:<11} {crs[key]}")
        lines.append(f"    from        {'the WKT record' if crs['source'] == 'wkt' else 'the GeoTIFF keys'}")
    elif "crs" in d:
        lines.append("  CRS           " + ("none parsed" if d.get("crs_error") else "none stated"))
    if d.get("crs_error"):
        lines.append(f"    error       {d['crs_error']}")
    return lines


def points_text(d: dict) -> list[str]:
    """The text ``lattice info`` prints for a point cloud."""
    lines = [
        f"{d['file']}: point cloud ({d['format']})",
        f"  points      {d['points']} ({d['dtype']}), {d['nonfinite']} with NaN/Inf coordinates",
    ]
    if d["bounds"]:
        lines += _bounds(d["bounds"])
    if "las" in d:
        lines += _las(d["las"])
    lines += _crs(d) + _attributes(d["attributes"])
    for a in d["attributes"]:
        if "histogram" in a:
            lines += _histogram(a["name"], a["histogram"])
    return lines


def sparse_text(d: dict) -> list[str]:
    """The text ``lattice info`` prints for a sparse tensor."""
    lines = [
        f"{d['file']}: sparse tensor ({d['format']})",
        f"  rows        {d['rows']} in {d['batches']} batch(es): "
        + (
            ", ".join(f"{b}: {n}" for b, n in zip(d.get("batch_ids", []), d["rows_per_batch"], strict=False))
            or "none"
        ),
        f"  stride      {d['stride']}   voxel size {num(d['voxel_size'])}   origin {num(d['origin'])}",
        f"  channels    {d['channels']} ({d['feats_dtype']}): {', '.join(d['feature_names']) or 'none'}",
    ]
    if d["bounds"]:
        b = d["bounds"]
        lines.append(f"  coords      {b['coords_min']} .. {b['coords_max']}")
        lines.append(f"  bounds      min {num(b['min'])}  max {num(b['max'])}")
    if d.get("source_format"):
        lines.append(f"  source      {d['source_format']}")
    if d.get("provenance"):
        lines.append(f"  provenance  {json.dumps(d['provenance'])}")
    lines += _crs(d) + _attributes(d["channel_stats"], "per channel")
    for c in d["channel_stats"]:
        if "histogram" in c:
            lines += _histogram(c["name"], c["histogram"])
    return lines
