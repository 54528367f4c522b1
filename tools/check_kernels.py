"""Compile every CUDA kernel of lattice with NVRTC, as MLX's CUDA backend would, without a GPU.

    python tools/check_kernels.py [--arch sm_90 ...] [--only NAME ...] [--jobs N]
                                  [--source-root DIR] [--mlx-cuda-wheel PATH]
                                  [--resources] [--dump DIR]

What is compiled. For every ``//@kernel`` block of ``cuda/*.cu`` and every variant that
``lattice/backends/cuda/`` launches (``_variants`` below: the input dtypes and the
``template=`` values of each ``_launch``), the source ``mx.fast.cuda_kernel`` builds at its
first launch (MLX 0.32.4, ``mlx/backend/cuda/custom_kernel.cpp``: ``build_kernel``):

    <MLX's default header: #include "mlx/backend/cuda/device/utils.cuh", <cooperative_groups.h>>
    <header=: cuda/dialect.cuh + the kernels/<uses>.inc, as lattice.backends.kernels.header>
    namespace mlx::core::cu {
    namespace cg = cooperative_groups;
    __global__ void custom_kernel_<name><template hash>(
        const <input dtype>* <input>, [const __grid_constant__ Shape <input>_shape, ...]
        <output dtype>* <output>, ...) {
      using T = <dtype>; constexpr int TN = 32; ...     (the template arguments, in order)
    <source=: the block's body>
    }
    } // namespace mlx::core::cu

compiled by ``nvrtcCompileProgram`` with MLX's options (``--gpu-architecture=sm_XY``, the
include path of the CCCL headers MLX ships and of the CUDA runtime headers) to a cubin,
so ptxas runs too (inline PTX, register allocation). The kernel's name expression is
added and lowered, as MLX does, so every template of the bodies is instantiated.

Checked against MLX itself (2026-12-02, H200, MLX 0.32.4 CUDA): every one of the 52
variants launched through ``mx.fast.cuda_kernel(..., verbose=True)`` there printed a
source byte-for-byte identical to what ``--dump`` writes here, kernel names included.
The architecture MLX picks for an H200 (``sm_90``, or ``sm_90a`` where its version tags
one) was not read back there; both compile here (``--arch sm_90 sm_90a``), and
``compute_80`` (PTX only, the oldest the tensor-core kernel supports) too.

Where MLX's pieces come from (nothing is written by hand). MLX embeds the device headers
its generated kernels include (``utils.cuh``, ``complex.cuh``, ``config.h``, ...) as
strings in ``libmlx.so`` of its CUDA wheel and hands them to NVRTC by name; the CPU wheel
lattice installs has none of them. This script takes the ``mlx-cuda-13`` wheel of the MLX
version installed (``pip download --no-deps``, about 90 MB, into a temporary folder
deleted afterwards; or ``--mlx-cuda-wheel`` / ``$LATTICE_MLX_CUDA_WHEEL``: a wheel file or a
folder holding it), reads the header table and the default header out of ``libmlx.so``
(its ELF relocations: the ``g_include_names`` / ``g_headers`` arrays of
``jit_module.cpp``), checks that the fragments ``build_kernel`` assembles the signature
from are in the binary (so an MLX upgrade that changes them fails here instead of
drifting), and uses the wheel's ``include/cccl`` folder. NVRTC itself and the CUDA
runtime headers come from NVIDIA's wheels ``nvidia-cuda-nvrtc`` / ``nvidia-cuda-runtime``
13.0 (the CUDA 13.0 of the H200 machine, ``shared/tools/gpu/README.md``); install them
with ``pip install '.[ci]'``.

What it does not check: anything at run time (launch bounds, shared-memory limits past
the static 48 KiB, results). Those need the GPU (``tests/test_cuda_routes.py`` there).
The variant table is checked against the code: every ``_launch("family", "name", ...)``
of ``lattice/backends/cuda/*.py`` and every ``//@kernel`` of ``cuda/*.cu`` must have an entry.

``--source-root`` reads ``cuda/`` and ``kernels/`` of another folder (a copy: the test that
breaks one) through the same ``lattice.backends.kernels`` functions. ``--resources``
prints ptxas's registers / spills per variant. About 140 s of CPU for the 121 variants at
sm_90 (``--jobs``, default 2, spreads them over processes: about 70 s on two cores).

Exit status: 0 when every variant compiles, 1 when one fails (each failure printed as
``FAIL cuda/<family>.cu:<kernel> [variant] <arch>`` with NVRTC's log, its line numbers
mapped back to the ``.cu`` / ``.inc`` / ``.cuh`` files), 2 when NVRTC or MLX's CUDA wheel
cannot be found.
"""

