"""Compile every CUDA kernel of lattice offline with nvcc (no GPU needed), the way MLX's
``mx.fast.cuda_kernel`` wraps it: a syntax and type check before a device run.

    python tools/check_cuda_kernels.py [--arch sm_90] [--only NAME ...] [--resources]

--resources prints ptxas's registers / shared memory / spills of each variant.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lattice.backends import kernels  # noqa: E402
from lattice.backends.cuda.conv import _mma_stages  # noqa: E402

# MLX's generated preamble includes its device utils; these are the parts our kernels use.
PRELUDE = (
    "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n#include <cstdint>\n#include <cooperative_groups.h>\n"
)
FLOAT_NAMES = {"x", "w", "wt", "y", "dy", "feats"}  # the template dtype T (TW for w)
# Arguments of a fixed type other than int32.
FIXED_TYPES = {
    "kw": "float", "acc": "float", "dw": "float", "points": "float", "weights": "float",
    "key": "uint32_t", "winner": "uint32_t", "masks": "uint32_t",
}
TEMPLATES = {
    "conv_implicit_gemm": [
        {"T": t, "TW": tw, "TN": tn}
        for t in ("float", "__half", "__nv_bfloat16")
        for tw in ("float", t)
        for tn in (32, 64)
    ],
    "conv_weight_grad": [{"T": t, "TT": tt} for t in ("float", "__half", "__nv_bfloat16") for tt in (32, 64)],
    "conv_implicit_gemm_mma": [
        {"T": t, "TN": tn, "P": _mma_stages(size, tn)}
        for t, size in (("float", 4), ("__half", 2), ("__nv_bfloat16", 2))
        for tn in (32, 64)
    ],
    **{
        name: [{"T": t} for t in ("float", "__half", "__nv_bfloat16")]
        for name in ("pool_map", "global_sum", "global_max_key", "global_argmax")
    },
}


def wrap(entry, head: str, targs: dict) -> str:
    def ty(name):
        if name in FIXED_TYPES:
            return FIXED_TYPES[name]
        if name in FLOAT_NAMES:
            return "TW" if name == "w" else "T"
        return "int32_t"

    params = [f"const {ty(n)}* {n}" for n in entry.inputs] + [f"{ty(n)}* {n}" for n in entry.outputs]
    # As MLX does: type arguments become aliases (here before the signature, which uses them),
    # int arguments constexprs at the top of the body.
    aliases = "".join(f"using {k} = {v};\n" for k, v in targs.items() if isinstance(v, str))
    consts = "".join(f"  constexpr int {k} = {v};\n" for k, v in targs.items() if not isinstance(v, str))
    return (
        PRELUDE
        + head
        + "\nnamespace lt_check {\n"
        + aliases
        + f"__global__ void k_{entry.name}({', '.join(params)}) {{\n"
        + consts
        + entry.source
        + "}\n}\n"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--only", nargs="*", default=None, help="kernel names to compile (default: all)")
    ap.add_argument("--resources", action="store_true", help="print ptxas's resource usage per variant")
    args = ap.parse_args()
    failed = 0
    root = kernels.source_root()
    for path in sorted((root / "cuda").glob("*.cu")):
        family = path.stem
        for name, entry in kernels.entries("cuda", family).items():
            if args.only is not None and name not in args.only:
                continue
            head = kernels.header("cuda", entry.uses)
            for targs in TEMPLATES.get(name, [{}]):
                with tempfile.TemporaryDirectory() as tmp:
                    src = Path(tmp) / f"{name}.cu"
                    src.write_text(wrap(entry, head, targs))
                    r = subprocess.run(
                        ["nvcc", f"-arch={args.arch}", "-c", "-o", str(Path(tmp) / "k.o"), str(src)]
                        + (["-Xptxas", "-v"] if args.resources else []),
                        capture_output=True,
                        text=True,
                    )
                label = f"{family}.{name} {targs or ''}"
                if r.returncode:
                    failed += 1
                    print(f"FAIL {label}\n{r.stderr}")
                else:
                    print(f"ok   {label}")
                    if args.resources:
                        for line in r.stderr.splitlines():
                            if "Used" in line or "spill" in line:
                                print("     " + line.split(": ", 1)[-1])
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
