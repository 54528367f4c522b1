"""What a model bundle's ``model.json`` says, as frozen value objects.

``model.json`` (format ``lattice.model/1``)::

    {
      "format": "lattice.model/1",
      "name": "minkunet14-semantickitti",
      "task": "segmentation",                       # or "classification"
      "architecture": {"name": "minkunet", "config": {...}},
      "preprocessing": {
        "voxel_size": [0.1, 0.1, 0.1], "origin": [0, 0, 0],
        "features": [{"name": "ones"}, {"name": "z", "mean": -1.0, "std": 1.2}, ...]
      },
      "outputs": {
        "classes": [{"id": 1, "name": "car", "color": [100, 150, 245], "asprs": 1}, ...],
        "ignore": {"id": 0, "name": "unlabeled", "color": [0, 0, 0]},
        "interpolation": "nearest"
      },
      "quantization": null,                          # or {"bits": 8, "group_size": null}
      "weights": {"file": "weights.safetensors", "dtype": "float32", "tensors": 123,
                  "parameters": 456789, "sha256": "..."},
      "domain": {"scans": 5, "voxel_size": [...], "values": {"z": {"mean", "std", "min", "max"}, ...},
                 "extent": {"x": {...}, "y": {...}, "z": {...}}, "points_per_voxel": {...}},  # optional
      "metadata": {...}                              # free-form: training data, metrics, licence
    }

Every parse error is a ``BundleError`` (a ``ValueError``) naming the bundle and the key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

BUNDLE_FORMAT = "lattice.model/1"
TASKS = ("segmentation", "classification")
INTERPOLATIONS = ("nearest", "linear")
# Feature names computed from the points themselves; any other name is a point attribute.
GEOMETRIC_FEATURES = ("ones", "x", "y", "z", "x_local", "y_local", "z_local", "height_above_min", "planarity")
# Geometric features computed over a neighbourhood of size ``scale`` (lattice.models.neighbourhood).
NEIGHBOURHOOD_NAMES = ("height_above_min", "planarity")


class BundleError(ValueError):
    """A model bundle could not be read, validated or written (one line naming the bundle)."""


def _number(value: Any, where: str, *, positive: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (positive and value <= 0):
        rule = "a positive finite number" if positive else "a finite number"
        raise BundleError(f"{where} must be {rule}, got {value!r}")
    return float(value)


def _triple(value: Any, where: str, *, positive: bool = False) -> tuple[float, float, float]:
    items = value if isinstance(value, list | tuple) else [value]
    if len(items) == 1:
        items = list(items) * 3
    if len(items) != 3:
        raise BundleError(f"{where} must be one or three numbers, got {value!r}")
    return tuple(_number(v, where, positive=positive) for v in items)


def _object(value: Any, where: str, keys: set[str] | None = None) -> dict:
    """``value`` when it is a JSON object (with no key outside ``keys``, when given)."""
    if not isinstance(value, dict):
        raise BundleError(f"{where} must be a JSON object, got {type(value).__name__}")
    unknown = set() if keys is None else set(value) - keys
    if unknown:
        raise BundleError(f"{where} has unknown keys {sorted(unknown)}")
    return value


def _name(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise BundleError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _asprs(code: Any, where: str) -> int | None:
    if code is not None and (isinstance(code, bool) or not isinstance(code, int) or not 0 <= code <= 255):
        raise BundleError(f"{where}.asprs must be an int in 0..255 (an ASPRS LAS class code), got {code!r}")
    return code


def _entries(value: Any, where: str, parse) -> tuple:
    """A non-empty JSON list, each entry parsed by ``parse(entry, "where[i]")``."""
    if not isinstance(value, list) or not value:
        raise BundleError(f"{where} must be a non-empty list, got {value!r}")
    return tuple(parse(e, f"{where}[{i}]") for i, e in enumerate(value))


@dataclass(frozen=True)
class FeatureSpec:
    """One input channel: ``(value - mean) / std``, averaged over each voxel's points.

    ``name``: ``ones`` (a constant 1), ``x``/``y``/``z`` (the coordinate), ``x_local`` /
    ``y_local``/``z_local`` (offset from the voxel centre in voxel units, in [-0.5, 0.5)),
    or a point attribute; ``aliases`` are other attribute names accepted for it (e.g.
    ``remission`` for ``intensity``), or ``height_above_min`` / ``planarity``, computed over
    a neighbourhood of size ``scale`` (:mod:`lattice.models.neighbourhood`).

    For an attribute that some clouds lack (KITTI remission, say):

    - ``missing``: the raw value used for every point when the cloud has neither the
      attribute nor an alias (None, the default: such a cloud is an error);
    - ``indicator``: the channel is not the attribute's value but whether the cloud has
      it: 1 for every point when it does, 0 when it does not (then ``(v - mean) / std``).

    A model trained with the pair ``FeatureSpec("intensity", m, s, ("remission",), missing=m)``
    and ``FeatureSpec("intensity", aliases=("remission",), indicator=True)`` reads the
    attribute where a cloud has it and runs on clouds without it.
    """

    name: str
    mean: float = 0.0
    std: float = 1.0
    aliases: tuple[str, ...] = ()
    missing: float | None = None
    indicator: bool = False
    scale: float | None = None

    def __post_init__(self) -> None:
        if (self.name in NEIGHBOURHOOD_NAMES) != (self.scale is not None):
            raise BundleError(
                f"feature {self.name!r}: 'scale' (a neighbourhood size) is needed by "
                f"{' and '.join(NEIGHBOURHOOD_NAMES)} and taken by no other feature"
            )
        if self.scale is not None:
            object.__setattr__(
                self, "scale", _number(self.scale, f"feature {self.name!r} scale", positive=True)
            )
        if not isinstance(self.indicator, bool):
            raise BundleError(
                f"feature {self.name!r}: indicator must be true or false, got {self.indicator!r}"
            )
        if self.name in GEOMETRIC_FEATURES and (self.indicator or self.missing is not None):
            raise BundleError(
                f"feature {self.name!r} is computed from the coordinates: it takes no 'missing' or 'indicator'"
            )
        if self.missing is not None:
            object.__setattr__(self, "missing", _number(self.missing, f"feature {self.name!r} missing"))

    @classmethod
    def from_json(cls, d: Any, where: str) -> FeatureSpec:
        d = _object(d, where, {"name", "mean", "std", "aliases", "missing", "indicator", "scale"})
        aliases = d.get("aliases", [])
        if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
            raise BundleError(f"{where}.aliases must be a list of names, got {aliases!r}")
        missing, indicator = d.get("missing"), d.get("indicator", False)
        if not isinstance(indicator, bool):
            raise BundleError(f"{where}.indicator must be true or false, got {indicator!r}")
        try:
            return cls(
                _name(d.get("name"), f"{where}.name"),
                _number(d.get("mean", 0.0), f"{where}.mean"),
                _number(d.get("std", 1.0), f"{where}.std", positive=True),
                tuple(aliases),
                None if missing is None else _number(missing, f"{where}.missing"),
                indicator,
                None if d.get("scale") is None else _number(d["scale"], f"{where}.scale", positive=True),
            )
        except BundleError as e:
            raise BundleError(f"{where}: {e}") from None

    def to_json(self) -> dict:
        """The ``features`` entry of ``model.json``."""
        d: dict[str, Any] = {"name": self.name, "mean": self.mean, "std": self.std}
        if self.aliases:
            d["aliases"] = list(self.aliases)
        if self.missing is not None:
            d["missing"] = self.missing
        if self.indicator:
            d["indicator"] = True
        if self.scale is not None:
            d["scale"] = self.scale
        return d


@dataclass(frozen=True)
class Preprocessing:
    """How points become the network's input tensor: grid and per-voxel mean features."""

    voxel_size: tuple[float, float, float]
    features: tuple[FeatureSpec, ...]
    origin: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def __post_init__(self) -> None:
        object.__setattr__(self, "voxel_size", _triple(self.voxel_size, "voxel_size", positive=True))
        object.__setattr__(self, "origin", _triple(self.origin, "origin"))
        if not self.features:
            raise BundleError("preprocessing.features must list at least one feature")

    @property
    def feature_names(self) -> tuple[str, ...]:
        """The input channel names, in order."""
        return tuple(f.name for f in self.features)

    @classmethod
    def from_json(cls, d: Any) -> Preprocessing:
        d = _object(d, "preprocessing")
        features = _entries(d.get("features"), "preprocessing.features", FeatureSpec.from_json)
        return cls(
            _triple(d.get("voxel_size"), "preprocessing.voxel_size", positive=True),
            features,
            _triple(d.get("origin", 0.0), "preprocessing.origin"),
        )

    def to_json(self) -> dict:
        """The ``preprocessing`` object of ``model.json``."""
        return {
            "voxel_size": list(self.voxel_size),
            "origin": list(self.origin),
            "reduction": "mean",
            "features": [f.to_json() for f in self.features],
        }


