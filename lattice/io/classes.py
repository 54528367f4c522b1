"""ASPRS LAS classification codes and their standard names, in one place.

The names of LAS 1.4 R15 (Table 17) for codes 0-18; where LAS 1.0-1.3 (point formats 0-5)
named a code differently, both names are given (8: model key-point, 12: overlap points).
Codes 19-63 are reserved for ASPRS, 64-255 are user definable (in formats 0-5 the field
has 5 bits, 0-31). ``info``, ``model-run`` and ``render`` read this table.
"""

from __future__ import annotations

import math
import numbers

ASPRS_CLASSES: dict[int, str] = {
    0: "never classified",
    1: "unclassified",
    2: "ground",
    3: "low vegetation",
    4: "medium vegetation",
    5: "high vegetation",
    6: "building",
    7: "low point (noise)",
    8: "reserved / model key-point",
    9: "water",
    10: "rail",
    11: "road surface",
    12: "reserved / overlap",
    13: "wire guard",
    14: "wire conductor",
    15: "transmission tower",
    16: "wire connector",
    17: "bridge deck",
    18: "high noise",
}


def asprs_class_name(code: object) -> str | None:
    """The ASPRS name of a classification code: the table's name, ``"reserved"`` (19-63),
    ``"user definable"`` (64-255), or None for anything else (negative, fractional, > 255).

    >>> asprs_class_name(2)
    'ground'
    >>> asprs_class_name(65.0)
    'user definable'
    """
    if isinstance(code, bool) or not isinstance(code, numbers.Real) or not math.isfinite(code):
        return None
    if code != int(code):
        return None
    c = int(code)
    if c in ASPRS_CLASSES:
        return ASPRS_CLASSES[c]
    if 19 <= c <= 63:
        return "reserved"
    if 64 <= c <= 255:
        return "user definable"
    return None


__all__ = ["ASPRS_CLASSES", "asprs_class_name"]
