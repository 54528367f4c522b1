"""LZF (liblzf) compression in vectorised NumPy, as used by PCD ``binary_compressed``.

An LZF stream is a sequence of tokens. A control byte ``c < 32`` starts a literal run of
``c + 1`` bytes; otherwise ``c >> 5`` is a length code ``L`` (7 means one more byte adds
to it) and the token copies ``L + 2`` bytes from ``distance = ((c & 31) << 8) + next + 1``
bytes back in the output (the copy may overlap itself).

Neither direction loops over bytes in Python. Token boundaries are a chain of "next
token" pointers, and back-references are a forest of "copied from" pointers; both are
resolved by pointer doubling (``O(n log n)`` gathers).

Decoding is bounded by its output: the caller says how many bytes the stream must give
(``out_size``), the token lengths are summed before anything of that size is allocated,
and the output is expanded ``BLOCK`` bytes at a time (a back-reference reaches at most
``MAX_DISTANCE`` bytes back), so the temporaries are a few times ``BLOCK``, not ~48 bytes
per output byte. A 3-byte token gives at most 264 bytes: ``out_size`` above
``MAX_RATIO`` times the input is refused at once.
"""

from __future__ import annotations

import numpy as np

MAX_DISTANCE = 8192
MAX_MATCH = 264
MAX_LITERAL = 32
MAX_RATIO = 88  # output bytes per input byte at most: a 3-byte token copies 264 bytes
BLOCK = 1 << 18  # output bytes expanded at once


class LZFError(ValueError):
    """The LZF stream is malformed (truncated, or a back-reference before the start)."""


def _chain(step: np.ndarray, end: int) -> np.ndarray:
    """Positions 0, step[0], ... reached from 0 while ``< end``: a pointer chain, by doubling.

    ``step[i]`` is the next position after ``i`` (always ``> i``); values ``>= end`` end it.
    """
    jump = np.concatenate([np.minimum(step, end + 1), [end, end + 1]])
    chain = np.zeros(1, dtype=jump.dtype)
    while True:
        new = jump[chain]
        keep = new[new < end]
        chain = np.concatenate([chain, keep])
        if keep.size < new.size:
            return chain
        jump = jump[jump]


def _resolve(parent: np.ndarray) -> np.ndarray:
    """Follow ``parent`` pointers (``parent[i] <= i``) to their roots, by doubling."""
    while True:
        up = parent[parent]
        if np.array_equal(up, parent):
            return parent
        parent = up


def decompress(data: bytes | bytearray | memoryview | np.ndarray, out_size: int) -> np.ndarray:
    """Decompress an LZF stream into a uint8 array of exactly ``out_size`` bytes."""
    buf = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
    m = buf.size
    if m == 0:
        if out_size:
            raise LZFError(f"empty LZF stream, expected {out_size} bytes of output")
        return np.zeros(0, np.uint8)
    if out_size < 0 or out_size > MAX_RATIO * m:
        raise LZFError(
            f"{m} bytes of LZF cannot decode to {out_size} bytes (at most {MAX_RATIO} bytes per byte)"
        )
    index = np.int32 if m < 2**31 - 2 * MAX_MATCH else np.int64  # positions in the input
    c = buf.astype(index)
    step = np.arange(m, dtype=index) + np.where(c < 32, c + 2, np.where((c >> 5) == 7, 3, 2)).astype(index)
    starts = _chain(step, m)
    if step[starts[-1]] != m:
        raise LZFError("LZF stream is truncated: the last token runs past the end of the data")
    del step, c
    cp = np.concatenate([buf, np.zeros(2, np.uint8)]).astype(np.int64)
    ctrl = cp[starts]
    lit = ctrl < 32
    code = ctrl >> 5
    long_ref = code == 7
    length = np.where(lit, ctrl + 1, code + 2 + np.where(long_ref, cp[starts + 1], 0))
    low = np.where(long_ref, cp[starts + 2], cp[starts + 1])
    dist = np.where(lit, 0, ((ctrl & 31) << 8) + low + 1)
    del cp, ctrl, code, long_ref, low
    total = int(length.sum())
    if total != out_size:  # the output cap: nothing of the declared size exists yet
        raise LZFError(f"LZF stream decodes to {total} bytes, expected {out_size}")
    return _expand(buf, starts.astype(np.int64), lit, length, dist, total)


def _expand(buf, starts, lit, length, dist, total) -> np.ndarray:
    """The output, ``BLOCK`` bytes (whole tokens) at a time: each block's back-references
    resolve within the block and the ``MAX_DISTANCE`` bytes decoded before it."""
    out = np.empty(total, np.uint8)
    ends = np.cumsum(length)
    t0 = 0
    while t0 < starts.size:
        a = int(ends[t0] - length[t0])
        t1 = max(int(np.searchsorted(ends, a + BLOCK, side="right")), t0 + 1)
        _expand_block(buf, out, a, int(ends[t1 - 1]), starts[t0:t1], lit[t0:t1], length[t0:t1], dist[t0:t1])
        t0 = t1
    return out


def _expand_block(buf, out, a, b, starts, lit, length, dist) -> None:
    base = max(a - MAX_DISTANCE, 0)  # bytes before ``a`` a back-reference can reach
    token = np.repeat(np.arange(starts.size), length)
    first = np.cumsum(length) - length + a
    pos = np.arange(a, b)
    within = pos - first[token]
    is_lit = lit[token]
    # a copy that overlaps itself (distance d < length) repeats its first d bytes: point
    # every byte at the source before the token starts, so chains hop whole tokens
    d = np.maximum(dist, 1)[token]
    parent = np.where(is_lit, pos, first[token] - d + within % d)
    if parent.size and parent.min() < 0:
        raise LZFError("LZF stream is corrupt: a back-reference points before the start of the output")
    values = np.empty(b - base, np.uint8)
    values[: a - base] = out[base:a]
    block = values[a - base :]
    block[is_lit] = buf[(starts[token] + 1 + within)[is_lit]]
    local = np.concatenate([np.arange(a - base), parent - base])  # earlier bytes are roots
    out[a:b] = values[_resolve(local)[a - base :]]


