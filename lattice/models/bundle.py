"""Model bundles: a directory with ``model.json`` and ``weights.safetensors`` (DESIGN.md section 6).

>>> save_model(model, "models/unet", preprocessing=pre, outputs=out, name="unet")
>>> bundle = load_model("models/unet")            # ModelBundle: .model (eval mode), .preprocessing, ...
>>> bundle = load_model("models/unet", quantize_bits=8)   # float weights packed to int8 after loading

Loading never executes code and never unpickles, and builds nothing a bundle has not
shown it holds: ``model.json`` is parsed as JSON, its architecture looked up in
:data:`ARCHITECTURES` (a fixed table, not an import path) and its hyper-parameters
bounded (:mod:`lattice.models.limits`); the weight file's header is read and matched,
tensor by tensor, with the shapes the configuration implies
(:mod:`lattice.models.weightfile`, :mod:`lattice.models.params`); only then are the
modules built and the tensors read by MLX's safetensors reader. Every failure is one
:class:`BundleError` line naming the file and the key or tensor. Both files are written
atomically (temporary file + rename), weights first, with the weights' sha256 in
``model.json``.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_map_with_path

from lattice.core.quantized import QuantizedWeight, default_group_size
from lattice.io.atomic import atomic_write
from lattice.models.limits import MAX_JSON_BYTES, MAX_VALUES, check_config, check_depth, shown
from lattice.models.params import parameter_specs
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
from lattice.models.weightfile import check_digest, check_header, read_header, read_tensors, sha256_of
from lattice.nn.quantized import (
    QuantizedConv3d,
    QuantizedConvTranspose3d,
    QuantizedGenerativeConvTranspose3d,
    QuantizedLinear,
    QuantizedSubmConv3d,
    from_packed,
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
_HEX64 = re.compile(r"[0-9a-fA-F]{64}")


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
    sha256: str | None = None  # the weights' checksum, verified; None: model.json had none

    @property
    def checksum_verified(self) -> bool:
        """Whether the weight file was checked against a sha256 from ``model.json``."""
        return self.sha256 is not None

    @property
    def num_parameters(self) -> int:
        """Number of stored values (packed words for quantized layers)."""
        return sum(int(v.size) for _, v in tree_flatten(self.model.parameters()))


def _config_from_json(architecture: Any, config: Any) -> tuple[str, UNetConfig | ResNetConfig]:
    if not isinstance(architecture, str) or architecture not in ARCHITECTURES:
        raise BundleError(f"unknown architecture {shown(architecture)}; known: {sorted(ARCHITECTURES)}")
    config_cls = ARCHITECTURES[architecture][0]
    fields = {f for f in config_cls.__dataclass_fields__ if f != "name"}
    check_config(config, fields)
    try:
        return architecture, config_cls(**config)
    except (TypeError, ValueError) as err:
        raise BundleError(f"architecture.config for {architecture} is invalid: {err}") from err


def build_model(architecture: str, config: dict[str, Any]) -> nn.Module:
    """The network named ``architecture`` from its JSON hyper-parameters (randomly initialised,
    lazily: nothing is allocated until its parameters are evaluated). The values must be in
    the bundle bounds of :mod:`lattice.models.limits`."""
    name, checked = _config_from_json(architecture, config)
    return ARCHITECTURES[name][1](checked)


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
    model: nn.Module,
    path: str | os.PathLike,
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
    if isinstance(model, str | os.PathLike) and isinstance(path, nn.Module):
        raise TypeError("save_model takes (model, path): the model first, then the bundle directory")
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
        digest = sha256_of(tmp)
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


def read_model_json(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``model.json`` of bundle directory ``path`` (size, nesting, format and
    required keys checked)."""
    root = Path(path)
    if not root.exists():
        raise BundleError(f"{root}: no such model bundle")
    if not root.is_dir():
        raise BundleError(f"{root}: a model bundle is a directory with {MODEL_JSON} and {WEIGHTS_FILE}")
    meta = root / MODEL_JSON
    if not meta.is_file():
        raise BundleError(f"{root}: missing {MODEL_JSON}")
    if meta.stat().st_size > MAX_JSON_BYTES:
        raise BundleError(f"{meta}: {meta.stat().st_size} bytes, over the {MAX_JSON_BYTES}-byte limit")
    try:
        doc = json.loads(meta.read_bytes().decode("utf-8"))
        check_depth(doc)
    except RecursionError:
        raise BundleError(f"{meta}: not valid JSON: nested too deeply") from None
    except (UnicodeDecodeError, ValueError) as err:  # JSONDecodeError and the int-digit limit
        raise BundleError(f"{meta}: not valid JSON: {' '.join(str(err).split())[:160]}") from None
    except BundleError as err:
        raise BundleError(f"{meta}: {err}") from None
    if not isinstance(doc, dict):
        raise BundleError(f"{meta}: must hold a JSON object, got {type(doc).__name__}")
    if doc.get("format") != BUNDLE_FORMAT:
        raise BundleError(
            f"{meta}: unsupported format {shown(doc.get('format'))}; this lattice reads {BUNDLE_FORMAT}"
        )
    missing = [k for k in ("architecture", "preprocessing", "outputs") if k not in doc]
    if missing:
        raise BundleError(f"{meta}: missing keys {missing}")
    return doc


