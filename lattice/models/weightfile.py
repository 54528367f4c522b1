"""A bundle's ``weights.safetensors``, checked from its header before any tensor is read.

A safetensors file is an 8-byte little-endian header length ``n``, ``n`` bytes of JSON
``{"name": {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, ...,
"__metadata__": {"k": "v"}}``, then the tensor bytes (offsets count from the end of the
header). :func:`read_header` reads only the header: its length is checked against the
file size and :data:`~lattice.models.limits.MAX_JSON_BYTES` before it is read, and every
entry's dtype, shape and offsets against the file (inside the data, ``end - begin`` bytes
for the shape, no two tensors overlapping). :func:`check_header` then matches it with
:func:`lattice.models.params.parameter_specs`: a missing, unexpected, mis-shaped or
wrong-dtype tensor is one line naming it. :func:`check_digest` compares the file's sha256
with ``model.json``'s, and :func:`read_tensors` reads the tensors once all of that passed.
Every error is a :class:`BundleError` that starts with the file.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx

from lattice.models.limits import MAX_JSON_BYTES, shown
from lattice.models.params import TensorSpec
from lattice.models.spec import BundleError

# safetensors dtype code -> (bytes per value, name in messages)
DTYPES: dict[str, tuple[int, str]] = {
    "BOOL": (1, "bool"), "U8": (1, "uint8"), "I8": (1, "int8"), "F8_E4M3": (1, "float8_e4m3"),
    "F8_E5M2": (1, "float8_e5m2"), "U16": (2, "uint16"), "I16": (2, "int16"), "F16": (2, "float16"),
    "BF16": (2, "bfloat16"), "U32": (4, "uint32"), "I32": (4, "int32"), "F32": (4, "float32"),
    "U64": (8, "uint64"), "I64": (8, "int64"), "F64": (8, "float64"),
}  # fmt: skip
FLOAT_CODES = ("F32", "F16", "BF16")  # what save_model writes float tensors as
ACCEPTED = {"float": FLOAT_CODES, "scale": FLOAT_CODES, "packed": ("U32",)}
_ENTRY_KEYS = {"dtype", "shape", "data_offsets"}
MAX_NDIM = 8
LOAD_DTYPES = {"float": mx.float32, "packed": mx.uint32, "scale": mx.float16}  # by TensorSpec.kind


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of the header: dtype code, shape, and ``begin``/``end`` byte offsets in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


@dataclass(frozen=True)
class WeightsHeader:
    """What a safetensors header says: its tensors by name and the ``__metadata__`` strings."""

    path: Path
    tensors: dict[str, TensorEntry]
    metadata: dict[str, str]
    file_size: int


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    keys = [k for k, _ in pairs]
    if len(set(keys)) != len(keys):
        dup = next(k for k in keys if keys.count(k) > 1)
        raise ValueError(f"key {shown(dup)} appears twice")
    return dict(pairs)


def _parse(raw: bytes) -> dict:
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_unique_keys)
    except RecursionError:
        raise ValueError("its JSON is nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError and int-digit limits included
        raise ValueError(f"not JSON: {' '.join(str(err).split())[:120]}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"must be a JSON object, got {type(doc).__name__}")
    return doc


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _entry(name: str, d: object, data_start: int, file_size: int) -> TensorEntry:
    where = f"tensor {shown(name)}"
    if not isinstance(d, dict) or set(d) != _ENTRY_KEYS:
        got = sorted(d) if isinstance(d, dict) else type(d).__name__
        raise ValueError(f"{where} must have exactly the keys {sorted(_ENTRY_KEYS)}, got {shown(got)}")
    dtype, shape, offsets = d["dtype"], d["shape"], d["data_offsets"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"{where} has unknown dtype {shown(dtype)}")
    if not isinstance(shape, list) or len(shape) > MAX_NDIM or not all(_is_int(s) and s >= 0 for s in shape):
        raise ValueError(f"{where} shape must be a list of at most {MAX_NDIM} sizes >= 0, got {shown(shape)}")
    if not isinstance(offsets, list) or len(offsets) != 2 or not all(_is_int(o) and o >= 0 for o in offsets):
        raise ValueError(f"{where} data_offsets must be two integers >= 0, got {shown(offsets)}")
    begin, end = data_start + offsets[0], data_start + offsets[1]
    nbytes = math.prod(shape) * DTYPES[dtype][0]
    if end > file_size or begin > end:
        raise ValueError(
            f"{where} data_offsets {offsets} lie outside the file's {file_size - data_start} data bytes"
        )
    if end - begin != nbytes:
        raise ValueError(
            f"{where} has {end - begin} data bytes, its {DTYPES[dtype][1]} shape {tuple(shape)} needs {nbytes}"
        )
    return TensorEntry(name, dtype, tuple(shape), begin, end)


def _header(path: Path) -> WeightsHeader:
    size = os.path.getsize(path)
    if size < 8:
        raise ValueError(f"{size} bytes, too short for the 8-byte header length")
    with open(path, "rb") as f:
        length = int.from_bytes(f.read(8), "little")
        if length > size - 8:
            raise ValueError(f"header length {length} runs past the end of the file ({size} bytes)")
        if length > MAX_JSON_BYTES:
            raise ValueError(f"header length {length} is over the {MAX_JSON_BYTES}-byte limit")
        doc = _parse(f.read(length))
    meta = doc.pop("__metadata__", None) or {}  # mx.save_safetensors writes null for none
    if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
        raise ValueError(f"__metadata__ must map names to strings, got {shown(meta)}")
    tensors = {name: _entry(name, d, 8 + length, size) for name, d in doc.items()}
    spans = sorted((t.begin, t.end, t.name) for t in tensors.values() if t.end > t.begin)
    for (_, end, a), (begin, _, b) in zip(spans, spans[1:], strict=False):
        if begin < end:
            raise ValueError(f"tensors {shown(a)} and {shown(b)} share data bytes")
    return WeightsHeader(path, tensors, meta, size)


def read_header(path: str | os.PathLike) -> WeightsHeader:
    """The checked header of safetensors file ``path`` (no tensor data is read)."""
    path = Path(path)
    try:
        return _header(path)
    except ValueError as err:
        raise BundleError(f"{path}: unreadable safetensors file: {err}") from None
    except OSError as err:
        raise BundleError(f"{path}: cannot read: {err.strerror or err}") from None


def check_header(header: WeightsHeader, specs: dict[str, TensorSpec]) -> None:
    """A :class:`BundleError` naming the first tensor the header and the architecture disagree on."""
    file, have = header.path, header.tensors
    missing = [k for k in specs if k not in have]
    if missing:
        shown_ = ", ".join(f"'{k}' {specs[k].shape}" for k in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise BundleError(f"{file}: missing tensor {shown_}{more}")
    unexpected = [k for k in have if k not in specs]
    if unexpected:
        names = ", ".join(shown(k) for k in unexpected[:5])
        more = f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else ""
        raise BundleError(f"{file}: unexpected tensor {names}{more} (not in the architecture)")
    for key, spec in specs.items():
        got = have[key]
        if got.shape != spec.shape:
            raise BundleError(
                f"{file}: tensor '{key}' has shape {got.shape}, the architecture needs {spec.shape}"
            )
        if got.dtype not in ACCEPTED[spec.kind]:
            names = [DTYPES[c][1] for c in ACCEPTED[spec.kind]]
            need = names[0] if len(names) == 1 else f"a float ({', '.join(names[:-1])} or {names[-1]})"
            raise BundleError(
                f"{file}: tensor '{key}' has dtype {DTYPES[got.dtype][1]}, the architecture needs {need}"
            )


def read_tensors(file: Path, specs: dict[str, TensorSpec]) -> dict[str, mx.array]:
    """The tensors of ``file`` (its header already checked), cast to what the modules hold:
    float32, uint32 packed words, float16 scales and biases."""
    try:
        arrays = mx.load(str(file), format="safetensors")  # MLX's safetensors reader: no pickle, no code
    except (RuntimeError, ValueError, OSError) as err:
        raise BundleError(f"{file}: unreadable safetensors file: {' '.join(str(err).split())}") from err
    return {k: a.astype(LOAD_DTYPES[specs[k].kind]) for k, a in arrays.items()}


def sha256_of(path: str | os.PathLike) -> str:
    """The file's sha256, hex (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_digest(path: Path, expected: str) -> None:
    """A :class:`BundleError` when the file's sha256 is not ``expected`` (hex, any case)."""
    got = sha256_of(path)
    if got != expected.lower():
        raise BundleError(
            f"{path}: its sha256 differs from the one in model.json (file {got[:12]}..., "
            f"model.json {expected[:12]}...): the tensors fit, but the file was replaced or damaged; "
            "re-save the bundle with save_model"
        )


__all__ = [
    "DTYPES",
    "TensorEntry",
    "WeightsHeader",
    "check_digest",
    "check_header",
    "read_header",
    "read_tensors",
    "sha256_of",
]