from __future__ import annotations

import argparse
import ast
import ctypes
import glob
import json
import multiprocessing
import os
import re
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# ---- what lattice/backends/cuda/ launches ---------------------------------------------------

FLOATS = ("float32", "float16", "bfloat16")
# MLX's dtype_to_cuda_type for the dtypes our kernels see.
CUDA_TYPE = {
    "float32": "float",
    "float16": "__half",
    "bfloat16": "__nv_bfloat16",
    "int32": "int32_t",
    "uint32": "uint32_t",
    "bool": "bool",
}


@dataclass(frozen=True)
class Variant:
    """One launch shape of a kernel: the dtype of each input and output (by name; names not
    listed are int32) and the template arguments in the order cuda.py passes them."""

    dtypes: dict = field(default_factory=dict)
    template: tuple = ()

    def label(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.template) if self.template else "-"


# The float32 operands of the fused-epilogue convolutions (x, scale, shift, res, app, y).
_EPILOGUE_DTYPES = {n: "float32" for n in ("x", "scale", "shift", "res", "app", "y")}


def _variants() -> dict[str, list[Variant]]:
    # The tensor-core kernels' pipeline depths are computed by the route itself.
    from lattice.backends.cuda.conv import _mma_stages, _wgrad_mma_stages

    size = {"float32": 4, "float16": 2, "bfloat16": 2}
    v = {
        # coords.cu: int32 throughout
        "table_insert": [Variant()],
        "table_owner": [Variant()],
        "table_insert_checked": [Variant({"stats": "uint32"})],
        "downsample": [Variant()],
        "compact": [Variant()],
        # points.cu: points widened to float32 by _point_inputs
        "quantize_points": [Variant({"points": "float32"})],
        "point_corners": [Variant({"points": "float32", "weights": "float32"})],
        # relations.cu
        "subm_map": [Variant()],
        "target_map": [Variant()],
        "cell_map_down": [Variant()],
        "cell_map_up": [Variant()],
        "invert_map": [Variant()],
        "row_masks": [Variant({"masks": "uint32"})],
        # conv.cu (_conv_kernel, _weight_grad): T = x.dtype, TW = w.dtype (any float dtype),
        # TN = 32 or 64 by C_out (96 and 128 too on the tensor-core kernel: cuda.conv.tile_n,
        # with TM = 64 or 128 rows and P stages by both: cuda.conv._mma_config),
        # TT = 32 or 64 by min(C_in, C_out)
        "conv_implicit_gemm": [
            Variant({"x": t, "w": tw, "y": t}, (("T", t), ("TW", tw), ("TN", tn)))
            for t in FLOATS
            for tw in FLOATS
            for tn in (32, 64)
        ],
        "conv_implicit_gemm_mma": [
            Variant(
                {"x": t, "wt": t, "y": t},
                (("T", t), ("TM", tm), ("TN", tn), ("P", _mma_stages(size[t], tm, tn))),
            )
            for t in FLOATS
            for tm in ((64, 128) if t == "float32" else (64,))  # 128 rows: float32 only
            for tn in (32, 64, 96, 128)
        ],
        # the fused epilogue (cuda.fused_epilogue): float32 features, RES / RELU 0 or 1
        "conv_implicit_gemm_affine": [
            Variant(
                _EPILOGUE_DTYPES | {"w": tw},
                (("T", "float32"), ("TW", tw), ("TN", tn), ("RES", r), ("RELU", a)),
            )
            for tw in FLOATS
            for tn in (32, 64)
            for r in (0, 1)
            for a in (0, 1)
        ],
        "conv_implicit_gemm_mma_affine": [
            Variant(
                _EPILOGUE_DTYPES | {"wt": "float32"},
                (
                    ("T", "float32"),
                    ("TM", tm),
                    ("TN", tn),
                    ("P", _mma_stages(4, tm, tn)),
                    ("RES", r),
                    ("RELU", a),
                ),
            )
            for tm in (64, 128)
            for tn in (32, 64, 96, 128)
            for r in (0, 1)
            for a in (0, 1)
        ],
        "conv_weight_grad": [
            Variant({"x": t, "dy": t, "dw": "float32"}, (("T", t), ("TT", tt)))
            for t in FLOATS
            for tt in (32, 64)
        ],
        # float32 only (TF32), TT = 32 or 64, P by TT
        "conv_weight_grad_mma": [
            Variant(
                {"x": "float32", "dy": "float32", "dw": "float32"},
                (("T", "float32"), ("TT", tt), ("P", _wgrad_mma_stages(tt))),
            )
            for tt in (32, 64)
        ],
        # pool.cu: T = feats.dtype
        "pool_map": [Variant({"x": t, "kw": "float32", "y": t}, (("T", t),)) for t in FLOATS],
        "global_sum": [Variant({"x": t, "acc": "float32"}, (("T", t),)) for t in FLOATS],
        "global_max_key": [Variant({"x": t, "key": "uint32"}, (("T", t),)) for t in FLOATS],
        "global_argmax": [
            Variant({"x": t, "key": "uint32", "winner": "uint32"}, (("T", t),)) for t in FLOATS
        ],
    }
    return v


