"""The ranges rule of ``elastic="ranges"``: each segment's rows split among the ranks
in contiguous shares, the rest re-dealt at a resume. Pure functions of the epoch's
world-size history; nothing here reads a row.

An epoch begins with one *agenda*: positions ``0 .. n-1`` of the epoch's base
order (a stream's rows with its chunks in the order keyed by ``(seed, epoch)``;
a random-access source's rows). A *segment* is a run of ``done`` lockstep steps
at ``count`` ranks; the epoch's world-size history is its segments
``((count, done), ...)``.

1. Dealing (:func:`deal`): ``count`` ranks split the agenda of ``m`` rows as
   contiguous shards split rows: rank r takes items ``[r*m//count,
   (r+1)*m//count)`` of it (:func:`share`). A rank's part of a piece not mixed
   yet is cut into windows of ``window`` positions from the start of that part;
   a piece mixed in an earlier segment keeps its order.
2. A rank's order is its windows, each in the order of a bijection keyed by
   ``(seed, epoch, the window's first position, its length)``
   (:class:`RangesOrder`); its batches are cut from that.
3. The rest (:func:`rest`): after ``done`` steps of ``batch`` rows, a rank's
   rest is its order past ``min(done * batch, its rows)``: the rest of its
   window in progress (mixed), then its windows not begun (not mixed: a whole
   window again). The ranks' rests, in rank order, are the next segment's
   agenda (:func:`agenda_after`).

Each segment partitions its agenda among the ranks and the next agenda is what
they did not hand out, so by induction every row is handed out once, whatever
the history. Shares differ by at most one row, so the ranks' batch counts in a
segment differ by at most one. A piece is a :class:`Piece`; an agenda or a
rank's order is a list of them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from exactbatch.order.bijection import EpochBijection
from exactbatch.order.keys import check_key, checked_positions

__all__ = [
    "Piece",
    "RangesOrder",
    "agenda_after",
    "agenda_at",
    "check_segments",
    "deal",
    "first_agenda",
    "remaining",
    "rest",
    "segments_of",
    "share",
    "share_sizes",
]

Segments = Sequence[tuple[int, int]]


class Piece(NamedTuple):
    """Items ``i .. j`` of the window of base positions ``lo .. lo + size``: in the
    window's keyed order when ``mixed``, else (a run not mixed yet: ``i == 0`` and
    ``j == size``) in base order."""

    lo: int
    size: int
    i: int
    j: int
    mixed: bool

    @property
    def rows(self) -> int:
        return self.j - self.i


def segments_of(first: object) -> tuple[tuple[int, int], ...]:
    """``first`` (where a dealt epoch resumed) as segments: 0 or ``()`` is none."""
    if not first:
        return ()
    assert isinstance(first, (list, tuple))
    return tuple((int(c), int(d)) for c, d in first)


def first_agenda(n: int) -> list[Piece]:
    """An epoch's agenda at its start: every position, one run not mixed."""
    return [Piece(0, n, 0, n, False)] if n else []


def share(m: int, count: int, index: int) -> tuple[int, int]:
    """Items ``[index*m//count, (index+1)*m//count)``: rank ``index``'s of ``m``."""
    return index * m // count, (index + 1) * m // count


def share_sizes(m: int, count: int) -> list[int]:
    """Every rank's share of ``m`` items at ``count`` ranks, in rank order."""
    return [b - a for a, b in (share(m, count, r) for r in range(count))]


def deal(agenda: Sequence[Piece], count: int, index: int, window: int) -> list[Piece]:
    """Rank ``index``'s order at ``count`` ranks (module docs, rule 1): its share of
    ``agenda``, the parts of runs cut into windows of ``window`` positions."""
    m = sum(p.rows for p in agenda)
    a, z = share(m, count, index)
    window = max(1, int(window))
    out: list[Piece] = []
    at = 0
    for p in agenda:
        lo, at = at, at + p.rows
        x, y = max(a, lo), min(z, at)
        if x >= y:
            if lo >= z:
                break
            continue
        if p.mixed:
            out.append(Piece(p.lo, p.size, p.i + x - lo, p.i + y - lo, True))
            continue
        start, stop = p.lo + p.i + x - lo, p.lo + p.i + y - lo
        for s in range(start, stop, window):
            size = min(window, stop - s)
            out.append(Piece(s, size, 0, size, True))
    return out


def rest(order: Sequence[Piece], handed: int) -> list[Piece]:
    """The pieces of a rank's ``order`` past its first ``handed`` items (rule 3): the
    rest of the window in progress, then the windows not begun, not mixed again."""
    out: list[Piece] = []
    at = 0
    for p in order:
        lo, at = at, at + p.rows
        if at <= handed:
            continue
        if lo < handed:  # the window in progress: its rest keeps its order
            out.append(p._replace(i=p.i + handed - lo))
        elif p.i == 0 and p.j == p.size:  # a whole window not begun: a run again
            out.append(Piece(p.lo, p.size, 0, p.size, False))
        else:  # part of a window mixed before, not begun here
            out.append(p)
    return out


def agenda_after(
    agenda: Sequence[Piece], count: int, done: int, window: int, batch: int
) -> list[Piece]:
    """The agenda after a segment of ``done`` steps of ``batch`` rows at ``count`` ranks:
    the ranks' rests, in rank order."""
    out: list[Piece] = []
    for r in range(count):
        out += rest(deal(agenda, count, r, window), done * batch)  # (a share done: nothing)
    return out


def agenda_at(n: int, window: int, batch: int, segments: Segments) -> list[Piece]:
    """The agenda after the segments ``segments`` of an epoch of ``n`` positions."""
    agenda = first_agenda(n)
    for count, done in segments:
        agenda = agenda_after(agenda, count, done, window, batch)
    return agenda


