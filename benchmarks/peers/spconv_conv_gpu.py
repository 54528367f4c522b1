"""spconv SubMConv3d(C, C, 3) on the GPU over saved coordinates, beside bench_conv_gpu.py.

Run with a Python that has torch (CUDA) and spconv-cu126, never a lattice dependency
(tools/gpu_job.sh ``peer`` does this on the GPU machine):

    python3 benchmarks/peers/spconv_conv_gpu.py build/shells.npy [--repeats 20] [--json out.json]

COORDS (positional or ``--coords``): the (N, 4) int32 batch, x, y, z .npy that
``bench_conv_gpu.py --save-coords`` writes, shifted here to be non-negative as spconv needs.
For each C of ``--channels`` (32 64) and dtype of ``--dtypes`` (float32 float16), medians
and [min, max] (ms) of ``--repeats`` calls after ``--warmup`` untimed ones, each call
between two ``torch.cuda.synchronize()``:

- fresh: a new SparseConvTensor from the indices and the convolution, indices to output
  features; spconv builds its kernel map inside the call (bench_conv_gpu.py's
  fresh_1eval_ms times the same);
- reused: the same with the kernel map of an earlier call (``indice_key``: the new tensor
  gets that call's output's ``indice_dict``), bench_conv_gpu.py's reused_ms;
- fwd_bwd: forward + backward (feature and weight gradients of the float32 sum of the
  output), map reused, bench_conv_gpu.py's fwd_bwd_ms.

edges = the kernel map's (input, output) pairs, the centre included. spconv's default
algorithm on CUDA (MaskImplicitGemm); float32 without TF32 unless ``--tf32`` (MLX's float32
matmuls use TF32 by default). ``--device cpu`` (the Native algorithm; spconv's CPU build has
no backward pass) only checks the script where there is no GPU: its times mean nothing here.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
from _spconv import add_input_args, algorithm, check_input_args, load_indices
from spconv import __version__ as spconv_version
from spconv import constants as spconv_constants
from spconv import pytorch as spconv

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from _common import report, timed_ms  # noqa: E402

DTYPES = {"float32": torch.float32, "float16": torch.float16}


def edge_count(data) -> int | None:
    """The (input, output) pairs of spconv's kernel map ``data``, the centre included."""
    if getattr(data, "pair_fwd", None) is not None:  # implicit GEMM: -1 where no neighbour
        return int((data.pair_fwd >= 0).sum())
    return None  # Native's submanifold map keeps half the offsets and no centre: not comparable


def _summary(times: list[float] | None) -> tuple[float | None, str]:
    if not times:
        return None, "n/a"
    return round(statistics.median(times), 3), f"{min(times):.3f}-{max(times):.3f}"


def bench_one(idx, shape, c: int, dtype: torch.dtype, args, algo) -> dict:
    """One table row: fresh, reused and forward + backward of SubMConv3d(c, c, 3)."""
    device = idx.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    torch.manual_seed(0)
    feats = torch.randn(len(idx), c, device=device).to(dtype)
    conv = spconv.SubMConv3d(c, c, 3, bias=False, indice_key="subm", algo=algo).to(device, dtype)

    def fresh():
        with torch.no_grad():
            conv(spconv.SparseConvTensor(feats, idx, shape, 1))

    with torch.no_grad():
        maps = conv(spconv.SparseConvTensor(feats, idx, shape, 1)).indice_dict

    def reused():
        with torch.no_grad():
            conv(spconv.SparseConvTensor(feats, idx, shape, 1, indice_dict=maps))

    leaf = feats.clone().requires_grad_(True)

    def fwd_bwd():
        y = conv(spconv.SparseConvTensor(leaf, idx, shape, 1, indice_dict=maps))
        y.features.float().sum().backward()

    def clear_grads():
        leaf.grad, conv.weight.grad = None, None

    fresh_ms, fresh_range = _summary(timed_ms(fresh, args.repeats, args.warmup, sync))
    reused_ms, reused_range = _summary(timed_ms(reused, args.repeats, args.warmup, sync))
    # spconv's CPU build has no backward pass ("Torch not compiled with CUDA enabled")
    bwd = (
        timed_ms(fwd_bwd, args.repeats, args.warmup, sync, reset=clear_grads)
        if device.type == "cuda"
        else None
    )
    fwd_bwd_ms, _ = _summary(bwd)
    return {
        "N": len(idx),
        "edges": edge_count(maps["subm"]),
        "C": f"{c}->{c}",
        "dtype": str(dtype).split(".")[-1],
        "fresh_ms": fresh_ms,
        "fresh_range": fresh_range,
        "reused_ms": reused_ms,
        "reused_range": reused_range,
        "fwd_bwd_ms": fwd_bwd_ms,
        "algo": algo.name,
        "tf32": args.tf32,
    }


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_input_args(ap, "cuda")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls before each timing")
    ap.add_argument("--channels", type=int, nargs="+", default=[32, 64])
    ap.add_argument("--dtypes", nargs="+", default=["float32", "float16"], choices=list(DTYPES))
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = ap.parse_args()
    check_input_args(ap, args)
    if args.repeats < 1 or args.warmup < 0:
        ap.error(f"--repeats must be >= 1 and --warmup >= 0, got {args.repeats} and {args.warmup}")
    return args


def main() -> None:
    args = parse_args()
    spconv_constants.SPCONV_ALLOW_TF32 = args.tf32
    algo = algorithm(args)
    idx, shape = load_indices(args.coords, margin=1)
    idx = idx.to(args.device)
    rows = [bench_one(idx, shape, c, DTYPES[d], args, algo) for c in args.channels for d in args.dtypes]
    card = torch.cuda.get_device_name() if args.device == "cuda" else "CPU, smoke test only"
    title = f"spconv {spconv_version} SubMConv3d k=3 (torch {torch.__version__}, {card})"
    report(rows, title, args.json)


if __name__ == "__main__":
    main()
