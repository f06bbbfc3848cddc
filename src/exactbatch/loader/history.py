"""What a loader handed out in each epoch it began: the records a state carries
for :func:`exactbatch.certify`.

A record is one loader's part of one epoch since it began or resumed (a
*segment*): this loader's own hand-outs (count and ledger digest) and,
once the epoch ended here (its ledger checked), the rows the epoch
promised. A loader keeps the records of the epochs it ended or left, and
a state carries them with the record of the epoch in progress, about 200
bytes an epoch, for its last few epochs: older clean records are folded into
one summary per shard (:mod:`exactbatch.loader.compaction`), so a state stays
a few KB however many epochs it ran. A loader that resumes a state takes its records on; a
non-elastic one continues the state's own segment (the same shard), an
elastic one starts a segment of its own from the global batch it resumes
at, beside the records of the rank whose state it loaded. A segment is
named by its epoch, shard and first global batch, so records are plain
data: two loaders built and stepped alike take equal states. The records
of every rank's states, merged, say which rows each epoch handed out
across the ranks (:mod:`exactbatch.certificate`).
"""

from __future__ import annotations

import time

from exactbatch.feeds.base import Feed, First
from exactbatch.loader import compaction
from exactbatch.loader.records import Record, Recorder, Resumed, Summary, Tallied
from exactbatch.order.digest import Tally

__all__ = ["History", "check_records"]


def _tally(t: Tally) -> Tallied:
    return {"rows": t.rows, "digest": f"{t.digest:016x}"}


class History:
    """The records of one loader (see the module's docstring): those of epochs
    ended or left, and where this loader's own segment of the epoch in progress
    began (``start``, where its dealing's epoch resumed: the global batch under elastic,
    0 for a contiguous shard) with the ledger it
    began from (``base``: an elastic state's ledger covers other ranks' batches)."""

    __slots__ = ("base", "compacted", "loaded_at", "parent", "records", "run", "start")

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.compacted: list[Summary] = []  # old clean records, folded (loader.compaction)
        self.base = Tally()
        self.start: First = 0
        self.parent: str | None = None  # the id of the state loaded (exactbatch.loader.lineage)
        self.loaded_at: int | None = None  # when (ns since the epoch, this machine's clock)
        self.run = 0  # the reset(seed=...) calls before (exactbatch.loader.state.Position)

    def lineage(self) -> tuple[str | None, int | None]:
        """``(parent, loaded_at)`` of a state taken now: the state loaded, and when. Even
        before anything was handed out since the load, a state names it: the restart is
        a node of the lineage of its own (a state taken then stands where the state
        loaded stood, in another session: :mod:`exactbatch.loader.lineage`)."""
        return self.parent, self.loaded_at

    def record(self, cursor: Recorder, epoch: int, handed: Tally, promised: Tally | None) -> Record:
        """The record of this loader's segment of ``epoch``: ``handed`` the epoch's
        ledger as the cursor holds it, ``promised`` the epoch's promise once it ended
        here (None while in progress, or for an epoch left before its end)."""
        spec, feed = cursor.spec, cursor.feed
        rule = feed.rule
        own = handed.minus(self.base)
        rec: Record = {
            "epoch": epoch,
            "shard": [spec.shard.index, spec.shard.count],
            "elastic": spec.elastic,
            "start": rule.start_of(feed, self.start),
            "drops": spec.drop_last or spec.capped,  # rows left out by design ("pad": none)
            **_tally(own),
            "promised": None,
            "whole": None,
        }
        whole = feed.whole()
        if whole is not None:
            rec["whole"] = _tally(whole)
        if promised is not None:  # (dealt: every rank's batches of the epoch, from the order)
            epoch_held = cursor.current
            assert epoch_held is not None  # (an epoch's promise: the epoch is held)
            rec["promised"] = _tally(rule.promise(feed, epoch_held, self.start, promised))
        return rec

    def keep(self, rec: Record) -> None:
        """``rec`` is final (its epoch ended or was left): kept in every later state
        (unless it holds nothing: no row handed out, no end on record), or folded into
        its shard's summary once it is old and clean (:mod:`exactbatch.loader.compaction`)."""
        if _holds(rec):
            self.records.append(rec)
            compaction.compact(self.records, self.compacted, rec["shard"])

    def summaries(self) -> list[Summary]:
        """The summaries a state takes now (copies: later folds do not change them)."""
        return [{**s, "epochs": [list(r) for r in s["epochs"]]} for s in self.compacted]

    def states_records(self, live: Record | None) -> list[Record]:
        """The records a state takes now: those kept, and ``live``, the epoch in progress
        (unless nothing of it was handed out yet: an ``iter()`` with no batch taken is
        neither a loss nor a hand-out)."""
        return [*self.records, live] if live is not None and _holds(live) else list(self.records)

    def restore(self, records: list[Record], feed: Feed, pos: Resumed) -> None:
        """Take on a state's ``records``: as the ``feed``'s state rule says
        (:mod:`exactbatch.feeds.state_rules`), a contiguous shard goes on with the
        state's segment of its epoch; a dealt one starts its own where it resumes, its
        hand-outs counted from the state's ledger. The state (``pos.parent``, its id)
        is the parent of the states taken from now on."""
        self.parent, self.loaded_at, self.run = pos.parent, time.time_ns(), pos.run
        self.compacted = [{**s, "epochs": [list(r) for r in s["epochs"]]} for s in pos.compacted]
        self.records = list(records)
        self.base, self.start, continued = feed.rule.segment(pos, feed)
        shard = [feed.spec.shard.index, feed.spec.shard.count]
        if continued and records and _live_of(records[-1], pos, shard):
            self.records.pop()  # the state's live record is this loader's segment, continued

    def moved(self) -> None:
        """A new epoch begins (or the cursor was moved): a segment from its start."""
        self.base, self.start = Tally(), 0

    def forget(self) -> None:
        """A new seed: another run, with no records and no parent."""
        self.records, self.compacted, self.run = [], [], self.run + 1
        self.parent, self.loaded_at = None, None
        self.moved()