def launched_kernels(path: Path) -> set[tuple[str, str]]:
    """(family, name) of every ``launch("family", "name", ...)`` in the Python files of the
    package folder ``path`` (``lattice/backends/cuda/``)."""
    found = set()
    nodes = (n for f in sorted(path.glob("*.py")) for n in ast.walk(ast.parse(f.read_text())))
    for node in nodes:
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "launch" and len(node.args) >= 2:
            fam, name = node.args[0], node.args[1]
            if isinstance(fam, ast.Constant) and isinstance(name, ast.Constant):
                found.add((fam.value, name.value))
            elif isinstance(fam, ast.Constant) and isinstance(name, ast.Name):
                found.add((fam.value, "*"))  # a name chosen at run time (conv): all of the family
    return found


# ---- MLX's pieces, read out of its CUDA wheel ------------------------------------------------

# Fragments of build_kernel (custom_kernel.cpp) this script reproduces; all must be in libmlx.so.
NAMESPACE_OPEN = "namespace mlx::core::cu {\n\nnamespace cg = cooperative_groups;\n\n"
NAMESPACE_CLOSE = "\n}\n\n} // namespace mlx::core::cu\n"
FRAGMENTS = [
    NAMESPACE_OPEN,
    NAMESPACE_CLOSE,
    "__global__ void ",
    "    const __grid_constant__ Shape ",
    "    const __grid_constant__ Strides ",
    "    const __grid_constant__ int ",
    "  constexpr int {} = {};\n",
    "  constexpr bool {} = {};\n",
    "  using {} = {};\n",
    "custom_kernel_",
    "mlx::core::cu::",
    "--gpu-architecture={}_{}{}{}",
    "--include-path={}",
]


@dataclass
class MlxCuda:
    version: str
    default_header: str
    headers: dict[str, str]  # include name -> text, as handed to nvrtcCreateProgram
    cccl: Path


