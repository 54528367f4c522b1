"""Coordinate reference systems from LAS records, parsed without pyproj.

Two kinds of record name a LAS file's CRS (user id ``LASF_Projection``):

- the GeoTIFF keys: ``GeoKeyDirectoryTag`` (record 34735, uint16 keys), with
  ``GeoDoubleParamsTag`` (34736, float64 values) and ``GeoAsciiParamsTag`` (34737, text);
- an OGC WKT string (record 2112), WKT1 (``PROJCS[...]``) or WKT2 (``PROJCRS[...]``).

``parse_geokeys`` and ``parse_wkt`` read one kind and raise ``CRSError`` (one line) on
malformed input; ``crs_from_records`` reads a file's records, prefers the WKT when both
parse, and never raises: a record that cannot be parsed gives an error string instead,
so a bad CRS record never makes a file unreadable.

Only what the records state is reported: an EPSG code comes from ProjectedCSTypeGeoKey
(3072) or GeographicTypeGeoKey (2048, when GTModelTypeGeoKey 1024 says geographic or no
projected key is given), or from the last ``AUTHORITY["EPSG", ...]`` / ``ID["EPSG", ...]``
at the WKT's root; 32767 ("user-defined") and 0 are no code. No database lookup is made.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

PROJECTION_USER_ID = "LASF_Projection"
GEOKEY_DIRECTORY, GEOKEY_DOUBLES, GEOKEY_ASCII, WKT_RECORD = 34735, 34736, 34737, 2112

_USER_DEFINED = 32767
_UNITS = {
    9001: "metre",
    9002: "foot",
    9003: "US survey foot",
    9005: "Clarke's foot",
    9030: "nautical mile",
    9036: "kilometre",
    9101: "radian",
    9102: "degree",
    9105: "grad",
    9122: "degree",
}
_CRS_ROOTS = frozenset(
    {
        "PROJCS", "GEOGCS", "GEOCCS", "COMPD_CS", "VERT_CS", "LOCAL_CS", "PROJCRS", "PROJECTEDCRS",
        "GEOGCRS", "GEOGRAPHICCRS", "GEODCRS", "GEODETICCRS", "COMPOUNDCRS", "VERTCRS",
        "VERTICALCRS", "ENGCRS", "ENGINEERINGCRS", "BOUNDCRS",
    }
)  # fmt: skip
_GEOG_NODES = frozenset({"GEOGCS", "BASEGEOGCRS", "BASEGEODCRS", "GEOGCRS", "GEODCRS"})
_VERT_NODES = frozenset({"VERT_CS", "VERTCRS", "VERTICALCRS"})
_UNIT_NODES = frozenset({"UNIT", "LENGTHUNIT", "ANGLEUNIT"})
_ID_NODES = frozenset({"AUTHORITY", "ID"})


class CRSError(ValueError):
    """A CRS record could not be parsed (one line, naming the record and the values)."""


@dataclass(frozen=True)
class CRS:
    """A coordinate reference system as a LAS file's records state it.

    ``name``: the CRS name (WKT root name or GeoTIFF citation), or None when not stated.
    ``epsg``: the EPSG code of the CRS itself, or None. ``wkt``: the WKT text (None for
    GeoTIFF keys). ``source``: ``"wkt"`` or ``"geotiff"``, the record it comes from.
    ``geographic_epsg`` / ``vertical_epsg``: codes of the base geographic CRS and of a
    vertical CRS when stated; ``units``: the horizontal unit's name (``"metre"``,
    ``"US survey foot"``, ...) when stated.
    """

    name: str | None
    epsg: int | None
    wkt: str | None
    source: str
    geographic_epsg: int | None = None
    vertical_epsg: int | None = None
    units: str | None = None

    def __post_init__(self) -> None:
        if self.source not in ("wkt", "geotiff"):
            raise ValueError(f"[CRS] source must be 'wkt' or 'geotiff', got {self.source!r}")

    def to_json(self) -> dict:
        """A JSON-ready dict (``from_json`` reads it back)."""
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> CRS:
        """The inverse of ``to_json``; unknown keys are ignored."""
        fields = ("name", "epsg", "wkt", "geographic_epsg", "vertical_epsg", "units")
        return cls(source=str(d["source"]), **{k: d.get(k) for k in fields})


# ---- GeoTIFF keys ----------------------------------------------------------------------


def _code(value: Any) -> int | None:
    """An EPSG code, or None for 0 (undefined), 32767 (user-defined) and non-integers."""
    return value if isinstance(value, int) and 0 < value < _USER_DEFINED else None


def _citation(text: Any) -> str | None:
    """A GeoTIFF citation's name: the first ``|``-separated part, ESRI ``PCS Name = `` prefixes removed."""
    if not isinstance(text, str):
        return None
    if text.startswith("ESRI PE String = "):
        try:
            return parse_wkt(text[len("ESRI PE String = ") :]).name
        except CRSError:
            return None
    for part in text.split("|"):
        part = re.sub(r"^\s*(PCS|GCS|Projection) Name = ", "", part).strip(" \x00")
        if part and part.lower() != "unknown":
            return part
    return None


