"""What each point attribute *is*, decided once: its kind, its default reduction, its colour scale.

Every reader, writer and reduction of lattice asks this module, so a colour is averaged per
channel and written back in the output format's convention, a class id is never averaged,
and a normal stays a unit vector. PDAL's dimension types are the model.

Kinds (``KINDS``) and the reduction each gets by default when points are merged into voxels:

================  =========================================================  ===========
kind              what                                                       default
================  =========================================================  ===========
``continuous``    measured values: intensity, remission, curvature, ...      ``mean``
``colour``        ``red``, ``green``, ``blue``, ``alpha`` channels           ``mean``
``categorical``   class / instance / segment ids, return numbers, rings,     ``mode``
                  flags, and integer attributes in general
``normal``        ``nx/ny/nz`` or ``normal_x/normal_y/normal_z``             ``mean``, then renormalised
``time``          ``gps_time``, ``time``, ``timestamp``                      ``mean`` (float64)
================  =========================================================  ===========

``mode`` picks the most frequent value of a voxel's points, ties to the smallest value.

Colours are stored as channels named ``red``, ``green``, ``blue`` (and ``alpha``); readers
decode packed PCL ``rgb``/``rgba`` fields and PLY ``r/g/b/a`` into them. A colour's *scale*
is its full-scale value: 255 for 8-bit channels, 65535 for 16-bit ones (LAS), 1.0 for unit
floats. A uint16 channel whose values are all <= 255 (an 8-bit colour in a LAS file, as in
PDAL's Autzen sample) has scale 255, so it is neither dimmed nor brightened when written
to a format with 8-bit colour. Float channels are unit colours (scale 1) when their values
lie in [0, 1] and are not all whole numbers; whole-number floats (8-bit values stored as
float, as in ScanNet's ``.bin`` or a ``.npy``) have scale 255 even when they are all 0 or 1.
``convert_colour`` moves values between scales.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

KINDS = ("continuous", "colour", "categorical", "normal", "time")
REDUCTIONS = ("mean", "sum", "min", "max", "mode", "first", "count")
DEFAULT_REDUCTION = {
    "continuous": "mean",
    "colour": "mean",
    "categorical": "mode",
    "normal": "mean",
    "time": "mean",
}

COLOUR_CHANNELS = ("red", "green", "blue", "alpha")
NORMAL_GROUPS = (("nx", "ny", "nz"), ("normal_x", "normal_y", "normal_z"))
_COLOUR_ALIASES = {"r": "red", "g": "green", "b": "blue", "a": "alpha"}

_TIME_NAMES = frozenset({"gps_time", "time", "timestamp", "utc_time", "adjusted_time", "t_sec"})
_CATEGORICAL_NAMES = frozenset(
    {
        "label", "labels", "class", "classes", "classification", "category", "semantic",
        "semantic_label", "semantic_id", "instance", "instance_id", "instance_label", "segment",
        "segment_id", "segment_index", "object", "object_id", "object_index", "cluster",
        "cluster_id", "return_number", "number_of_returns", "ring", "laser_id", "beam",
        "point_source_id", "scan_channel", "scanner_channel", "user_data", "classification_flags",
        "synthetic", "key_point", "withheld", "overlap", "scan_direction_flag",
        "edge_of_flight_line", "pred_label", "pred_class", "tree_id", "part_id",
    }
)  # fmt: skip
_CATEGORICAL_SUFFIXES = ("_id", "_label", "_class", "_index", "_flag")
# Integer attributes that are measurements, not ids (kept continuous even though integral).
_CONTINUOUS_NAMES = frozenset(
    {
        "intensity", "remission", "reflectance", "reflectivity", "amplitude", "deviation",
        "confidence", "curvature", "range", "distance", "nir", "infrared", "scan_angle",
        "scan_angle_rank", "count", "density", "height", "elevation", "snr", "noise",
        "wave_packet_desc_index", "byte_offset_to_waveform_data", "waveform_packet_size",
        "return_point_waveform_location", "x_t", "y_t", "z_t",
    }
)  # fmt: skip


def canonical_name(name: str) -> str:
    """The name lattice stores an attribute under: PLY's ``r/g/b/a`` become ``red/green/blue/alpha``."""
    return _COLOUR_ALIASES.get(name, name)


def attribute_kind(name: str, dtype: Any, format: str | None = None) -> str:
    """The kind of an attribute, from its name and type (``format``: the file format, for LAS rules).

    >>> attribute_kind("classification", "uint8")
    'categorical'
    >>> attribute_kind("intensity", "uint16")
    'continuous'
    >>> attribute_kind("red", "uint16")
    'colour'
    """
    lower = name.lower()
    dt = np.dtype(dtype)
    if lower in COLOUR_CHANNELS:
        return "colour"
    if any(lower in group for group in NORMAL_GROUPS):
        return "normal"
    if lower in _TIME_NAMES:
        return "time"
    if lower in _CONTINUOUS_NAMES:
        return "continuous"
    if lower in _CATEGORICAL_NAMES or lower.endswith(_CATEGORICAL_SUFFIXES):
        return "categorical"
    if dt.kind in "biu":
        return "categorical"
    return "continuous"


