"""What the spconv peer scripts share: their indices, their input arguments, their algorithm.

Imported by the scripts beside it (their folder is the first entry of ``sys.path`` when run),
in the peer environment (torch + spconv), never by lattice.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from spconv import pytorch as spconv


def nonnegative(coords: np.ndarray, margin: int) -> tuple[torch.Tensor, list[int]]:
    """int32 (N, 4) batch, x, y, z as a tensor shifted to non-negative x, y, z (spconv needs
    them), and its spatial shape: the largest index plus ``margin`` per axis."""
    idx = torch.from_numpy(np.ascontiguousarray(coords, dtype=np.int32))
    idx[:, 1:] -= idx[:, 1:].min(0).values
    return idx, (idx[:, 1:].max(0).values + margin).tolist()


def load_indices(path: str, margin: int, rows: int | None = None) -> tuple[torch.Tensor, list[int]]:
    """``nonnegative`` of the (N, 4) int32 .npy at ``path`` (its first ``rows``), as
    ``bench_conv_gpu.py --save-coords`` writes it."""
    return nonnegative(np.load(path)[:rows], margin)


def add_input_args(ap: argparse.ArgumentParser, device: str) -> None:
    """COORDS (positional, or ``--coords PATH``), ``--device`` (default ``device``), ``--tf32``
    and ``--algo``."""
    ap.add_argument("coords", nargs="?", help="(N, 4) int32 .npy: batch, x, y, z")
    ap.add_argument("--coords", dest="coords_path", metavar="PATH", help="the same, as an option")
    ap.add_argument("--device", default=device, choices=("cuda", "cpu"))
    ap.add_argument("--tf32", action="store_true", help="let spconv (and torch) use TF32 in float32")
    algos = ["auto", *(a.name for a in spconv.ConvAlgo)]
    ap.add_argument("--algo", default="auto", choices=algos, help="auto: Native on CPU, else spconv's")


def check_input_args(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """One COORDS (kept in ``args.coords``), and a CUDA device where ``--device cuda``."""
    if (args.coords is None) == (args.coords_path is None):
        ap.error("give the coordinates once: COORDS or --coords PATH")
    args.coords = args.coords or args.coords_path
    if args.device == "cuda" and not torch.cuda.is_available():
        ap.error(f"--device cuda: torch {torch.__version__} sees no CUDA device")


def algorithm(args: argparse.Namespace) -> spconv.ConvAlgo:
    """``--algo``: ``auto`` is Native on the CPU (its CPU build's only one) and spconv's default
    on CUDA (MaskImplicitGemm)."""
    if args.algo != "auto":
        return spconv.ConvAlgo[args.algo]
    return spconv.ConvAlgo.Native if args.device == "cpu" else spconv.ConvAlgo.MaskImplicitGemm