def _elf(data: bytes):
    """(file offset -> address, address -> file offset, {slot address: pointer}) of a
    64-bit little-endian ELF shared library; the pointers are its R_X86_64_RELATIVE
    relocations (how a PIC library stores an array of string pointers)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("libmlx.so is not a 64-bit little-endian ELF file")
    e_phoff, e_shoff = struct.unpack_from("<QQ", data, 0x20)
    e_phentsize, e_phnum, e_shentsize, e_shnum = struct.unpack_from("<HHHH", data, 0x36)
    loads = []
    for i in range(e_phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, _, _ = struct.unpack_from(
            "<IIQQQQQQ", data, e_phoff + i * e_phentsize
        )
        if p_type == 1:  # PT_LOAD
            loads.append((p_offset, p_vaddr, p_filesz))
    slots = {}
    for i in range(e_shnum):
        sh = struct.unpack_from("<IIQQQQIIQQ", data, e_shoff + i * e_shentsize)
        if sh[1] == 4:  # SHT_RELA
            for j in range(sh[5] // 24):
                r_offset, r_info, r_addend = struct.unpack_from("<QQq", data, sh[4] + j * 24)
                if r_info & 0xFFFFFFFF == 8:  # R_X86_64_RELATIVE
                    slots[r_offset] = r_addend

    def to_va(off):
        return next((off - po + pv for po, pv, n in loads if po <= off < po + n), None)

    def to_off(va):
        return next((va - pv + po for po, pv, n in loads if pv <= va < pv + n), None)

    return to_va, to_off, slots


def _cstr(data: bytes, off: int) -> bytes:
    return data[off : data.index(b"\0", off)]


def read_libmlx(data: bytes) -> tuple[str, dict[str, str]]:
    """(default header, {include name: text}) of MLX's CUDA JIT, read out of libmlx.so."""
    for frag in FRAGMENTS:
        if frag.encode() not in data:
            raise ValueError(
                f"libmlx.so has no {frag!r}: MLX's custom-kernel assembly changed; update tools/check_kernels.py"
            )
    to_va, to_off, slots = _elf(data)
    # g_include_names: consecutive slots pointing at the strings "mlx/backend/cuda/device/..."
    name_at = {
        to_va(m.start()): m.group().decode()
        for m in re.finditer(rb"(?<=\0)mlx/backend/cuda/device/\w+\.(?:cuh|h)(?=\0)", data)
    }
    named = sorted((slot, name_at[p]) for slot, p in slots.items() if p in name_at)
    if not named:
        raise ValueError("libmlx.so: MLX's JIT include names were not found; update tools/check_kernels.py")
    base, count = named[0][0], len(named)
    if [s for s, _ in named] != [base + 8 * i for i in range(count)]:
        raise ValueError("libmlx.so: the JIT include names are not one array; update tools/check_kernels.py")

    def header_array(start):
        texts = []
        for i in range(count):
            off = to_off(slots.get(start + 8 * i, -1))
            if off is None or data[off - 1] != 0:
                return None
            text = _cstr(data, off)
            if b"#pragma once" not in text and b"#include" not in text and b"namespace" not in text:
                return None
            texts.append(text.decode())
        return texts

    # g_headers: as many pointers to header texts, defined next to it (nearest run first)
    texts = None
    near = sorted((s for s in slots if s != base and (s - base) % 8 == 0), key=lambda s: abs(s - base))
    for start in near[:256]:
        texts = header_array(start)
        if texts is not None:
            break
    if texts is None:
        raise ValueError("libmlx.so: MLX's JIT header table was not found; update tools/check_kernels.py")
    headers = dict(zip((n for _, n in named), texts, strict=True))
    for name, must in (("config.h", "MAX_NDIM"), ("utils.cuh", "using Shape =")):
        if must not in headers.get("mlx/backend/cuda/device/" + name, ""):
            raise ValueError(
                f"libmlx.so: the header read as {name} lacks {must!r}; update tools/check_kernels.py"
            )
    # the default header: the short string with utils.cuh and cooperative_groups.h nearest to
    # build_kernel's signature fragments
    anchor = data.index(b"    const __grid_constant__ Shape ")
    best = None
    for m in re.finditer(rb'#include "mlx/backend/cuda/device/utils.cuh"', data):
        start = data.rfind(b"\0", 0, m.start()) + 1
        text = _cstr(data, start)
        if len(text) < 400 and b"#include <cooperative_groups.h>" in text:
            if best is None or abs(start - anchor) < abs(best[0] - anchor):
                best = (start, text.decode())
    if best is None:
        raise ValueError("libmlx.so: MLX's default custom-kernel header was not found")
    return best[1], headers