def colour_scale(values: np.ndarray) -> float:
    """Full-scale value of colour channel ``values``: 255, 65535 or 1.0 (see the module docs)."""
    a = np.asarray(values)
    if a.dtype == np.uint8 or a.dtype == np.bool_:
        return 255.0
    finite = a[np.isfinite(a)] if a.dtype.kind == "f" else a
    top = float(finite.max()) if finite.size else 0.0
    if a.dtype.kind in "iu":
        return 255.0 if top <= 255 else 65535.0
    if top <= 1.0 and finite.size and np.any(finite != np.round(finite)):
        return 1.0  # unit floats; whole-number floats (8-bit values stored as float) are not
    return 255.0 if top <= 255.0 else 65535.0


def convert_colour(values: np.ndarray, scale: float, to_scale: float, dtype: Any) -> np.ndarray:
    """``values`` at full scale ``scale`` as ``dtype`` at full scale ``to_scale`` (rounded, clipped)."""
    dt = np.dtype(dtype)
    v = np.asarray(values, dtype=np.float64)
    if scale != to_scale:
        v = v * (to_scale / scale)
    if dt.kind in "iu":
        v = np.clip(np.rint(np.nan_to_num(v, nan=0.0)), 0, min(to_scale, np.iinfo(dt).max))
    return v.astype(dt)