def compress(data: bytes | bytearray | memoryview | np.ndarray) -> bytes:
    """Compress bytes into an LZF stream that ``decompress`` (and liblzf) can read.

    Greedy parse: at each position take the match with the most recent earlier
    occurrence of the same three bytes (within 8 KiB), else emit a literal.
    """
    d = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data.view(np.uint8)
    n = d.size
    if n == 0:
        return b""
    length, dist = _matches(d)
    starts = _greedy_parse(length, n)
    return _emit(d, starts, length[starts], dist[starts])


def _greedy_parse(length: np.ndarray, n: int) -> np.ndarray:
    """Token start positions of the greedy parse: a match wherever one starts uncovered."""
    cand = np.flatnonzero(length)
    if cand.size == 0:
        return np.arange(n)
    # the next match taken after candidate i is the first candidate at or past its end
    after = np.searchsorted(cand, cand + length[cand])
    taken = cand[_chain(after, cand.size)]
    delta = np.zeros(n + 1, np.int8)
    delta[taken] = 1
    delta[taken + length[taken]] -= 1
    is_start = np.cumsum(delta[:n], dtype=np.int8) == 0  # not inside a taken match
    is_start[taken] = True
    return np.flatnonzero(is_start)


def _matches(d: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per position: match length (0 = none, else 3..264) and distance to the earlier copy."""
    n = d.size
    length = np.zeros(n, np.int64)
    dist = np.zeros(n, np.int64)
    if n < 3:
        return length, dist
    w = d.astype(np.int64)
    pos = np.arange(n - 2)
    # sort (key, position) pairs at once: the previous entry with the same key is the
    # most recent earlier occurrence of these three bytes
    ordered = np.sort((w[:-2] << 55) | (w[1:-1] << 47) | (w[2:] << 39) | pos)
    same = (ordered[1:] >> 39) == (ordered[:-1] >> 39)
    mask = (1 << 39) - 1
    prev = np.full(n - 2, -1, np.int64)
    prev[ordered[1:][same] & mask] = ordered[:-1][same] & mask
    ok = (prev >= 0) & (pos - prev <= MAX_DISTANCE)
    dist[:-2] = np.where(ok, pos - prev, 0)
    # A run of consecutive positions with one distance D is one long match: each of its
    # matches goes at least to the run's last position + 2, and then as far as the
    # bytes D back keep agreeing.
    brk = np.ones(n - 2, bool)
    brk[:-1] = ~(ok[:-1] & ok[1:] & (dist[:-3] == dist[1:-2]))
    last = np.flatnonzero(brk)
    seg = np.cumsum(brk) - brk
    good = ok[last]
    extra = np.zeros(last.size, np.int64)
    extra[good] = _extend(d, last[good], dist[last[good]], n)
    end = (last + 3 + extra)[seg]
    length[:-2] = np.where(ok, np.minimum(end - pos, MAX_MATCH), 0)
    return length, dist


def _extend(d: np.ndarray, end: np.ndarray, off: np.ndarray, n: int) -> np.ndarray:
    """How many bytes past ``end + 2`` still equal the bytes ``off`` back (capped at MAX_MATCH)."""
    extra = np.zeros(end.size, np.int64)
    active = np.arange(end.size)
    for k in range(MAX_MATCH):
        q = end[active] + 3 + k
        live = q < n
        live[live] = d[q[live]] == d[q[live] - off[active[live]]]
        active = active[live]
        if active.size == 0:
            break
        extra[active] += 1
    return extra


def _emit(d: np.ndarray, starts: np.ndarray, length: np.ndarray, dist: np.ndarray) -> bytes:
    is_match = length >= 3
    # literal chunks: runs of consecutive literal tokens, cut every 32 bytes
    lit_idx = np.flatnonzero(~is_match)
    new_run = np.ones(lit_idx.size, bool)
    new_run[1:] = lit_idx[1:] != lit_idx[:-1] + 1
    run_first = np.flatnonzero(new_run)
    run_end = np.append(run_first[1:], lit_idx.size)
    first_of = run_first[np.cumsum(new_run) - 1]
    chunk_head = ((np.arange(lit_idx.size) - first_of) & (MAX_LITERAL - 1)) == 0
    heads = np.flatnonzero(chunk_head)
    chunk_len = np.minimum(run_end[np.cumsum(new_run)[heads] - 1] - heads, MAX_LITERAL)

    code = length - 2
    size = np.where(is_match, np.where(code >= 7, 3, 2), 1)
    size[lit_idx] += chunk_head
    at = np.cumsum(size) - size
    out = np.zeros(int(size.sum()), np.uint8)

    lo = at[lit_idx]
    out[lo[heads]] = chunk_len - 1
    out[lo + chunk_head] = d[starts[lit_idx]]

    mi = np.flatnonzero(is_match)
    o, c, off = at[mi], code[mi], dist[mi] - 1
    big = c >= 7
    out[o] = (np.minimum(c, 7) << 5) | (off >> 8)
    out[o[big] + 1] = c[big] - 7
    out[o + 1 + big] = off & 0xFF
    return out.tobytes()
