"""Layout and drawing of a picture: a title band, one panel per view, and a side column
with the legend (classes) or the colour bar (scalars), never over the data.

Every element's box is computed before anything is drawn and returned with the picture
(``Layout``), so tests can check that nothing overlaps the data areas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lattice.render.colouring import Colouring

INK = (20, 20, 20)
GREY = (110, 110, 110)


@dataclass(frozen=True)
class Box:
    """A pixel rectangle ``[x0, x1) x [y0, y1)``."""

    x0: int
    y0: int
    x1: int
    y1: int

    @property
    def width(self) -> int:
        return self.x1 - self.x0

    @property
    def height(self) -> int:
        return self.y1 - self.y0

    def intersects(self, other: Box) -> bool:
        """True when the two rectangles share a pixel."""
        return self.x0 < other.x1 and other.x0 < self.x1 and self.y0 < other.y1 and other.y0 < self.y1


@dataclass(frozen=True)
class Layout:
    """Where everything goes: ``data`` (view -> the area points are drawn in), ``labels``
    (view -> its caption), ``scalebars`` (orthographic views), ``title`` and ``side``
    (the legend or colour bar column; None for file colours)."""

    title: Box
    data: dict[str, Box]
    labels: dict[str, Box]
    scalebars: dict[str, Box]
    side: Box | None
    font_size: int


def font(size: int):
    """Pillow's bundled scalable font at ``size`` pixels."""
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def layout(width: int, height: int, views: tuple[str, ...], side: bool, title_lines: int = 2) -> Layout:
    """The boxes of a ``width x height`` picture with ``views`` side by side."""
    fs = int(min(max(height / 48, 10), 22))
    line = fs + 4
    title = Box(0, 0, width, 8 + title_lines * line)
    side_w = int(min(max(width * 0.2, 150), 340)) if side else 0
    side_box = Box(width - side_w, title.y1, width, height) if side else None
    panel_w = (width - side_w) // len(views)
    data, labels, bars = {}, {}, {}
    for k, view in enumerate(views):
        x0, x1 = k * panel_w, (k + 1) * panel_w
        labels[view] = Box(x0 + 6, title.y1, x1 - 6, title.y1 + line)
        bottom = height - (line + 10 if view != "perspective" else 4)
        data[view] = Box(x0 + 6, labels[view].y1 + 2, x1 - 6, max(bottom, labels[view].y1 + 10))
        if view != "perspective":
            bars[view] = Box(x0 + 6, data[view].y1 + 2, x1 - 6, height - 2)
    return Layout(title, data, labels, bars, side_box, fs)


def nice_length(max_length: float) -> float:
    """The largest 1, 2 or 5 x 10^k not above ``max_length``."""
    if not (max_length > 0 and math.isfinite(max_length)):
        return 0.0
    k = math.floor(math.log10(max_length))
    for m in (5, 2, 1):
        if m * 10**k <= max_length:
            return float(m * 10**k)
    return float(10 ** (k - 1) * 5)


def fmt(v: float) -> str:
    """A number in at most 4 significant digits, without a trailing ``.0``."""
    return f"{v:.4g}" if abs(v) < 1e5 else f"{v:,.0f}"


def _fit(draw, text: str, f, width: int) -> str:
    if draw.textlength(text, font=f) <= width:
        return text
    while text and draw.textlength(text + "…", font=f) > width:
        text = text[:-1]
    return text + "…"


def draw_title(draw, box: Box, lines: list[str], fs: int) -> None:
    f = font(fs)
    for i, text in enumerate(lines):
        draw.text(
            (box.x0 + 8, box.y0 + 4 + i * (fs + 4)), _fit(draw, text, f, box.width - 16), fill=INK, font=f
        )