@dataclass(frozen=True)
class _Description:
    """What ``model.json`` says, checked, before anything is built or read."""

    arch: str
    config: UNetConfig | ResNetConfig
    task: str
    preprocessing: Preprocessing
    outputs: Outputs
    quantization: Quantization | None
    domain: Domain | None
    weights: Path
    sha256: str | None


def _weights_entry(root: Path, doc: dict[str, Any]) -> tuple[Path, str | None]:
    info = doc.get("weights", {})
    if not isinstance(info, dict):
        raise BundleError(f"weights must be a JSON object, got {type(info).__name__}")
    name = info.get("file", WEIGHTS_FILE)
    if not isinstance(name, str) or Path(name).name != name or not name.endswith(".safetensors"):
        raise BundleError(f"weights.file must be a .safetensors file name in the bundle, got {shown(name)}")
    digest = info.get("sha256")
    if digest is not None and (not isinstance(digest, str) or not _HEX64.fullmatch(digest)):
        raise BundleError(f"weights.sha256 must be 64 hexadecimal digits, got {shown(digest)}")
    return root / name, digest


def _describe(root: Path, doc: dict[str, Any]) -> _Description:
    arch = doc["architecture"]
    if not isinstance(arch, dict):
        raise BundleError(
            f"architecture must be {{'name': ..., 'config': {{...}}}}, got {type(arch).__name__}"
        )
    name, config = _config_from_json(arch.get("name"), arch.get("config"))
    pre = Preprocessing.from_json(doc["preprocessing"])
    outputs = Outputs.from_json(doc["outputs"])
    quant = Quantization.from_json(doc.get("quantization"))
    domain = Domain.from_json(doc.get("domain"))
    task = doc.get("task", ARCHITECTURES[name][2])
    if (
        task not in TASKS
        or len(pre.features) != config.in_channels
        or len(outputs.classes) != config.num_classes
    ):
        raise BundleError(
            f"task {shown(task)}, {len(pre.features)} features and {len(outputs.classes)} classes do not fit "
            f"the architecture ({config.in_channels} inputs, {config.num_classes} classes)"
        )
    if not isinstance(doc.get("metadata") or {}, dict):
        raise BundleError(f"metadata must be a JSON object, got {type(doc['metadata']).__name__}")
    return _Description(name, config, task, pre, outputs, quant, domain, *_weights_entry(root, doc))


