"""Lazy row counts: builders that return an upper-bound buffer instead of reading a count.

A GPU builder that makes a new coordinate set (the deduplicated output of a strided
convolution or pooling) knows its rows only as a count on the GPU. By default it reads
that count back (one host read: MLX evaluates what the count depends on — that set's
coordinate kernels, not the feature work queued before it — and waits) and returns
exactly the live rows. For the sets of a manager made with
``CoordinateManager(lazy_rows=True)`` it returns a buffer of
``capacity`` rows (an upper bound: the input's rows) and the count as a lazy int32
``mx.array``, the tensor's ``active_rows``; rows past the count hold batch index -1
and are never found by a lookup, and every op ignores them. The GPU routes
(convolution, local pooling, upsampling, the feature ops and modules, joins of tensors
on one support) then run over the capacity rows without reading the count, so a
network of them queues as one graph; anything that needs the count on the host
(``active_count``, a CPU route, a join that builds a table, export) reads it once and
keeps it.

The mode is an argument of the manager, not of the process: the tensors that share a
manager share it (``SparseTensor(..., coord_manager=CoordinateManager(lazy_rows=True))``),
and every set derived from them is made the same way.

``host_reads()`` counts the reads lattice's GPU builders and relations make (set sizes,
validity flags, edge counts, lazy counts) — what the tests of this mode assert on. Reads
of a caller's own arguments while checking them (a given ``active_rows``, mask or row
list) and the CPU routes' conversions are not counted. It is a process-wide statistic, as
MLX's memory counters are (``mx.get_peak_memory``): it changes nothing an op does or returns.
"""

from __future__ import annotations

import mlx.core as mx


class _Reads:
    count = 0


def host_read(a: mx.array) -> list | int | float | bool:
    """``a.tolist()`` (``a.item()`` for a scalar), counted by ``host_reads``: the reads of the
    GPU builders (``lattice.backends.cuda``), of relation edge counts and of lazy counts go
    through here."""
    _Reads.count += 1
    return a.tolist()


class HostReads:
    """The host reads made since this object was created (``host_reads()``)."""

    def __init__(self) -> None:
        self._start = _Reads.count

    @property
    def count(self) -> int:
        return _Reads.count - self._start


def host_reads() -> HostReads:
    """A counter of lattice's host reads from here on: ``reads = host_reads(); ...; reads.count``."""
    return HostReads()


class RowCount:
    """The live-row count of a set built lazily (``CoordinateManager(lazy_rows=True)``): the lazy int32 scalar and,
    once something has read it, its value (read once, through ``host_read``)."""

    __slots__ = ("array", "_value")

    def __init__(self, array: mx.array) -> None:
        self.array = array
        self._value: int | None = None

    @property
    def read(self) -> bool:
        return self._value is not None

    def value(self) -> int:
        if self._value is None:
            self._value = int(host_read(self.array))
        return self._value


__all__ = ["HostReads", "RowCount", "host_read", "host_reads"]