def find_mlx_cuda_wheel(version: str, given: str | None, tmp: Path) -> Path:
    """The mlx-cuda-13 wheel of ``version``: ``given`` (a wheel or a folder holding one), else
    downloaded with pip into ``tmp``."""
    pattern = f"mlx_cuda_13-{version}-*.whl"
    if given:
        p = Path(given)
        found = sorted(p.glob(pattern)) if p.is_dir() else [p]
        if not found or not found[0].is_file():
            raise FileNotFoundError(f"no {pattern} in {p}")
        return found[0]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:"]
    cmd += ["--platform", "manylinux_2_35_x86_64", "-d", str(tmp), f"mlx-cuda-13=={version}"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    found = sorted(tmp.glob(pattern))
    if r.returncode or not found:
        raise FileNotFoundError(f"pip could not download mlx-cuda-13=={version}:\n{r.stderr.strip()}")
    return found[0]


def load_mlx_cuda(wheel: Path, tmp: Path) -> MlxCuda:
    version = wheel.name.split("-")[1]
    with zipfile.ZipFile(wheel) as z:
        data = z.read("mlx/lib/libmlx.so")
        members = [m for m in z.namelist() if m.startswith("mlx/include/cccl/")]
        if not members:
            raise ValueError(f"{wheel.name} has no mlx/include/cccl")
        z.extractall(tmp, members)
    default_header, headers = read_libmlx(data)
    return MlxCuda(version, default_header, headers, tmp / "mlx" / "include" / "cccl")


# ---- NVRTC -----------------------------------------------------------------------------------


def _site_dirs() -> list[Path]:
    import site
    import sysconfig

    dirs = [sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"], *site.getsitepackages()]
    return [Path(d) for d in dict.fromkeys(dirs)]


class Nvrtc:
    """libnvrtc through ctypes (the nvidia-cuda-nvrtc wheel's, or $LATTICE_NVRTC)."""

    def __init__(self):
        lib = os.environ.get("LATTICE_NVRTC")
        if not lib:
            found = [
                p for d in _site_dirs() for p in sorted(glob.glob(str(d / "nvidia/cu13/lib/libnvrtc.so.*")))
            ]
            if not found:
                raise FileNotFoundError(
                    "NVRTC not found: pip install nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-runtime==13.0.96 "
                    "(the [ci] extra), or set LATTICE_NVRTC to a libnvrtc.so"
                )
            lib = found[0]
        libdir = Path(lib).parent
        for builtins in sorted(libdir.glob("libnvrtc-builtins.so.*")):  # dlopen'ed by name by NVRTC
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
            break
        self.path = lib
        self.lib = ctypes.CDLL(lib)
        self.lib.nvrtcGetErrorString.restype = ctypes.c_char_p
        self.lib.nvrtcGetLoweredName.argtypes = [
            ctypes.c_void_p,
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_char_p),
        ]
        major, minor = ctypes.c_int(), ctypes.c_int()
        self.lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
        self.version = f"{major.value}.{minor.value}"
        # CUDA runtime headers (cuda_fp16.h, cooperative_groups.h, ...): the runtime wheel's,
        # as MLX finds them beside its own package (else $CUDA_HOME/include)
        inc = libdir.parent / "include"
        home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or "/usr/local/cuda"
        self.include = inc if (inc / "cuda_fp16.h").is_file() else Path(home) / "include"
        if not (self.include / "cooperative_groups.h").is_file():
            raise FileNotFoundError(
                f"CUDA runtime headers not found in {self.include}: pip install nvidia-cuda-runtime==13.0.96"
            )

    def compile(self, source: str, filename: str, kernel: str, options: list[str], headers: dict[str, str]):
        """(ok, log, lowered name) of one program."""
        lib = self.lib
        prog = ctypes.c_void_p()
        names = [n.encode() for n in headers]
        texts = [t.encode() for t in headers.values()]
        n = len(names)
        r = lib.nvrtcCreateProgram(
            ctypes.byref(prog), source.encode(), filename.encode(), n,
            (ctypes.c_char_p * n)(*texts), (ctypes.c_char_p * n)(*names),
        )  # fmt: skip
        if r:
            raise RuntimeError(f"nvrtcCreateProgram: {lib.nvrtcGetErrorString(r).decode()}")
        try:
            lib.nvrtcAddNameExpression(prog, kernel.encode())
            opts = [o.encode() for o in options]
            r = lib.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts))
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value + 1)
            lib.nvrtcGetProgramLog(prog, log)
            lowered = None
            if r == 0:
                out = ctypes.c_char_p()
                if lib.nvrtcGetLoweredName(prog, kernel.encode(), ctypes.byref(out)) == 0:
                    lowered = out.value.decode()
                # sm_XY: a cubin (ptxas ran), compute_XY: PTX only (as MLX on GPUs NVRTC has no SASS for)
                size = ctypes.c_size_t()
                ptx_only = any(o.startswith(b"--gpu-architecture=compute_") for o in opts)
                (lib.nvrtcGetPTXSize if ptx_only else lib.nvrtcGetCUBINSize)(prog, ctypes.byref(size))
                if size.value == 0 or lowered is None:
                    return (
                        False,
                        log.value.decode(errors="replace") + "\nno binary or kernel name produced",
                        None,
                    )
            return r == 0, log.value.decode(errors="replace"), lowered
        finally:
            lib.nvrtcDestroyProgram(ctypes.byref(prog))