def _packed_twins(model: nn.Module, tensors: dict[str, mx.array], quant: Quantization) -> None:
    """Swap the conv and linear modules whose packed tensors the file holds for quantized
    modules holding them (``lattice.nn.from_packed``): nothing is quantized."""

    def twin(path: str, module: nn.Module) -> nn.Module:
        if f"{path}.scales" not in tensors:
            return module
        shape = tuple(module["weight"].shape)
        group = quant.group_size or default_group_size(shape[-1])
        layout = "linear" if len(shape) == 2 else "dense"
        packed = (tensors[f"{path}.{k}"] for k in ("weight", "scales", "biases"))
        return from_packed(module, QuantizedWeight(*packed, quant.bits, group, shape, layout))

    model.update_modules(tree_map_with_path(twin, model.leaf_modules(), is_leaf=nn.Module.is_module))


def load_model(
    path: str | os.PathLike,
    *,
    quantize_bits: int | None = None,
    group_size: int | None = None,
    require_checksum: bool = False,
) -> ModelBundle:
    """Load a bundle directory; the model is in eval mode.

    In this order, each step only once the one before passed: ``model.json`` parsed and
    every value checked (architecture bounds: :mod:`lattice.models.limits`); the weight
    file's header read and every tensor's name, shape and dtype matched with what the
    configuration implies (:func:`lattice.models.params.parameter_specs`); its sha256
    compared with ``model.json``'s; the modules built; the weights loaded (a bundle saved
    quantized straight into packed modules); then ``quantize_bits`` (4 or 8) packs a float
    bundle's conv and linear weights (``group_size`` None for the default rule).

    A bundle without ``weights.sha256`` loads unchecked (``ModelBundle.sha256`` is None);
    ``require_checksum`` refuses it. Raises :class:`BundleError` (a ``ValueError``), one
    line naming the bundle file and the key or tensor.
    """
    root = Path(path)
    try:
        at_load = None if quantize_bits is None else Quantization(quantize_bits, group_size)
    except BundleError as err:
        raise BundleError(
            f"{root}: quantize_bits={quantize_bits!r}, group_size={group_size!r}: {err}"
        ) from None
    doc = read_model_json(root)
    try:
        d = _describe(root, doc)
    except BundleError as err:
        raise BundleError(f"{root / MODEL_JSON}: {err}") from None
    if at_load is not None and d.quantization is not None:
        raise BundleError(f"{root}: the bundle is already quantized ({d.quantization.bits} bits)")
    specs = parameter_specs(d.config, d.quantization)
    values = sum(s.size for s in specs.values())
    if values > MAX_VALUES:
        raise BundleError(
            f"{root / MODEL_JSON}: architecture.config implies {values:,} parameter values, over the "
            f"{MAX_VALUES:,} a bundle may hold"
        )
    if d.sha256 is None and require_checksum:
        raise BundleError(f"{root / MODEL_JSON}: no weights.sha256, and a checksum is required")
    if not d.weights.is_file():
        raise BundleError(f"{root}: missing {d.weights.name}")
    check_header(read_header(d.weights), specs)
    if d.sha256 is not None:
        check_digest(d.weights, d.sha256)
    model = ARCHITECTURES[d.arch][1](d.config)  # lazy arrays: nothing is allocated until loaded
    tensors = read_tensors(d.weights, specs)
    if d.quantization is not None:
        _packed_twins(model, tensors, d.quantization)
    model.load_weights(list(tensors.items()), strict=True)
    if at_load is not None:
        quantize(model, bits=at_load.bits, group_size=at_load.group_size)
    model.eval()
    mx.eval(model.parameters())
    return ModelBundle(
        model=model,
        name=str(doc.get("name", root.name)),
        task=d.task,
        architecture=d.arch,
        config=d.config,
        preprocessing=d.preprocessing,
        outputs=d.outputs,
        quantization=d.quantization or at_load,
        metadata=doc.get("metadata") or {},
        path=root,
        domain=d.domain,
        sha256=d.sha256,
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