def _geokey_values(directory: bytes) -> tuple[list[tuple[int, int, int, int]], int]:
    if len(directory) < 8 or len(directory) % 2:
        raise CRSError(
            f"GeoKeyDirectory has {len(directory)} bytes; it needs a header of 8 and whole uint16s"
        )
    shorts = struct.unpack(f"<{len(directory) // 2}H", directory)
    n = shorts[3]
    room = (len(shorts) - 4) // 4
    if n > room:
        raise CRSError(f"GeoKeyDirectory declares {n} keys but its {len(directory)} bytes hold {room}")
    return [tuple(shorts[4 + 4 * i : 8 + 4 * i]) for i in range(n)], shorts[0]


def _key_value(key: tuple[int, int, int, int], shorts: bytes, doubles: bytes | None, ascii: bytes | None):
    """The value of one GeoKey: an int, a float (or tuple of floats) or a string."""
    key_id, location, count, offset = key
    if location == 0:
        return offset
    if location == GEOKEY_ASCII:
        if ascii is None:
            raise CRSError(f"GeoKey {key_id} points into GeoAsciiParams, but the file has no such record")
        if offset + count > len(ascii):
            raise CRSError(
                f"GeoKey {key_id} points at ASCII bytes [{offset}, {offset + count}) "
                f"but GeoAsciiParams has {len(ascii)}"
            )
        return ascii[offset : offset + count].decode("latin-1").rstrip("|\x00")
    if location == GEOKEY_DOUBLES:
        if doubles is None:
            raise CRSError(f"GeoKey {key_id} points into GeoDoubleParams, but the file has no such record")
        if 8 * (offset + count) > len(doubles):
            raise CRSError(
                f"GeoKey {key_id} points at doubles [{offset}, {offset + count}) "
                f"but GeoDoubleParams has {len(doubles) // 8}"
            )
        values = struct.unpack_from(f"<{count}d", doubles, 8 * offset)
        return values[0] if count == 1 else values
    if location == GEOKEY_DIRECTORY:
        if 2 * (offset + count) > len(shorts):
            raise CRSError(
                f"GeoKey {key_id} points past the end of the GeoKeyDirectory ({len(shorts)} bytes)"
            )
        values = struct.unpack_from(f"<{count}H", shorts, 2 * offset)
        return values[0] if count == 1 else values
    raise CRSError(f"GeoKey {key_id} has an unknown TIFFTagLocation {location}")


_USED_KEYS = (1024, 1026, 2048, 2049, 2054, 3072, 3073, 3076, 4096)