# ---- assembly, as mx.fast.cuda_kernel does -----------------------------------------------------

# MLX names template dtypes by get_type_string (seen in its generated kernel names on the H200).
MLX_TYPE_STRING = {"float32": "float", "float16": "float16_t", "bfloat16": "bfloat16_t"}


def kernel_name(name: str, digest_name: str, variant: Variant) -> str:
    """custom_kernel_<name><template hash> (MLX: template_arguments_hash)."""
    h = "".join(f"_{v}" if isinstance(v, int) else f"_{MLX_TYPE_STRING[v]}" for _, v in variant.template)
    return f"custom_kernel_{digest_name}{h}"


def assemble(mlx: MlxCuda, entry, header: str, func: str, variant: Variant, body_prefix: str = "") -> str:
    """The source build_kernel makes for ``entry`` (a lattice.backends.kernels.KernelEntry)
    launched as ``variant``. ``body_prefix`` (a #line directive) is for error reports only."""
    src = entry.source
    parts = [mlx.default_header, header, NAMESPACE_OPEN, "__global__ void ", func, "(\n"]
    for n in entry.inputs:
        parts += ["    const ", CUDA_TYPE[variant.dtypes.get(n, "int32")], "* ", n, ",\n"]
        # every input array has ndim > 0 here; MLX adds these where the source names them
        if f"{n}_shape" in src:
            parts += ["    const __grid_constant__ Shape ", n, "_shape,\n"]
        if f"{n}_strides" in src:
            parts += ["    const __grid_constant__ Strides ", n, "_strides,\n"]
        if f"{n}_ndim" in src:
            parts += ["    const __grid_constant__ int ", n, "_ndim,\n"]
    for i, n in enumerate(entry.outputs):
        parts += ["    ", CUDA_TYPE[variant.dtypes.get(n, "int32")], "* ", n]
        parts.append(",\n" if i < len(entry.outputs) - 1 else ") {\n")
    if variant.template:
        for k, v in variant.template:
            if isinstance(v, bool):
                parts.append(f"  constexpr bool {k} = {str(v).lower()};\n")
            elif isinstance(v, int):
                parts.append(f"  constexpr int {k} = {v};\n")
            else:
                parts.append(f"  using {k} = {CUDA_TYPE[v]};\n")
        parts.append("\n")
    parts += [body_prefix, src, NAMESPACE_CLOSE]
    return "".join(parts)


def annotated_header(kernels_mod, uses: tuple[str, ...]) -> str:
    """kernels.header('cuda', uses) with a #line directive before each part (for error
    reports); checked to be that header once the directives are removed."""
    root = kernels_mod.source_root()
    files = [root / "cuda" / "dialect.cuh"] + [root / "kernels" / f"{u}.inc" for u in uses]
    marked = "\n".join(f'#line 1 "{f.relative_to(root)}"\n' + f.read_text() for f in files)
    plain = re.sub(r'#line 1 "[^"]*"\n', "", marked)
    if plain != kernels_mod.header("cuda", uses):
        return kernels_mod.header("cuda", uses)  # assembly changed: report lines unmapped
    return marked


