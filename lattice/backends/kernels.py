"""GPU kernel sources, assembled for MLX's custom-kernel API.

A GPU kernel of lattice is written once: its logic lives in a shared body file
``kernels/<family>.inc`` written against a small set of dialect macros (address
spaces, thread indices, shared memory, barriers, atomics); ``cuda/dialect.cuh`` and
``metal/dialect.metal`` define those macros for CUDA and Metal. The entry points —
one ``mx.fast.cuda_kernel`` / ``mx.fast.metal_kernel`` each — are blocks of
``cuda/<family>.cu`` / ``metal/<family>.metal`` (the same stems as
``csrc/backend/cpu/``)::

    //@kernel subm_map
    //@inputs coords slots offsets params
    //@outputs map
    //@uses coords relations
    lt_subm_map(coords, slots, offsets, params, map, LT_THREAD_ID);

Kernel names carry a digest of their full source: MLX caches compiled kernels on disk
by name, so a changed source can never pick up a stale binary.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx

from lattice.routing.device import capability
from lattice.routing.types import Backend

_DIALECT = {"cuda": ("cuda", "dialect.cuh", ".cu"), "metal": ("metal", "dialect.metal", ".metal")}


def source_root() -> Path:
    """Folder holding ``kernels/``, ``cuda/`` and ``metal/``: installed beside the package
    (``lattice/_kernels``) or, in a source checkout, the repository root."""
    here = Path(__file__).resolve().parent.parent
    for root in (here / "_kernels", here.parent):
        if (root / "kernels").is_dir() and (root / "cuda").is_dir():
            return root
    raise FileNotFoundError(
        f"lattice GPU kernel sources not found (looked in {here / '_kernels'} and {here.parent})"
    )


@dataclass(frozen=True)
class KernelEntry:
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    uses: tuple[str, ...]
    source: str


def parse_entries(text: str, origin: str) -> dict[str, KernelEntry]:
    """The ``//@kernel`` blocks of an entry file."""
    entries: dict[str, KernelEntry] = {}
    cur: dict | None = None

    def close():
        if cur is not None:
            missing = [f for f in ("inputs", "outputs", "uses") if f not in cur]
            if missing:
                raise ValueError(f"{origin}: kernel {cur['name']!r} has no //@{missing[0]} line")
            entries[cur["name"]] = KernelEntry(
                cur["name"], cur["inputs"], cur["outputs"], cur["uses"], "\n".join(cur["body"]).strip() + "\n"
            )

    for line in text.splitlines():
        s = line.strip()
        if s.startswith("//@"):
            tag, _, rest = s[3:].partition(" ")
            if tag == "kernel":
                close()
                cur = {"name": rest.strip(), "body": []}
            elif cur is None:
                raise ValueError(f"{origin}: //@{tag} before any //@kernel")
            elif tag in ("inputs", "outputs", "uses"):
                cur[tag] = tuple(rest.split())
            else:
                raise ValueError(f"{origin}: unknown tag //@{tag}")
        elif cur is not None and not (s.startswith("//") and not cur["body"]):
            cur["body"].append(line)
    close()
    return entries


def dialect() -> str:
    """The dialect the kernels are built in: 'metal' where the routing layer sends this
    process's GPU routes to lattice's Metal kernels (LATTICE_METAL_KERNELS=1 on Apple
    silicon), else 'cuda'."""
    return "metal" if capability().kernel_backend == Backend.METAL else "cuda"


@functools.cache
def entries(dialect: str, family: str) -> dict[str, KernelEntry]:
    folder, _, ext = _DIALECT[dialect]
    path = source_root() / folder / f"{family}{ext}"
    return parse_entries(path.read_text(), str(path))


@functools.cache
def header(dialect: str, uses: tuple[str, ...]) -> str:
    folder, dialect_file, _ = _DIALECT[dialect]
    root = source_root()
    parts = [(root / folder / dialect_file).read_text()]
    parts += [(root / "kernels" / f"{u}.inc").read_text() for u in uses]
    return "\n".join(parts)


@functools.cache
def kernel(dialect: str, family: str, name: str, shared: int = 0):
    """The MLX custom kernel ``name`` of ``family`` in ``dialect`` ('cuda' or 'metal');
    ``shared``: bytes of dynamic shared memory a launch gets (CUDA only). The size is part
    of the kernel's name: MLX raises a kernel's shared-memory limit when it first loads it,
    so one name never runs with two sizes."""
    e = entries(dialect, family)[name]
    head = header(dialect, e.uses)
    digest = hashlib.sha256((head + e.source).encode()).hexdigest()[:12]
    common = {
        "name": f"lattice_{name}_{digest}" + (f"_s{shared}" if shared else ""),
        "input_names": list(e.inputs),
        "output_names": list(e.outputs),
        "source": e.source,
        "header": head,
    }
    if dialect == "cuda":
        return mx.fast.cuda_kernel(**common, shared_memory=shared)
    if shared:
        raise ValueError(f"[{name}] dynamic shared memory is a CUDA-only kernel feature")
    return mx.fast.metal_kernel(**common, atomic_outputs=name in _METAL_ATOMIC)


# Kernels with no Metal entry point: CUDA tensor-core instructions, and the fused epilogue of
# cuda.fused_epilogue (conv_affine), which has no Metal route.
CUDA_ONLY = frozenset(
    {
        "conv_implicit_gemm_mma",
        "conv_weight_grad_mma",
        "conv_implicit_gemm_affine",
        "conv_implicit_gemm_mma_affine",
    }
)

# Metal kernels whose outputs are atomics (mx.fast.metal_kernel makes all outputs atomic or none).
_METAL_ATOMIC = frozenset(
    {
        "table_insert",
        "table_insert_checked",
        "global_sum",
        "global_max_key",
        "global_argmax",
        "conv_weight_grad",
    }
)


def full_source(dialect: str, family: str, name: str) -> str:
    """Header + body of one kernel, for offline compilation checks."""
    e = entries(dialect, family)[name]
    return header(dialect, e.uses) + "\n" + e.source