@dataclass(frozen=True)
class ClassInfo:
    """One output class: the label ``id`` written for it, its ``name``, RGB ``color`` (0..255)
    and ``asprs``: the ASPRS LAS classification code it becomes with ``--to-classification``
    (None: no code, written as 1, unclassified)."""

    id: int
    name: str
    color: tuple[int, int, int] = (128, 128, 128)
    asprs: int | None = None

    def __post_init__(self) -> None:
        _asprs(self.asprs, f"class {self.name!r}")

    @classmethod
    def from_json(cls, d: Any, where: str) -> ClassInfo:
        d = _object(d, where, {"id", "name", "color", "asprs"})
        cid, color = d.get("id"), d.get("color", [128, 128, 128])
        if isinstance(cid, bool) or not isinstance(cid, int):
            raise BundleError(f"{where}.id must be an int, got {cid!r}")
        if (
            not isinstance(color, list)
            or len(color) != 3
            or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in color)
        ):
            raise BundleError(f"{where}.color must be three ints in 0..255, got {color!r}")
        code = _asprs(d.get("asprs"), where)
        return cls(cid, _name(d.get("name"), f"{where}.name"), tuple(color), code)

    def to_json(self) -> dict:
        """The class entry of ``model.json``."""
        d: dict[str, Any] = {"id": self.id, "name": self.name, "color": list(self.color)}
        if self.asprs is not None:
            d["asprs"] = self.asprs
        return d


