"""Model bundles: a directory with ``model.json`` and ``weights.safetensors`` (DESIGN.md section 6).

>>> save_model("models/unet", model, preprocessing=pre, outputs=out, name="unet")
>>> bundle = load_model("models/unet")            # ModelBundle: .model (eval mode), .preprocessing, ...
>>> bundle = load_model("models/unet", quantize=8)   # float weights packed to int8 after loading

Loading never executes code and never unpickles: ``model.json`` is parsed as JSON and
names an architecture from :data:`ARCHITECTURES` (a fixed table, not an import path);
the weights are read by MLX's safetensors reader. The architecture is built from the
hyper-parameters, then every tensor the file holds is checked against it: a missing,
unexpected or mis-shaped tensor is a :class:`BundleError` that names it. Both files are
written atomically (temporary file + rename), weights first.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten

from lattice.core.quantized import default_group_size
from lattice.io.atomic import atomic_write
from lattice.models.resnet import ResNetConfig, SparseResNet
from lattice.models.spec import (
    BUNDLE_FORMAT,
    TASKS,
    BundleError,
    Domain,
    Outputs,
    Preprocessing,
    Quantization,
)
from lattice.models.unet import MinkUNet, UNetConfig
from lattice.nn.quantized import (
    QuantizedConv3d,
    QuantizedConvTranspose3d,
    QuantizedGenerativeConvTranspose3d,
    QuantizedLinear,
    QuantizedSubmConv3d,
    quantize,
)

MODEL_JSON = "model.json"
WEIGHTS_FILE = "weights.safetensors"
# architecture name -> (config class, module class, task)
ARCHITECTURES: dict[str, tuple[type, type, str]] = {
    "minkunet": (UNetConfig, MinkUNet, "segmentation"),
    "sparse_resnet": (ResNetConfig, SparseResNet, "classification"),
}
_PACKED = (
    QuantizedConv3d,
    QuantizedConvTranspose3d,
    QuantizedGenerativeConvTranspose3d,
    QuantizedLinear,
    QuantizedSubmConv3d,
)
_SAVE_DTYPES = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}


@dataclass(frozen=True, eq=False)
class ModelBundle:
    """A loaded bundle: the network (in eval mode) and what ``model.json`` says about it."""

    model: nn.Module
    name: str
    task: str
    architecture: str
    config: UNetConfig | ResNetConfig
    preprocessing: Preprocessing
    outputs: Outputs
    quantization: Quantization | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    path: Path | None = None
    domain: Domain | None = None

    @property
    def num_parameters(self) -> int:
        """Number of stored values (packed words for quantized layers)."""
        return sum(int(v.size) for _, v in tree_flatten(self.model.parameters()))


def build_model(architecture: str, config: dict[str, Any]) -> nn.Module:
    """The network named ``architecture`` from its JSON hyper-parameters (randomly initialised)."""
    if architecture not in ARCHITECTURES:
        raise BundleError(f"unknown architecture {architecture!r}; known: {sorted(ARCHITECTURES)}")
    config_cls, model_cls, _ = ARCHITECTURES[architecture]
    fields = {f for f in config_cls.__dataclass_fields__ if f != "name"}
    unknown = set(config) - fields
    if unknown:
        raise BundleError(f"architecture.config has unknown keys {sorted(unknown)} for {architecture}")
    try:
        return model_cls(config_cls(**config))
    except (TypeError, ValueError) as err:
        raise BundleError(f"architecture.config for {architecture} is invalid: {err}") from err


def _architecture_of(model: nn.Module) -> tuple[str, UNetConfig | ResNetConfig]:
    for name, (config_cls, model_cls, _) in ARCHITECTURES.items():
        if isinstance(model, model_cls) and isinstance(getattr(model, "config", None), config_cls):
            return name, model.config
    raise BundleError(
        f"save_model supports {[m.__name__ for _, m, _ in ARCHITECTURES.values()]}, got {type(model).__name__}"
    )


def _quantization_of(model: nn.Module) -> Quantization | None:
    packed = [m for _, m in model.named_modules() if isinstance(m, _PACKED)]
    if not packed:
        return None
    bits = {m.bits for m in packed}
    if len(bits) != 1:
        raise BundleError(f"a bundle stores one bit width, the model mixes {sorted(bits)}")
    sizes = {m.group_size for m in packed}
    if all(m.group_size == default_group_size(m.in_channels) for m in packed):
        return Quantization(bits.pop(), None)
    if len(sizes) == 1:
        return Quantization(bits.pop(), sizes.pop())
    raise BundleError(
        f"a bundle stores one group size (or the default rule), the model mixes {sorted(sizes)}"
    )


def save_model(
    path: str | os.PathLike,
    model: nn.Module,
    *,
    preprocessing: Preprocessing,
    outputs: Outputs,
    name: str | None = None,
    metadata: dict[str, Any] | None = None,
    dtype: str = "float32",
    domain: Domain | None = None,
) -> Path:
    """Write ``model`` as a bundle directory ``path`` (created if needed); returns the path.

    ``dtype``: how float tensors are stored (``float32``, ``float16`` or ``bfloat16``; they
    are loaded back as float32). Packed (quantized) weights are stored as they are, and
    their bits and group size go into ``model.json``. ``metadata`` is free-form JSON
    (training data, metrics, licence). ``domain``: the statistics of the training inputs
    (``lattice.models.domain.domain_stats``), which ``model-run`` compares every input with.
    """
    arch, config = _architecture_of(model)
    if dtype not in _SAVE_DTYPES:
        raise BundleError(f"dtype must be one of {sorted(_SAVE_DTYPES)}, got {dtype!r}")
    if len(preprocessing.features) != config.in_channels:
        raise BundleError(
            f"preprocessing lists {len(preprocessing.features)} features, the model takes {config.in_channels}"
        )
    if len(outputs.classes) != config.num_classes:
        raise BundleError(f"outputs list {len(outputs.classes)} classes, the model has {config.num_classes}")
    quant = _quantization_of(model)
    arrays = {}
    for key, value in tree_flatten(model.parameters()):
        floating = mx.issubdtype(value.dtype, mx.floating)
        arrays[key] = value.astype(_SAVE_DTYPES[dtype]) if floating else value
    mx.eval(arrays)
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / f".{WEIGHTS_FILE}.{os.getpid()}.tmp.safetensors"
    try:
        mx.save_safetensors(str(tmp), arrays, metadata={"format": BUNDLE_FORMAT})
        digest = _sha256(tmp)
        os.replace(tmp, out / WEIGHTS_FILE)
    finally:
        tmp.unlink(missing_ok=True)
    doc = {
        "format": BUNDLE_FORMAT,
        "name": name or out.name,
        "task": ARCHITECTURES[arch][2],
        "architecture": {"name": arch, "config": config.to_dict()},
        "preprocessing": preprocessing.to_json(),
        "outputs": outputs.to_json(),
        "quantization": None if quant is None else quant.to_json(),
        "weights": {
            "file": WEIGHTS_FILE,
            "dtype": dtype,
            "tensors": len(arrays),
            "values": sum(int(a.size) for a in arrays.values()),
            "sha256": digest,
        },
        **({} if domain is None else {"domain": domain.to_json()}),
        "metadata": metadata or {},
    }
    with atomic_write(out / MODEL_JSON) as f:
        f.write((json.dumps(doc, indent=2) + "\n").encode())
    return out


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_model_json(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``model.json`` of bundle directory ``path`` (format and required keys checked)."""
    root = Path(path)
    if not root.exists():
        raise BundleError(f"{root}: no such model bundle")
    if not root.is_dir():
        raise BundleError(f"{root}: a model bundle is a directory with {MODEL_JSON} and {WEIGHTS_FILE}")
    meta = root / MODEL_JSON
    if not meta.is_file():
        raise BundleError(f"{root}: missing {MODEL_JSON}")
    try:
        doc = json.loads(meta.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise BundleError(f"{meta}: not valid JSON: {err}") from err
    if not isinstance(doc, dict):
        raise BundleError(f"{meta}: must hold a JSON object, got {type(doc).__name__}")
    if doc.get("format") != BUNDLE_FORMAT:
        raise BundleError(
            f"{meta}: unsupported format {doc.get('format')!r}; this lattice reads {BUNDLE_FORMAT}"
        )
    missing = [k for k in ("architecture", "preprocessing", "outputs") if k not in doc]
    if missing:
        raise BundleError(f"{meta}: missing keys {missing}")
    return doc


def _read_weights(root: Path, doc: dict[str, Any]) -> dict[str, mx.array]:
    info = doc.get("weights") or {}
    name = info.get("file", WEIGHTS_FILE) if isinstance(info, dict) else WEIGHTS_FILE
    if not isinstance(name, str) or Path(name).name != name or not name.endswith(".safetensors"):
        raise BundleError(
            f"{root}: weights.file must be a .safetensors file name in the bundle, got {name!r}"
        )
    file = root / name
    if not file.is_file():
        raise BundleError(f"{root}: missing {name}")
    try:
        return mx.load(str(file), format="safetensors")  # MLX's safetensors reader: no pickle, no code
    except (RuntimeError, ValueError, OSError) as err:
        raise BundleError(f"{file}: unreadable safetensors file: {err}") from err


def _check_digest(root: Path, doc: dict[str, Any]) -> None:
    info = doc.get("weights")
    expected = info.get("sha256") if isinstance(info, dict) else None
    file = root / (info.get("file", WEIGHTS_FILE) if isinstance(info, dict) else WEIGHTS_FILE)
    if expected is not None and _sha256(file) != expected:
        raise BundleError(
            f"{file}: its sha256 differs from the one in model.json (tensors fit, but the file was replaced "
            "or damaged); re-save the bundle with save_model"
        )


def _check_weights(
    file: str, have: dict[str, mx.array], want: dict[str, mx.array]
) -> list[tuple[str, mx.array]]:
    missing = sorted(set(want) - set(have))
    if missing:
        shown = ", ".join(f"'{k}' {tuple(want[k].shape)}" for k in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        raise BundleError(f"{file}: missing tensor {shown}{more}")
    unexpected = sorted(set(have) - set(want))
    if unexpected:
        raise BundleError(
            f"{file}: unexpected tensor {', '.join(repr(k) for k in unexpected[:5])} (not in the architecture)"
        )
    out = []
    for key, ref in want.items():
        got = have[key]
        if tuple(got.shape) != tuple(ref.shape):
            raise BundleError(
                f"{file}: tensor '{key}' has shape {tuple(got.shape)}, the architecture needs {tuple(ref.shape)}"
            )
        ref_float = mx.issubdtype(ref.dtype, mx.floating)
        if ref_float != mx.issubdtype(got.dtype, mx.floating) or (not ref_float and got.dtype != ref.dtype):
            raise BundleError(
                f"{file}: tensor '{key}' has dtype {got.dtype}, the architecture needs {ref.dtype}"
            )
        out.append((key, got.astype(ref.dtype) if ref_float else got))
    return out


def load_model(
    path: str | os.PathLike, *, quantize_bits: int | None = None, group_size: int | None = None
) -> ModelBundle:
    """Load a bundle directory; the model is in eval mode.

    ``quantize_bits`` (4 or 8) packs a float bundle's conv and linear weights after
    loading (:func:`lattice.nn.quantize`, ``group_size`` None for the default rule); a
    bundle saved quantized is rebuilt with packed modules before its weights are loaded.
    Raises :class:`BundleError` (a ``ValueError``) naming the bundle and what is wrong.
    """
    root = Path(path)
    doc = read_model_json(root)
    arch = doc["architecture"]
    if not isinstance(arch, dict) or not isinstance(arch.get("config"), dict):
        raise BundleError(f"{root / MODEL_JSON}: architecture must be {{'name': ..., 'config': {{...}}}}")
    try:
        model = build_model(arch.get("name"), arch["config"])
        pre = Preprocessing.from_json(doc["preprocessing"])
        outputs = Outputs.from_json(doc["outputs"])
        stored_quant = Quantization.from_json(doc.get("quantization"))
        domain = Domain.from_json(doc.get("domain"))
    except BundleError as err:
        raise BundleError(f"{root / MODEL_JSON}: {err}") from err
    task = doc.get("task", ARCHITECTURES[arch["name"]][2])
    config = model.config
    if (
        task not in TASKS
        or len(pre.features) != config.in_channels
        or len(outputs.classes) != config.num_classes
    ):
        raise BundleError(
            f"{root / MODEL_JSON}: task {task!r}, {len(pre.features)} features and {len(outputs.classes)} classes "
            f"do not fit the architecture ({config.in_channels} inputs, {config.num_classes} classes)"
        )
    if stored_quant is not None:
        quantize(model, bits=stored_quant.bits, group_size=stored_quant.group_size)
    weights = _read_weights(root, doc)
    want = dict(tree_flatten(model.parameters()))
    checked = _check_weights(str(root / WEIGHTS_FILE), weights, want)
    _check_digest(root, doc)
    model.load_weights(checked, strict=True)
    quant = stored_quant
    if quantize_bits is not None:
        if stored_quant is not None:
            raise BundleError(f"{root}: the bundle is already quantized ({stored_quant.bits} bits)")
        quant = Quantization(quantize_bits, group_size)
        quantize(model, bits=quant.bits, group_size=quant.group_size)
    model.eval()
    mx.eval(model.parameters())
    return ModelBundle(
        model=model,
        name=str(doc.get("name", root.name)),
        task=task,
        architecture=arch["name"],
        config=config,
        preprocessing=pre,
        outputs=outputs,
        quantization=quant,
        metadata=doc.get("metadata") or {},
        path=root,
        domain=domain,
    )


__all__ = [
    "ARCHITECTURES",
    "MODEL_JSON",
    "WEIGHTS_FILE",
    "ModelBundle",
    "build_model",
    "load_model",
    "read_model_json",
    "save_model",
]