def remaining(n: int, batch: int, segments: Segments) -> int:
    """The agenda's items after ``segments``: from the shares' sizes alone."""
    m = n
    for count, done in segments:
        m -= sum(min(done * batch, size) for size in share_sizes(m, count))
    return m


def check_segments(segments: object, n: int, batch: int, where: str) -> tuple[tuple[int, int], ...]:
    """``segments`` as a state holds them (a list of ``[count, done]``), checked: each
    count an int >= 1, each ``done`` an int no larger than the segment's longest share
    in batches; a ``TypeError``/``ValueError`` naming ``where`` otherwise."""
    if not isinstance(segments, (list, tuple)):
        raise TypeError(f"{where} must be a list of [num_shards, steps]; got {segments!r:.80}")
    out: list[tuple[int, int]] = []
    m = n
    for i, seg in enumerate(segments):
        ok = isinstance(seg, (list, tuple)) and len(seg) == 2
        ok = ok and all(isinstance(v, int) and not isinstance(v, bool) for v in seg)
        if not ok:
            raise ValueError(f"{where}[{i}] must be [num_shards, steps] (two ints); got {seg!r}")
        count, done = int(seg[0]), int(seg[1])
        sizes = share_sizes(m, count) if count >= 1 else []
        longest = -(-max(sizes, default=0) // batch)
        if count < 1 or not 0 <= done <= longest:
            raise ValueError(
                f"{where}[{i}]={seg!r}: a segment is num_shards >= 1 ranks stepping at most "
                f"{longest if count >= 1 else 0} times (its longest share of {m} rows)"
            )
        out.append((count, done))
        m -= sum(min(done * batch, size) for size in sizes)
    return tuple(out)


class RangesOrder:
    """The rows at positions ``0 .. n-1`` of ``pieces`` (an agenda, or a rank's order):
    each mixed piece's items in its window's keyed order (``mix``: without it, every
    piece in base order), then ``base`` (a stream's chunk order: base position to row;
    None: positions are rows). The bijection interface of the order package (``n``,
    ``__call__``, ``rows``); immutable but for a small cache; safe to share."""

    def __init__(
        self,
        pieces: Sequence[Piece],
        *,
        seed: int,
        epoch: int,
        mix: bool = True,
        base: Callable[[np.ndarray], np.ndarray] | None = None,
        base_ranges: Callable[[int, int], list[tuple[int, int]]] | None = None,
    ) -> None:
        check_key(seed=seed, epoch=epoch)
        self.pieces = list(pieces)
        self.seed, self.epoch, self.mix, self.base = int(seed), int(epoch), mix, base
        self.base_ranges = base_ranges  # base positions a..b as runs of rows (with base)
        sizes = np.array([p.rows for p in self.pieces], dtype=np.int64)
        self.starts = np.cumsum(sizes) - sizes  # each piece's first position
        self.n = int(sizes.sum())
        self._bijections: dict[tuple[int, int], EpochBijection] = {}

    def __repr__(self) -> str:
        return f"RangesOrder(n={self.n}, pieces={len(self.pieces)}, seed={self.seed})"

    def _bijection(self, lo: int, size: int) -> EpochBijection:
        bij = self._bijections.get((lo, size))
        if bij is None:
            bij = EpochBijection(size, seed=self.seed, epoch=self.epoch, shard=lo)
            if len(self._bijections) >= 8:  # pieces are met in order: keep a few
                self._bijections.clear()
            self._bijections[(lo, size)] = bij
        return bij

    def __call__(self, positions: np.ndarray | int | list[int]) -> np.ndarray:
        """Rows (int64, the shape of ``positions``) at ``positions``."""
        pos = checked_positions(positions, self.n)
        flat = pos.reshape(-1)
        out = np.empty_like(flat)
        which = np.searchsorted(self.starts, flat, side="right") - 1
        ks = np.unique(which).tolist()
        for k in ks:  # a call spans a few pieces: a mask each
            at = np.flatnonzero(which == k) if len(ks) > 1 else slice(None)
            p = self.pieces[k]
            items = flat[at] - self.starts[k] + p.i
            if self.mix and p.mixed:
                items = self._bijection(p.lo, p.size)(items)
            out[at] = p.lo + items
        if self.base is not None and flat.size:
            out = self.base(out)
        return out.reshape(pos.shape)

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows (int64) of positions ``start .. stop-1``."""
        check_key(start=start, stop=stop)
        return self(np.arange(start, max(start, stop), dtype=np.int64))

    def row_sets(self, start: int, stop: int) -> tuple[list[tuple[int, int]], list[np.ndarray]]:
        """The rows of positions ``start .. stop-1`` as a set, not in order: runs of
        consecutive rows ``(first, past)`` (a piece held whole, or unmixed: its window's
        base positions, whatever their order) and arrays of the rest (parts of mixed
        windows), so a set's digest costs a few runs' closed forms, not a pass."""
        runs: list[tuple[int, int]] = []
        arrays: list[np.ndarray] = []
        stop = min(stop, self.n)
        for k, p in enumerate(self.pieces):
            a = max(start, int(self.starts[k]))
            z = min(stop, int(self.starts[k]) + p.rows)
            if z <= a:
                continue
            x, y = p.i + a - int(self.starts[k]), p.i + z - int(self.starts[k])
            if not (self.mix and p.mixed) or (x == 0 and y == p.size):
                lo, hi = p.lo + x, p.lo + y
                if self.base is None:
                    runs.append((lo, hi))
                elif self.base_ranges is not None:
                    runs += self.base_ranges(lo, hi)
                else:
                    arrays.append(self.base(np.arange(lo, hi, dtype=np.int64)))
            else:
                arrays.append(self.rows(a, z))
        return runs, arrays