DEFAULT_IGNORE = ClassInfo(-1, "unlabeled", (0, 0, 0))


@dataclass(frozen=True)
class Outputs:
    """The network's classes (logit ``k`` is ``classes[k]``), the label of points it cannot
    see (``ignore``: non-finite coordinates) and how voxel scores reach the points."""

    classes: tuple[ClassInfo, ...]
    ignore: ClassInfo = DEFAULT_IGNORE
    interpolation: str = "nearest"

    def __post_init__(self) -> None:
        if not self.classes:
            raise BundleError("outputs.classes must list at least one class")
        ids = [c.id for c in self.classes]
        if len(set(ids)) != len(ids) or self.ignore.id in ids:
            raise BundleError(f"outputs class ids must be unique and differ from the ignore id, got {ids}")
        if self.interpolation not in INTERPOLATIONS:
            raise BundleError(
                f"outputs.interpolation must be one of {list(INTERPOLATIONS)}, got {self.interpolation!r}"
            )

    @property
    def names(self) -> tuple[str, ...]:
        """Class names in logit order."""
        return tuple(c.name for c in self.classes)

    @property
    def asprs_map(self) -> dict[int, int]:
        """Class id -> ASPRS LAS classification code, for every class and the ignore class
        (1, unclassified, where a class has no ``asprs`` code)."""
        return {c.id: 1 if c.asprs is None else c.asprs for c in (*self.classes, self.ignore)}

    @classmethod
    def from_json(cls, d: Any) -> Outputs:
        d = _object(d, "outputs")
        classes = _entries(d.get("classes"), "outputs.classes", ClassInfo.from_json)
        ignore = d.get("ignore")
        return cls(
            classes,
            DEFAULT_IGNORE if ignore is None else ClassInfo.from_json(ignore, "outputs.ignore"),
            d.get("interpolation", "nearest"),
        )

    def to_json(self) -> dict:
        """The ``outputs`` object of ``model.json``."""
        return {
            "classes": [c.to_json() for c in self.classes],
            "ignore": self.ignore.to_json(),
            "interpolation": self.interpolation,
        }


@dataclass(frozen=True)
class Quantization:
    """Packed weights in the bundle: ``bits`` 4 or 8, ``group_size`` 32/64/128 or None (auto)."""

    bits: int
    group_size: int | None = None

    def __post_init__(self) -> None:
        def integer(v: Any) -> bool:  # 8.0 == 8 and True == 1: neither is a bit width
            return isinstance(v, int) and not isinstance(v, bool)

        if not integer(self.bits) or self.bits not in (4, 8):
            raise BundleError(f"quantization.bits must be 4 or 8, got {self.bits!r}")
        if self.group_size is not None and (
            not integer(self.group_size) or self.group_size not in (32, 64, 128)
        ):
            raise BundleError(f"quantization.group_size must be 32, 64, 128 or null, got {self.group_size!r}")

    @classmethod
    def from_json(cls, d: Any) -> Quantization | None:
        if d is None:
            return None
        d = _object(d, "quantization", {"bits", "group_size"})
        return cls(d.get("bits"), d.get("group_size"))

    def to_json(self) -> dict:
        """The ``quantization`` object of ``model.json``."""
        return {"bits": self.bits, "group_size": self.group_size}


_STATS_KEYS = ("mean", "std", "min", "max")


