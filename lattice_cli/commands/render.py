"""`lattice render`: a picture of a point cloud or of model-run output."""

from __future__ import annotations

from pathlib import Path

import typer

from lattice_cli.common import ColumnsOpt, error_message, fail


def render(
    input: Path = typer.Argument(..., help="A point-cloud file (e.g. lattice model-run output)."),
    output: Path = typer.Option(..., "--output", "-o", help="The PNG to write."),
    color: str = typer.Option(
        "label",
        "--color",
        help="label (pred_label, else label, else classification) | height | intensity | rgb | feature:N",
    ),
    width: int = typer.Option(1600, "--width", min=200, max=8000),
    height: int = typer.Option(800, "--height", min=100, max=8000),
    fmt: str | None = typer.Option(None, "--format", help="Input format when the extension does not tell."),
    columns: ColumnsOpt = None,
) -> None:
    """Top-down and perspective views of a point cloud, coloured by label (with a legend) or a value."""
    from lattice.io import PointCloudError, atomic_write, read_points
    from lattice.render import label_field, render_cloud

    if output.suffix.lower() != ".png":
        fail(f"--output must be a .png file, got {output}", code=2)
    try:
        cloud = read_points(input, format=fmt, columns=columns)
        image = render_cloud(cloud, color=color, width=width, height=height)
        with atomic_write(output) as f:
            image.save(f, format="PNG")
    except (PointCloudError, ValueError, OSError) as err:
        fail(error_message(err))
    shown = f"label ({label_field(cloud)})" if color == "label" else color
    typer.echo(f"{input} -> {output} ({width}x{height}, colour {shown})")
