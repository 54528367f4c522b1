"""`lattice render`: a picture (PNG or JPEG) of a point cloud, model-run output or sparse tensor."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from lattice_cli.common import ColumnsOpt, FormatOpt, JsonOpt, error_message, fail, input_stream

COLOR_HELP = (
    "auto (default: the class field pred_label/label/classification, else rgb, else intensity, "
    "else height) | label | rgb | intensity | height | feature:NAME (any attribute or voxel channel)"
)


def parse_size(text: str) -> tuple[int, int]:
    """``WxH`` -> (W, H), each in 200..8000 / 100..8000; a usage error otherwise."""
    parts = text.lower().replace("*", "x").split("x")
    try:
        w, h = (int(p) for p in parts)
    except ValueError:
        fail(f"--size must be WIDTHxHEIGHT, e.g. 1600x800, got {text!r}", code=2)
    if not (200 <= w <= 8000 and 100 <= h <= 8000):
        fail(f"--size must be 200..8000 wide and 100..8000 high, got {w}x{h}", code=2)
    return w, h


def parse_views(values: list[str] | None) -> tuple[str, ...]:
    from lattice.render import DEFAULT_VIEWS, VIEWS

    views = tuple(v.strip() for text in values or [] for v in text.split(",") if v.strip())
    bad = [v for v in views if v not in VIEWS]
    if bad:
        fail(f"--view must be among {', '.join(VIEWS)}, got {', '.join(bad)}", code=2)
    return views or DEFAULT_VIEWS


def render(
    input: Annotated[
        str, typer.Argument(help="A point-cloud file, model-run output or sparse-tensor NPZ; - reads stdin.")
    ],
    output: Annotated[str, typer.Option("--output", "-o", help="The picture to write: .png, .jpg or .jpeg.")],
    color: Annotated[str, typer.Option("--color", "-c", help=COLOR_HELP)] = "auto",
    size: Annotated[
        str | None, typer.Option("--size", help="Picture size WIDTHxHEIGHT (default 1600x800).")
    ] = None,
    width: Annotated[
        int, typer.Option("--width", min=200, max=8000, help="Picture width (or --size).")
    ] = 1600,
    height: Annotated[
        int, typer.Option("--height", min=100, max=8000, help="Picture height (or --size).")
    ] = 800,
    view: Annotated[
        list[str] | None,
        typer.Option(
            "--view",
            help="top, side, front, perspective; repeat or comma-separate (default top,perspective).",
        ),
    ] = None,
    up: Annotated[
        str | None, typer.Option("--up", help="Up axis z, y or x (or -z, -y, -x); detected by default.")
    ] = None,
    point_size: Annotated[
        int | None,
        typer.Option("--point-size", min=1, max=32, help="Splat size in pixels (default: from density)."),
    ] = None,
    max_points: Annotated[
        int,
        typer.Option(
            "--max-points", min=1, help="Draw an even subsample (fixed seed) above this many points."
        ),
    ] = 2_000_000,
    fmt: FormatOpt = None,
    columns: ColumnsOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Views of a point cloud side by side (default: top-down and perspective), coloured by what
    the data holds, with a legend or colour bar beside the data and a scale bar."""
    from lattice.io import PointCloudError, atomic_write
    from lattice.render import UP_AXES, picture_format, read_for_render, render_picture

    try:
        image_format = picture_format(output)
    except ValueError as err:
        fail(f"--output: {err}", code=2)
    w, h = parse_size(size) if size else (width, height)
    views = parse_views(view)
    if up is not None and up not in UP_AXES:
        fail(f"--up must be one of {', '.join(UP_AXES)}, got {up!r}", code=2)
    try:
        cloud, about = read_for_render(input_stream(input), format=fmt, columns=columns)
        pic = render_picture(
            cloud, color=color, width=w, height=h, views=views, up=up, point_size=point_size,
            max_points=max_points, about=about,
        )  # fmt: skip
        with atomic_write(output) as f:
            pic.image.save(f, format=image_format, **({"quality": 92} if image_format == "JPEG" else {}))
    except (PointCloudError, ValueError, OSError) as err:
        fail(error_message(err))
    summary = {
        "file": input, "output": output, "size": [w, h], "colour": pic.colouring.shown,
        "up": pic.up.axis, "up_reason": pic.up.reason, "views": list(views), "drawn": pic.drawn,
        "points": pic.total, "kind": about.kind,
    }  # fmt: skip
    if as_json:
        typer.echo(json.dumps(summary))
        return
    typer.echo(
        f"{input} -> {output} ({w}x{h}, colour {pic.colouring.shown}, up {pic.up.axis}, "
        f"{pic.drawn:,} of {pic.total:,} {about.kind} drawn)"
    )