@dataclass(frozen=True)
class ValueStats:
    """Mean, standard deviation, minimum and maximum of one quantity (``name``) of the
    training data: a coordinate or input attribute over all points, or a per-scan value
    (extent, points per voxel) over the scans."""

    name: str
    mean: float
    std: float
    min: float
    max: float

    def __post_init__(self) -> None:
        for key in _STATS_KEYS:
            object.__setattr__(self, key, _number(getattr(self, key), f"domain {self.name}.{key}"))
        if self.std < 0 or self.min > self.max:
            raise BundleError(
                f"domain {self.name}: needs std >= 0 and min <= max, got std {self.std}, "
                f"min {self.min}, max {self.max}"
            )

    @classmethod
    def from_json(cls, name: str, d: Any, where: str) -> ValueStats:
        d = _object(d, where)
        if set(d) != set(_STATS_KEYS):
            raise BundleError(f"{where} must have exactly the keys {list(_STATS_KEYS)}, got {sorted(d)}")
        return cls(name, *(d[k] for k in _STATS_KEYS))

    def to_json(self) -> dict:
        """``{"mean", "std", "min", "max"}`` (rounded to 6 significant digits)."""
        return {k: float(f"{getattr(self, k):.6g}") for k in _STATS_KEYS}


@dataclass(frozen=True)
class Domain:
    """What the training inputs looked like (``model.json``'s optional ``domain``).

    ``values``: per coordinate (``x``, ``y``, ``z``) and per input attribute the model reads
    (e.g. ``intensity``), statistics over every point of every training scan. ``extent``:
    the bounding-box size per axis, statistics over the scans. ``points_per_voxel``: points
    divided by occupied voxels at ``voxel_size``, statistics over the scans. ``scans``: the
    number of training scans. ``lattice.models.domain`` computes it and compares inputs.
    """

    scans: int
    voxel_size: tuple[float, float, float]
    values: tuple[ValueStats, ...]
    extent: tuple[ValueStats, ValueStats, ValueStats]
    points_per_voxel: ValueStats

    def __post_init__(self) -> None:
        if isinstance(self.scans, bool) or not isinstance(self.scans, int) or self.scans < 1:
            raise BundleError(f"domain.scans must be a positive int, got {self.scans!r}")
        object.__setattr__(self, "voxel_size", _triple(self.voxel_size, "domain.voxel_size", positive=True))
        if tuple(e.name for e in self.extent) != ("x", "y", "z"):
            raise BundleError(f"domain.extent must give x, y and z, got {[e.name for e in self.extent]}")

    def value(self, name: str) -> ValueStats | None:
        """The statistics of coordinate or attribute ``name``, or None when not recorded."""
        return next((v for v in self.values if v.name == name), None)

    @classmethod
    def from_json(cls, d: Any) -> Domain | None:
        if d is None:
            return None
        d = _object(d, "domain")
        want = {"scans", "voxel_size", "values", "extent", "points_per_voxel"}
        if set(d) != want:
            raise BundleError(f"domain must have exactly the keys {sorted(want)}, got {sorted(d)}")
        values, extent = _object(d["values"], "domain.values"), _object(d["extent"], "domain.extent")
        if set(extent) != {"x", "y", "z"}:
            raise BundleError(f"domain.extent must have the keys x, y, z, got {sorted(extent)}")
        return cls(
            d["scans"],
            _triple(d["voxel_size"], "domain.voxel_size", positive=True),
            tuple(ValueStats.from_json(k, v, f"domain.values.{k}") for k, v in values.items()),
            tuple(ValueStats.from_json(k, extent[k], f"domain.extent.{k}") for k in ("x", "y", "z")),
            ValueStats.from_json("points_per_voxel", d["points_per_voxel"], "domain.points_per_voxel"),
        )

    def to_json(self) -> dict:
        """The ``domain`` object of ``model.json``."""
        return {
            "scans": self.scans,
            "voxel_size": list(self.voxel_size),
            "values": {v.name: v.to_json() for v in self.values},
            "extent": {e.name: e.to_json() for e in self.extent},
            "points_per_voxel": self.points_per_voxel.to_json(),
        }


__all__ = [
    "BUNDLE_FORMAT",
    "GEOMETRIC_FEATURES",
    "INTERPOLATIONS",
    "NEIGHBOURHOOD_NAMES",
    "TASKS",
    "DEFAULT_IGNORE",
    "BundleError",
    "ClassInfo",
    "Domain",
    "FeatureSpec",
    "Outputs",
    "Preprocessing",
    "Quantization",
    "ValueStats",
]