def parse_geokeys(directory: bytes, doubles: bytes | None = None, ascii: bytes | None = None) -> CRS:
    """The CRS named by a GeoKeyDirectory record (with its double and ASCII parameter records).

    Raises ``CRSError`` for a truncated directory or a key that points outside its records.
    """
    keys, _ = _geokey_values(bytes(directory))
    if not keys:
        raise CRSError("GeoKeyDirectory holds no keys")
    values = {}
    for key in keys:
        if key[0] in _USED_KEYS and key[0] not in values:
            values[key[0]] = _key_value(key, bytes(directory), doubles, ascii)
    model = values.get(1024)
    projected, geographic = _code(values.get(3072)), _code(values.get(2048))
    is_geographic = model == 2 or (model is None and 3072 not in values and 2048 in values)
    epsg = geographic if is_geographic else projected
    if is_geographic:
        name = _citation(values.get(2049)) or _citation(values.get(1026))
        unit = values.get(2054)
    else:
        name = _citation(values.get(3073)) or _citation(values.get(1026))
        unit = values.get(3076)
    return CRS(
        name=name,
        epsg=epsg,
        wkt=None,
        source="geotiff",
        geographic_epsg=geographic,
        vertical_epsg=_code(values.get(4096)),
        units=_UNITS.get(unit, f"EPSG unit {unit}") if isinstance(unit, int) and unit else None,
    )


# ---- WKT -------------------------------------------------------------------------------

_TOKEN = re.compile(r'\s*(?:("(?:[^"]|"")*")|([\[\]\(\),])|([^\s\[\]\(\),"]+))')