@dataclass(frozen=True)
class AttributeInfo:
    """One attribute's kind and how lattice treats it.

    ``dtype``: the type it is stored in (a writer casts back to it); ``scale``: a colour's
    full-scale value (None for other kinds); ``reduction``: how points merge into a voxel.
    """

    name: str
    kind: str
    dtype: str
    reduction: str
    scale: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"[AttributeInfo] kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(
                f"[AttributeInfo] reduction must be one of {', '.join(REDUCTIONS)}, got {self.reduction!r}"
            )

    def to_json(self) -> dict:
        """A JSON-ready dict (``from_json`` reads it back)."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, d: Mapping) -> AttributeInfo:
        """The inverse of ``to_json``; unknown keys are ignored."""
        scale = d.get("scale")
        return cls(
            str(d["name"]),
            str(d["kind"]),
            str(d["dtype"]),
            str(d["reduction"]),
            None if scale is None else float(scale),
        )


def info_for(
    name: str, values: np.ndarray, *, format: str | None = None, kind: str | None = None
) -> AttributeInfo:
    """The ``AttributeInfo`` of one attribute (``kind`` overrides the inferred kind)."""
    a = np.asarray(values)
    k = kind or attribute_kind(name, a.dtype, format)
    scale = colour_scale(a) if k == "colour" else None
    return AttributeInfo(name, k, a.dtype.name, DEFAULT_REDUCTION[k], scale)


def infos_for(
    attributes: Mapping[str, np.ndarray], *, format: str | None = None, kinds: Mapping[str, str] | None = None
) -> dict[str, AttributeInfo]:
    """``info_for`` over every attribute; ``kinds`` gives explicit kinds for some names."""
    kinds = kinds or {}
    infos = {n: info_for(n, v, format=format, kind=kinds.get(n)) for n, v in attributes.items()}
    group = [n for n in COLOUR_CHANNELS if n in infos and infos[n].kind == "colour"]
    if len(group) > 1:  # one scale for the colour: a channel that happens to be all 0/1 follows the rest
        joint = colour_scale(
            np.concatenate([np.asarray(attributes[n]).ravel().astype(np.float64) for n in group])
        )
        if all(np.asarray(attributes[n]).dtype.kind == "f" for n in group):
            infos.update({n: replace(infos[n], scale=joint) for n in group})
    return infos


def check_reductions(reductions: Mapping[str, str] | None, names: Iterable[str], *, flag: str) -> dict:
    """``reductions`` validated against the attribute ``names`` (``flag`` names the option in errors)."""
    out = dict(reductions or {})
    known = set(names)
    for name, r in out.items():
        if r not in REDUCTIONS:
            raise ValueError(
                f"{flag}: reduction for {name!r} must be one of {', '.join(REDUCTIONS)}, got {r!r}"
            )
        if name not in known:
            have = ", ".join(sorted(known)) or "none"
            raise ValueError(f"{flag}: no attribute {name!r} to reduce; the input has: {have}")
    return out


def decode_packed_colour(packed: np.ndarray, *, alpha: bool) -> dict[str, np.ndarray]:
    """PCL-packed colours (``0xAARRGGBB`` in a uint32 or the bits of a float32) as uint8 channels.

    ``alpha``: also return the ``alpha`` byte (PCL's ``rgba`` fields; its ``rgb`` fields
    leave that byte unused).
    """
    bits = np.ascontiguousarray(packed).view(np.uint32)
    out = {
        "red": ((bits >> np.uint32(16)) & np.uint32(0xFF)).astype(np.uint8),
        "green": ((bits >> np.uint32(8)) & np.uint32(0xFF)).astype(np.uint8),
        "blue": (bits & np.uint32(0xFF)).astype(np.uint8),
    }
    if alpha:
        out["alpha"] = ((bits >> np.uint32(24)) & np.uint32(0xFF)).astype(np.uint8)
    return out


def encode_packed_colour(channels: Mapping[str, np.ndarray], *, as_float: bool) -> np.ndarray:
    """uint8 ``red/green/blue`` (and ``alpha``) packed as PCL does: float32 bits, or uint32."""
    r, g, b = (np.asarray(channels[c]).astype(np.uint32) for c in ("red", "green", "blue"))
    bits = (r << np.uint32(16)) | (g << np.uint32(8)) | b
    if "alpha" in channels:
        bits |= np.asarray(channels["alpha"]).astype(np.uint32) << np.uint32(24)
    return bits.view(np.float32) if as_float else bits


def decode_colours(attributes: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict | None]:
    """Readers' colour rule: ``attributes`` with colours as ``red/green/blue(/alpha)`` channels.

    PLY-style ``r/g/b/a`` are renamed; a packed 1-D ``rgb``/``rgba`` (uint32 or float32 bits,
    PCL's ``0xAARRGGBB``) and an ``(N, 3)``/``(N, 4)`` ``rgb``/``rgba`` array are split into
    channels, in the place of the field they came from. Returns the new attributes and the
    packing that was decoded (``{"field": "rgb", "type": "F"}`` for a PCL field, so a PCD
    writer can pack it the same way), or None. Nothing changes when ``red`` already exists.
    """
    attrs = dict(attributes)
    if any(c in attrs for c in COLOUR_CHANNELS):
        return attrs, None
    if all(c in attrs for c in ("r", "g", "b")):
        return {canonical_name(k) if k in _COLOUR_ALIASES else k: v for k, v in attrs.items()}, None
    for field in ("rgb", "rgba"):
        a = attrs.get(field)
        if a is None:
            continue
        if a.ndim == 1 and a.dtype.itemsize == 4 and a.dtype.kind in "uif":
            bits = np.ascontiguousarray(a).view(np.uint32)
            keep_alpha = field == "rgba" or bool(np.any(bits >> np.uint32(24)))
            parts = decode_packed_colour(bits, alpha=keep_alpha)
            packing = {"field": field, "type": "F" if a.dtype.kind == "f" else "U"}
        elif a.ndim == 2 and a.shape[1] in (3, 4):
            parts = {COLOUR_CHANNELS[i]: np.ascontiguousarray(a[:, i]) for i in range(a.shape[1])}
            packing = None
        else:
            continue
        out: dict[str, np.ndarray] = {}
        for k, v in attrs.items():
            if k == field:
                out.update(parts)
            else:
                out[k] = v
        return out, packing
    return attrs, None


def colour_channels_of(attributes: Mapping[str, np.ndarray]) -> list[str]:
    """The colour channels present (``red``, ``green``, ``blue`` all present; ``alpha`` optional)."""
    if not all(c in attributes for c in ("red", "green", "blue")):
        return []
    return [c for c in COLOUR_CHANNELS if c in attributes]


def as_8bit_colours(attributes: Mapping[str, np.ndarray], infos: Mapping[str, AttributeInfo]) -> dict:
    """The colour channels as uint8 at scale 255 (what PLY, PCD and text files hold)."""
    out = {}
    for c in colour_channels_of(attributes):
        scale = infos[c].scale if c in infos and infos[c].scale else colour_scale(attributes[c])
        out[c] = convert_colour(attributes[c], scale, 255.0, np.uint8)
    return out


def schema_json(infos: Iterable[AttributeInfo]) -> str:
    """A JSON list of ``AttributeInfo`` dicts (how sparse NPZ files record their channels)."""
    return json.dumps([i.to_json() for i in infos])


def schema_from_json(text: str) -> tuple[AttributeInfo, ...]:
    """The inverse of ``schema_json``."""
    return tuple(AttributeInfo.from_json(d) for d in json.loads(text))


__all__ = [
    "COLOUR_CHANNELS",
    "DEFAULT_REDUCTION",
    "KINDS",
    "NORMAL_GROUPS",
    "REDUCTIONS",
    "AttributeInfo",
    "as_8bit_colours",
    "attribute_kind",
    "canonical_name",
    "check_reductions",
    "colour_channels_of",
    "colour_scale",
    "convert_colour",
    "decode_colours",
    "decode_packed_colour",
    "encode_packed_colour",
    "info_for",
    "infos_for",
    "schema_from_json",
    "schema_json",
]