def body_line(path: Path, name: str, source: str) -> int | None:
    """Line number (1-based) in ``path`` where the body of kernel ``name`` starts."""
    lines = path.read_text().splitlines()
    first = source.strip().splitlines()[0].strip() if source.strip() else ""
    start = next((i for i, s in enumerate(lines) if s.strip() == f"//@kernel {name}"), None)
    if start is None:
        return None
    return next((i + 1 for i in range(start + 1, len(lines)) if lines[i].strip() == first), None)


_WORKER: dict = {}


def _worker_init(lib, include, cccl, headers, resources):
    os.environ["LATTICE_NVRTC"] = lib
    _WORKER.update(nvrtc=Nvrtc(), include=include, cccl=cccl, headers=headers, resources=resources)


def _worker_compile(task) -> tuple[bool, str]:
    func, arch, source, marked = task
    w = _WORKER
    opts = [f"--gpu-architecture={arch}", f"--include-path={w['cccl']}", f"--include-path={w['include']}"]
    if w["resources"]:
        opts.append("--ptxas-options=-v")
    name = f"mlx::core::cu::{func}"
    ok, log, _ = w["nvrtc"].compile(source, f"{func}.cu", name, opts, w["headers"])
    if not ok:
        _, log, _ = w["nvrtc"].compile(marked, f"{func}.cu", name, opts, w["headers"])
    return ok, log


