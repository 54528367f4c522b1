"""`lattice explain`: which backend route an op takes, and why the others were not taken."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer

from lattice_cli.common import ColumnsOpt, error_message, fail, parse_int_list, stdout_console


def explain(
    op: str = typer.Argument(..., help="Op name, e.g. conv3d, subm_conv3d, conv_transpose3d."),
    input: Path | None = typer.Argument(
        None, help="A point-cloud file: relation statistics are measured on it."
    ),
    channels: str = typer.Option("32,32", "--channels", help="C_in,C_out."),
    kernel_size: int = typer.Option(3, "--kernel-size", "-k"),
    stride: int = typer.Option(1, "--stride", "-s"),
    dtype: str = typer.Option("float32", "--dtype", help="float32 | float16 | bfloat16."),
    device: str | None = typer.Option(None, "--device", help="cpu | gpu (default: MLX's default device)."),
    voxel_size: float = typer.Option(0.05, "--voxel-size", help="Voxel size for a point-cloud input."),
    rows: int = typer.Option(100_000, "--rows", help="Active rows of the synthetic input."),
    fmt: str | None = typer.Option(None, "--format", help="Input format when the extension does not tell."),
    columns: ColumnsOpt = None,
    quantize: str | None = typer.Option(
        None, "--quantize", help="int8 | int4: explain with a packed weight."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print a machine-readable result."),
) -> None:
    """Show the route an op takes: chosen route, reason, each rejected route and the failed predicate."""
    from lattice.routing import explain as ex

    if dtype not in ("float32", "float16", "bfloat16"):
        fail(f"--dtype must be float32, float16 or bfloat16, got {dtype!r}", code=2)
    if device is not None and device not in ("cpu", "gpu"):
        fail(f"--device must be cpu or gpu, got {device!r}", code=2)
    if device == "gpu":
        if not gpu_available():
            fail(
                "--device gpu: no GPU is available to MLX on this machine (lattice backend lists the devices)"
            )
    bits = {None: None, "int8": 8, "int4": 4}.get(quantize, -1)
    if bits == -1:
        fail(f"--quantize must be int8 or int4, got {quantize!r}", code=2)
    request = ex.ExplainRequest(
        tuple(parse_int_list(channels, "--channels")), kernel_size, stride, dtype, device, bits
    )
    try:
        if input is not None:
            from lattice.io import read_points

            cloud = read_points(input, format=fmt, columns=columns).drop_nan()
            x = ex.points_input(op, request, cloud.points, voxel_size)
            source = f"{input} at {voxel_size} voxel size"
        else:
            x = ex.synthetic_input(op, request, rows)
            source = f"synthetic: {x.active_count} random voxels"
        t0 = time.perf_counter()
        route = ex.explain_on(op, x, request)
        plan_ms = (time.perf_counter() - t0) * 1e3
    except (ValueError, TypeError, OSError) as err:
        fail(error_message(err))
    result = route.as_dict() | {"input": source, "plan_ms": round(plan_ms, 2)}
    if as_json:
        typer.echo(json.dumps(result))
        return
    _print_table(result)


def gpu_available() -> bool:
    """Whether MLX has a GPU in this process (``--device gpu`` needs one)."""
    import mlx.core as mx

    return bool(mx.is_available(mx.gpu))


def _print_table(result: dict) -> None:
    from rich.table import Table

    console = stdout_console()
    console.print(f"[bold]{result['op']}[/] on {result['input']}")
    console.print(f"route  [bold green]{result['route']}[/]")
    console.print(f"why    {result['reason']}")
    if result.get("implementation"):
        console.print(f"impl   {result['implementation']}")
    facts = result["facts"]
    if facts:
        console.print("facts  " + ", ".join(f"{k}={v}" for k, v in facts.items()))
    console.print(
        f"plan   {result['plan_ms']} ms (checked, routed, relations built or fetched from the cache; no kernel run)"
    )
    if result["rejected"]:
        table = Table("rejected route", "failed predicate", box=None, pad_edge=False, expand=False)
        for r in result["rejected"]:
            table.add_row(r["route"], r["failed"])
        console.print(table)
