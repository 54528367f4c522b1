"""Slow, obviously-correct oracles for occupancy: parents one level up with an 8-bit mask of
their children, and back. Dicts and loops over Python tuples, written from the rules."""

from __future__ import annotations

from .coords import Coord, tuples


def child_of(c: Coord) -> int:
    """Child id of a voxel in its parent: ``(x & 1) + 2 (y & 1) + 4 (z & 1)``."""
    _, x, y, z = c
    return (x & 1) + 2 * (y & 1) + 4 * (z & 1)


def parent_of(c: Coord) -> Coord:
    b, x, y, z = c
    return (b, x // 2, y // 2, z // 2)  # Python // floors


def child_coord(parent: Coord, k: int) -> Coord:
    b, x, y, z = parent
    return (b, 2 * x + (k & 1), 2 * y + ((k >> 1) & 1), 2 * z + ((k >> 2) & 1))


def occupancy_downsample(coords) -> tuple[list[Coord], list[int]]:
    """Parents in order of first occurrence, each with the OR of its children's bits."""
    masks: dict[Coord, int] = {}
    for c in tuples(coords):
        p = parent_of(c)
        masks[p] = masks.get(p, 0) | (1 << child_of(c))
    return list(masks), list(masks.values())


def occupancy_expand(parents, masks) -> tuple[list[Coord], list[int], list[int]]:
    """(children, parent row, child id): parent by parent, child ids ascending."""
    out, rows, ids = [], [], []
    for i, (p, mask) in enumerate(zip(tuples(parents), masks, strict=True)):
        for k in range(8):
            if (int(mask) >> k) & 1:
                out.append(child_coord(p, k))
                rows.append(i)
                ids.append(k)
    return out, rows, ids


__all__ = ["child_coord", "child_of", "occupancy_downsample", "occupancy_expand", "parent_of"]