def _holds(rec: Record) -> bool:
    """Does ``rec`` say anything: a row handed out, or the epoch's end?"""
    return rec["rows"] > 0 or rec["promised"] is not None


def _live_of(rec: Record, pos: Resumed, shard: list[int]) -> bool:
    """Is ``rec`` (a state's last record) the segment in progress at ``pos`` of
    ``shard``, which a resume continues? Every other record of the epoch (one left
    before, e.g. by ``set_epoch``) stays: a replay of the epoch stays on record."""
    live = rec["epoch"] == pos.epoch and rec["promised"] is None and rec["shard"] == shard
    return live and bool(pos.done or pos.pending)


_KEYS = {"epoch": int, "shard": list, "elastic": bool, "start": int, "rows": int, "drops": bool}


def check_records(records: object, where: str = "state['history']") -> list[Record]:
    """``records`` as a state holds them, checked: a ``TypeError`` or ``ValueError``
    naming the record and the key otherwise."""
    if not isinstance(records, list):
        raise TypeError(f"{where} must be a list of records; got {type(records).__name__}")
    for i, rec in enumerate(records):
        if not isinstance(rec, dict):
            raise TypeError(f"{where}[{i}] must be a dict; got {type(rec).__name__}")
        for key, kind in _KEYS.items():
            value = rec.get(key)
            if key == "elastic" and value == "ranges":  # (elastic="ranges": a dealt record)
                continue
            if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
                what = {int: "an int", bool: "a bool", list: "a list"}[kind]
                raise ValueError(f"{where}[{i}]['{key}'] must be {what}; got {value!r}")
        _hex(rec.get("digest"), f"{where}[{i}]['digest']")
        for key in ("promised", "whole"):
            t = rec.get(key, ())  # (missing: neither None nor a tally)
            if t is not None:
                if not isinstance(t, dict) or not isinstance(t.get("rows"), int):
                    raise ValueError(f"{where}[{i}]['{key}'] must be None or {{rows, digest}}")
                _hex(t.get("digest"), f"{where}[{i}]['{key}']['digest']")
    return records


def _hex(value: object, where: str) -> int:
    try:
        if not isinstance(value, str):
            raise TypeError
        return int(value, 16)
    except (TypeError, ValueError):
        raise ValueError(f"{where} must be a hexadecimal string; got {value!r}") from None