@dataclass(frozen=True)
class _Node:
    keyword: str
    args: tuple  # str (quoted text), float, str (bare words) or _Node


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            if text[pos:].strip() == "":
                break
            raise CRSError(f"WKT: unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        if m.group(1) is not None:
            out.append(("str", m.group(1)[1:-1].replace('""', '"')))
        elif m.group(2) is not None:
            out.append(("punct", m.group(2)))
        elif m.group(3) is not None:
            out.append(("word", m.group(3)))
    return out


def _parse_node(tokens: list[tuple[str, str]], i: int) -> tuple[_Node, int]:
    kind, keyword = tokens[i]
    if kind != "word" or i + 1 >= len(tokens) or tokens[i + 1][1] not in "[(":
        raise CRSError(f"WKT: expected KEYWORD[ at token {i}, got {keyword!r}")
    close = "]" if tokens[i + 1][1] == "[" else ")"
    i += 2
    args: list = []
    while True:
        if i >= len(tokens):
            raise CRSError(f"WKT: unbalanced brackets, {keyword}[ is never closed")
        kind, value = tokens[i]
        if kind == "punct" and value in "])":
            if value != close:
                raise CRSError(
                    f"WKT: {keyword} opened with {'[' if close == ']' else '('} but closed with {value}"
                )
            return _Node(keyword.upper(), tuple(args)), i + 1
        if kind == "punct" and value == ",":
            i += 1
        elif kind == "word" and i + 1 < len(tokens) and tokens[i + 1][1] in "[(":
            node, i = _parse_node(tokens, i)
            args.append(node)
        else:
            args.append(value)
            i += 1


def _children(node: _Node, keywords: frozenset[str]) -> list[_Node]:
    return [a for a in node.args if isinstance(a, _Node) and a.keyword in keywords]


def _epsg_of(node: _Node) -> int | None:
    """The code of the last ``AUTHORITY["EPSG", ...]`` / ``ID["EPSG", ...]`` directly in ``node``."""
    for ident in reversed(_children(node, _ID_NODES)):
        if len(ident.args) >= 2 and str(ident.args[0]).upper() == "EPSG":
            try:
                return _code(int(float(str(ident.args[1]))))
            except ValueError:
                return None
    return None


def _name_of(node: _Node) -> str | None:
    return node.args[0] if node.args and isinstance(node.args[0], str) and node.args[0] else None


def _units_of(node: _Node) -> str | None:
    units = _children(node, _UNIT_NODES)
    if not units:
        axes = [u for a in _children(node, frozenset({"AXIS"})) for u in _children(a, _UNIT_NODES)]
        return _name_of(axes[0]) if axes else None
    return _name_of(units[-1])


def parse_wkt(text: str | bytes) -> CRS:
    """The CRS of an OGC WKT string (WKT1 or WKT2; trailing NULs ignored).

    Raises ``CRSError`` when the text is not bracket-balanced WKT or its root is not a CRS.
    """
    if isinstance(text, bytes | bytearray | memoryview):
        text = bytes(text).decode("utf-8", errors="replace")
    text = text.strip().rstrip("\x00").strip()
    shown = text if len(text) <= 40 else text[:37] + "..."
    tokens = _tokens(text)
    if not tokens or tokens[0][0] != "word" or len(tokens) < 2 or tokens[1][1] not in "[(":
        raise CRSError(f"not WKT text: {shown!r}")
    root, end = _parse_node(tokens, 0)
    if end != len(tokens):
        raise CRSError(f"WKT: text after the root {root.keyword}[...] at token {end}")
    if root.keyword not in _CRS_ROOTS:
        raise CRSError(f"WKT root is {root.keyword}, not a coordinate reference system")
    crs_node = root
    if root.keyword == "BOUNDCRS":
        inner = [c for s in _children(root, frozenset({"SOURCECRS"})) for c in _children(s, _CRS_ROOTS)]
        if inner:
            crs_node = inner[0]
    compound = crs_node.keyword in ("COMPD_CS", "COMPOUNDCRS")
    parts = _children(crs_node, _CRS_ROOTS) if compound else []  # a compound CRS's components
    horizontal = parts[0] if parts else crs_node
    geog = _children(horizontal, _GEOG_NODES) or ([horizontal] if horizontal.keyword in _GEOG_NODES else [])
    vertical = [p for p in parts if p.keyword in _VERT_NODES]
    return CRS(
        name=_name_of(crs_node),
        epsg=_epsg_of(crs_node),
        wkt=text,
        source="wkt",
        geographic_epsg=_epsg_of(geog[0]) if geog else None,
        vertical_epsg=_epsg_of(vertical[0]) if vertical else None,
        units=_units_of(horizontal),
    )


# ---- a file's records ------------------------------------------------------------------


def crs_from_records(records: Iterable[tuple[str, int, bytes]]) -> tuple[CRS | None, str | None]:
    """The CRS of a file's VLRs/EVLRs, given as ``(user_id, record_id, data)``; never raises.

    The WKT record is preferred when it parses, else the GeoTIFF keys. Returns
    ``(crs, error)``: ``error`` is None, or one line naming every CRS record that could not
    be parsed (``crs`` is then None unless another record gave it).
    """
    found: dict[int, bytes] = {}
    for user_id, record_id, data in records:
        if user_id == PROJECTION_USER_ID and record_id not in found:
            found[record_id] = bytes(data)
    errors: list[str] = []
    results: list[CRS] = []
    if WKT_RECORD in found:
        try:
            results.append(parse_wkt(found[WKT_RECORD]))
        except CRSError as e:
            errors.append(f"WKT record ({PROJECTION_USER_ID} {WKT_RECORD}): {e}")
    if GEOKEY_DIRECTORY in found:
        try:
            results.append(
                parse_geokeys(found[GEOKEY_DIRECTORY], found.get(GEOKEY_DOUBLES), found.get(GEOKEY_ASCII))
            )
        except (CRSError, struct.error) as e:
            errors.append(f"GeoKeyDirectory ({PROJECTION_USER_ID} {GEOKEY_DIRECTORY}): {e}")
    return (results[0] if results else None), ("; ".join(errors) or None)


__all__ = ["CRS", "CRSError", "crs_from_records", "parse_geokeys", "parse_wkt"]
