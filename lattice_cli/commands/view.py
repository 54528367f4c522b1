"""`lattice view`: one self-contained HTML page with an interactive WebGL view of a cloud."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from lattice_cli.common import ColumnsOpt, FormatOpt, JsonOpt, error_message, fail, input_stream


def view(
    input: Annotated[
        str, typer.Argument(help="A point-cloud file, model-run output or sparse-tensor NPZ; - reads stdin.")
    ],
    output: Annotated[str, typer.Option("--output", "-o", help="The .html page to write.")],
    max_points: Annotated[
        int,
        typer.Option(
            "--max-points", min=1, help="Show an even subsample (fixed seed) above this many points."
        ),
    ] = 2_000_000,
    up: Annotated[
        str | None, typer.Option("--up", help="Up axis z, y or x (or -z, -y, -x); detected by default.")
    ] = None,
    point_size: Annotated[
        int | None, typer.Option("--point-size", min=1, max=12, help="Initial point size in pixels.")
    ] = None,
    open_page: Annotated[bool, typer.Option("--open", help="Open the page in the default browser.")] = False,
    fmt: FormatOpt = None,
    columns: ColumnsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Write an interactive 3-D view (orbit, pan, zoom, colour by any attribute, class toggles) as
    one HTML file that opens offline in any browser."""
    from lattice.io import PointCloudError
    from lattice.render.views import UP_AXES
    from lattice.viewer import write_view

    if not output.lower().endswith((".html", ".htm")):
        fail(f"--output must be an .html file, got {output!r}", code=2)
    if up is not None and up not in UP_AXES:
        fail(f"--up must be one of {', '.join(UP_AXES)}, got {up!r}", code=2)
    try:
        summary = write_view(
            input_stream(input), output, format=fmt, columns=columns, max_points=max_points, up=up,
            point_size=point_size,
        )  # fmt: skip
    except (PointCloudError, ValueError, OSError) as err:
        fail(error_message(err))
    summary["file"] = input
    if open_page:
        import webbrowser
        from pathlib import Path

        webbrowser.open(Path(output).resolve().as_uri())
    if as_json:
        typer.echo(json.dumps(summary))
        return
    typer.echo(
        f"{input} -> {output} ({summary['shown']:,} of {summary['points']:,} {summary['kind']}, "
        f"up {summary['up']}, {summary['bytes'] / 1e6:.1f} MB; colour by {', '.join(summary['colourings'])})"
    )