def draw_scalebar(draw, box: Box, px_per_unit: float, unit: str, fs: int) -> Box:
    """A bar of a round length in world units at the bottom left of ``box``; returns its extent."""
    length = nice_length(box.width * 0.3 / px_per_unit)
    if length <= 0:
        return Box(box.x0, box.y0, box.x0, box.y0)
    n = max(1, round(length * px_per_unit))
    x0, y = box.x0 + 4, box.y0 + fs // 2 + 2
    draw.rectangle([x0, y, x0 + n, y + 3], fill=INK)
    draw.rectangle([x0, y - 3, x0 + 1, y + 6], fill=INK)
    draw.rectangle([x0 + n - 1, y - 3, x0 + n, y + 6], fill=INK)
    unit = unit or ("unit" if length == 1 else "units")
    label = f"{fmt(length)} {unit}"
    f = font(fs)
    draw.text((x0 + n + 8, y - fs // 2), label, fill=INK, font=f)
    return Box(x0, y - 3, int(x0 + n + 8 + draw.textlength(label, font=f)), y + 7)


def draw_legend(draw, box: Box, c: Colouring, fs: int) -> Box:
    """Class swatches, names and counts, top-down in ``box``; classes that do not fit are summed
    in a last line. Returns the box actually used."""
    f, fb = font(fs), font(fs)
    row = fs + 7
    x, y = box.x0 + 10, box.y0 + 6
    head = f"{c.field} ({c.source})" if c.source else c.field
    draw.text((x, y), _fit(draw, head, fb, box.width - 16), fill=INK, font=fb)
    y += row + 2
    entries = list(c.legend)
    room = max(1, (box.y1 - y - 6) // row)
    shown = entries if len(entries) <= room else sorted(entries, key=lambda e: -e.count)[: room - 1]
    shown = sorted(shown, key=lambda e: e.id)
    count_w = max(draw.textlength(f"{e.count:,}", font=f) for e in entries) if entries else 0
    for e in shown:
        draw.rectangle([x, y + 2, x + fs, y + fs + 2], fill=e.color, outline=INK)
        name_w = box.x1 - x - fs - 20 - count_w
        draw.text((x + fs + 6, y), _fit(draw, e.name, f, int(name_w)), fill=INK, font=f)
        text = f"{e.count:,}"
        draw.text((box.x1 - 8 - draw.textlength(text, font=f), y), text, fill=GREY, font=f)
        y += row
    if len(shown) < len(entries):
        rest = [e for e in entries if e not in shown]
        more = f"+{len(rest)} more classes, {sum(e.count for e in rest):,} points"
        draw.text((x, y), _fit(draw, more, f, box.width - 16), fill=GREY, font=f)
        y += row
    return Box(box.x0, box.y0, box.x1, min(y + 4, box.y1))


def draw_colorbar(draw, box: Box, c: Colouring, fs: int) -> Box:
    """A vertical viridis bar from ``c.lo`` (bottom) to ``c.hi`` (top) with five ticks."""
    import numpy as np

    from lattice.render.palettes import ramp

    f = font(fs)
    x, y = box.x0 + 10, box.y0 + 6
    draw.text((x, y), _fit(draw, c.shown, f, box.width - 16), fill=INK, font=f)
    top, bottom = y + fs + 14, int(box.y0 + min(box.height - fs * 3, max(box.height * 0.7, 60)))
    bottom = max(bottom, top + 20)
    colours = ramp(np.linspace(1.0, 0.0, bottom - top))
    for i, rgb in enumerate(colours):
        draw.line([x, top + i, x + 18, top + i], fill=tuple(int(v) for v in rgb))
    draw.rectangle([x, top, x + 18, bottom], outline=INK)
    for t in np.linspace(0.0, 1.0, 5):
        yy = bottom - t * (bottom - top)
        draw.line([x + 18, yy, x + 23, yy], fill=INK)
        draw.text((x + 27, yy - fs / 2 - 1), fmt(c.lo + t * (c.hi - c.lo)), fill=INK, font=f)
    note = "2nd..98th percentile"
    draw.text((x, bottom + 8), _fit(draw, note, f, box.width - 16), fill=GREY, font=f)
    return Box(box.x0, box.y0, box.x1, bottom + 8 + fs + 4)