# ---- main --------------------------------------------------------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", nargs="+", default=["sm_90"], help="NVRTC architectures (default: sm_90, H200)")
    ap.add_argument("--only", nargs="*", default=None, help="kernel names to compile (default: all)")
    ap.add_argument("--jobs", "-j", type=int, default=min(os.cpu_count() or 1, 2), help="parallel compiles")
    ap.add_argument("--source-root", help="folder holding cuda/ and kernels/ (default: lattice's own)")
    ap.add_argument("--mlx-cuda-wheel", default=os.environ.get("LATTICE_MLX_CUDA_WHEEL"),
                    help="mlx-cuda-13 wheel, or a folder holding it (default: pip download)")  # fmt: skip
    ap.add_argument("--resources", action="store_true", help="print ptxas's resource usage per variant")
    ap.add_argument("--dump", metavar="DIR", help="also write each assembled source to DIR/<kernel>.cu")
    args = ap.parse_args(argv)
    t0 = time.monotonic()

    import mlx.core as mx

    try:  # the installed lattice (CI: a wheel install); else this checkout's
        from lattice.backends import kernels
    except ImportError:
        sys.path.insert(0, str(REPO))
        from lattice.backends import kernels

    # The kernel sources of this checkout (or --source-root: a copy, which a test breaks), read
    # through lattice.backends.kernels itself; the installed lattice/_kernels copy otherwise.
    given = Path(args.source_root) if args.source_root else REPO
    if (given / "cuda").is_dir() and (given / "kernels").is_dir():
        root = given.resolve()
        kernels.source_root = lambda: root
        kernels.entries.cache_clear()
        kernels.header.cache_clear()
    elif args.source_root:
        print(f"check_kernels: {given} has no cuda/ and kernels/ folders", file=sys.stderr)
        return 2
    root = kernels.source_root()

    try:
        nvrtc = Nvrtc()
    except (FileNotFoundError, OSError) as e:
        print(f"check_kernels: {e}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="lattice-check-kernels-") as tmp:
        try:
            wheel = find_mlx_cuda_wheel(mx.__version__, args.mlx_cuda_wheel, Path(tmp))
            mlx = load_mlx_cuda(wheel, Path(tmp))
        except (FileNotFoundError, ValueError, KeyError, zipfile.BadZipFile) as e:
            print(f"check_kernels: MLX's CUDA wheel: {e}", file=sys.stderr)
            return 2
        if mlx.version != mx.__version__:
            print(f"check_kernels: {wheel.name} is not MLX {mx.__version__} (installed)", file=sys.stderr)
            return 2
        print(
            f"NVRTC {nvrtc.version} ({nvrtc.path}); MLX {mlx.version} CUDA prelude from {wheel.name} "
            f"({len(mlx.headers)} device headers); archs {' '.join(args.arch)}"
        )
        return run_checks(args, kernels, root, nvrtc, mlx, t0)


def run_checks(args, kernels, root: Path, nvrtc: Nvrtc, mlx: MlxCuda, t0: float) -> int:
    import hashlib

    variants = _variants()
    problems = []
    declared = {}
    for path in sorted((root / "cuda").glob("*.cu")):
        try:
            for name in kernels.entries("cuda", path.stem):
                declared[name] = path
        except ValueError as e:  # a malformed //@ block
            problems.append(f"FAIL {path.relative_to(root)}: {e}")
    for name, path in sorted(declared.items()):
        if name not in variants:
            problems.append(
                f"FAIL {path.relative_to(root)}:{name}: no variants in tools/check_kernels.py _variants"
            )
    cuda_glue = Path(sys.modules["lattice.backends.cuda"].__file__).parent
    families = {p.stem for p in declared.values()}
    for fam, name in sorted(launched_kernels(cuda_glue)):
        if fam not in families or (name != "*" and name not in declared):
            problems.append(f"FAIL lattice/backends/cuda/ launches {fam}.{name}, which cuda/{fam}.cu lacks")

    jobs = []
    for name, path in sorted(declared.items(), key=lambda kv: (kv[1].name, kv[0])):
        if (args.only is not None and name not in args.only) or name not in variants:
            continue
        entry = kernels.entries("cuda", path.stem)[name]
        head = kernels.header("cuda", entry.uses)
        digest = hashlib.sha256((head + entry.source).encode()).hexdigest()[:12]
        for variant in variants[name]:
            for arch in args.arch:
                jobs.append((path, entry, head, f"lattice_{name}_{digest}", variant, arch))

    tasks = []
    for path, entry, head, dname, variant, arch in jobs:
        func = kernel_name(entry.name, dname, variant)
        line = body_line(path, entry.name, entry.source)
        prefix = f'#line {line} "{path.relative_to(root)}"\n' if line else ""
        tasks.append(
            (
                func,
                arch,
                assemble(mlx, entry, head, func, variant),
                # the same with #line directives, compiled only where the first fails, so that
                # NVRTC's log names the .cu / .inc / .cuh files and their lines
                assemble(mlx, entry, annotated_header(kernels, entry.uses), func, variant, prefix),
            )
        )
    if args.dump:
        out = Path(args.dump)
        out.mkdir(parents=True, exist_ok=True)
        manifest = []
        for (path, entry, _, _, variant, arch), (func, _, source, _) in zip(jobs, tasks, strict=True):
            (out / f"{func}.cu").write_text(source)
            manifest.append({"family": path.stem, "name": entry.name, "function": func, "arch": arch,
                             "dtypes": {n: variant.dtypes.get(n, "int32") for n in entry.inputs + entry.outputs},
                             "template": [list(t) for t in variant.template]})  # fmt: skip
        (out / "manifest.json").write_text(json.dumps(manifest, indent=1))
    ctx = multiprocessing.get_context("spawn")  # the workers load NVRTC only (no MLX threads forked)
    init = (nvrtc.path, str(nvrtc.include), str(mlx.cccl), mlx.headers, args.resources)
    with ctx.Pool(max(1, args.jobs), initializer=_worker_init, initargs=init) as pool:
        results = pool.map(_worker_compile, tasks, chunksize=1)

    failed = 0
    for (path, entry, _, _, variant, arch), (ok, log) in zip(jobs, results, strict=True):
        label = f"{path.relative_to(root)}:{entry.name} [{variant.label()}] {arch}"
        if ok:
            print(f"ok   {label}")
            if args.resources:
                for line in log.splitlines():
                    if "Used" in line or "spill" in line:
                        print("       " + line.split(": ", 1)[-1].strip())
        else:
            failed += 1
            print(f"FAIL {label}\n{log.rstrip()}\n")
    for p in problems:
        print(p)
    total = len(jobs)
    print(f"{total - failed} of {total} kernel variants compiled, {failed} failed, {len(problems)} table problems "
          f"({time.monotonic() - t0:.1f} s)")  # fmt: skip
    return 1 if failed or problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
