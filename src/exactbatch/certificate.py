"""The run certificate: did every rank of a run, together, hand out every row of
every epoch exactly once?

Each state a loader takes carries the records of the epochs it began
(:mod:`exactbatch.loader.history`): its own hand-outs per epoch (the count
and order-independent digest of the row ids, as the epoch ledger keeps
them) and, once the epoch ended there, what it promised. :func:`certify`
merges the records of every state given - every rank's, across resumes
and elastic changes of the shard count - and compares, epoch by epoch,
what the ranks handed out with what the epoch promised. No row ids are
needed, and no data is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from exactbatch.loader.compaction import check_summaries, expand, weight
from exactbatch.loader.history import check_records
from exactbatch.loader.lineage import follow, same_run
from exactbatch.loader.records import Record, State, Summary, Tallied
from exactbatch.order.digest import Tally

__all__ = ["Certificate", "EpochCertificate", "certify", "certify_named"]

_MASK = (1 << 64) - 1


class _Judged(Record):
    """A record as :func:`certify` judges it: a state's own, or one an epoch folded into
    a summary (``elided``: its digest is in the summary's sum, not its own)."""

    elided: bool


# a record's place in the run: (epoch, its first global batch, shard, the n-th run)
_Key = tuple[int, int, tuple[int, ...], int]


@dataclass(frozen=True)
class EpochCertificate:
    """One epoch's verdict.

    ``exact``: every row it promised was handed out exactly once across the
    ranks. ``handed``: rows handed out by all ranks together; ``expected``:
    rows the epoch promised (None when no rank's state shows the epoch's
    end); ``missing`` and ``repeated``: rows short and over, shard by shard
    (None where unknown); ``note``: why not, in words ("" when exact).
    """

    epoch: int
    exact: bool
    handed: int
    expected: int | None
    missing: int | None
    repeated: int
    note: str = ""

    def __str__(self) -> str:
        if self.exact:
            return f"epoch {self.epoch}: exact, {self.handed} rows each handed out once"
        missing = "an unknown number of" if self.missing is None else str(self.missing)
        return (
            f"epoch {self.epoch}: NOT exact: {self.handed} rows handed out, "
            f"{'?' if self.expected is None else self.expected} promised; {missing} rows "
            f"missing, {self.repeated} repeated ({self.note})"
        )


@dataclass(frozen=True)
class Certificate:
    """The verdict on a run: one :class:`EpochCertificate` per epoch any rank began,
    in order. Truthy only when there is at least one epoch and every one is exact.
    ``set_aside``: the ids of the states given that the run's lineage abandoned (a
    restart from an earlier state; :mod:`exactbatch.loader.lineage`), not counted."""

    epochs: tuple[EpochCertificate, ...]
    set_aside: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.epochs) and all(e.exact for e in self.epochs)

    @property
    def failures(self) -> tuple[EpochCertificate, ...]:
        """The epochs that are not exact."""
        return tuple(e for e in self.epochs if not e.exact)

    def __str__(self) -> str:
        if not self.epochs:
            return "NOT certified: the states hold no epoch"
        head = (
            f"certified: {len(self.epochs)} epochs, every row of each handed out exactly once"
            if self
            else f"NOT certified: {len(self.failures)} of {len(self.epochs)} epochs not exact"
        )
        lines = [head, *(f"  {e}" for e in self.epochs)]
        if self.set_aside:
            lines.append(
                f"  set aside: {len(self.set_aside)} state(s) no final state descends from "
                f"(a restart from an earlier state abandoned them): {', '.join(self.set_aside)}"
            )
        return "\n".join(lines)


def certify(states: Iterable[State]) -> Certificate:
    """Merge the records of ``states`` (``DataLoader.state_dict()`` of every rank of a
    run, any number each) and judge each epoch any rank began.

    The states must be of one run (the same seed, dataset size, settings and data:
    a ``ValueError`` naming the field otherwise). certify follows their lineage
    (:mod:`exactbatch.loader.lineage`): a state abandoned by a restart from an
    earlier one, and what descends from it, is set aside and named in
    :attr:`Certificate.set_aside`; more states of the lineage do no harm (a later
    state of a rank's segment supersedes its earlier ones). Every record a state
    holds counts: an epoch replayed on one rank (two records of its segment) is
    not exact.

    An epoch is exact when every shard's part of it ended on record and the rows
    handed out, across the ranks, are the rows the epoch promised, each once. Under
    ``elastic=True`` the records of every segment (each rank's, between changes of
    the shard count) are summed and compared with the epoch's global order: give the
    last state each rank took before each change, and the final ones. An epoch cut
    short on one rank (its state taken mid-epoch, or a rank's states missing) is
    not exact. ``TypeError``/``ValueError`` for something that is not a state.
    """
    if isinstance(states, dict):
        raise TypeError("certify takes a list of states (one dict per rank), not one state")
    states = list(states)
    histories: list[list[Record]] = []
    compacted: list[list[Summary]] = []
    for i, state in enumerate(states):
        if not isinstance(state, dict):
            raise TypeError(f"states[{i}] must be a dict from state_dict(); got {type(state)}")
        if "history" not in state:
            raise ValueError(
                f"states[{i}] has no 'history': it was taken by an exactbatch before "
                "certify, or is not a DataLoader state"
            )
        histories.append(check_records(state["history"], f"states[{i}]['history']"))
        compacted.append(check_summaries(state.get("compacted", []), f"states[{i}]['compacted']"))
    same_run(states)
    kept, aside = follow(states)
    summaries, clash = _summaries([compacted[i] for i in kept])
    merged: dict[_Key, _Judged] = {}
    for i in kept:
        # A segment a state folded into its summary was its first run: a record of it
        # beside the summary is another run (a replay), counted as such.
        seen: dict[tuple[int, int, tuple[int, ...]], int] = {
            (e, 0, tuple(s["shard"])): 1 for s in compacted[i] for e, _ in expand(s)
        }
        for rec in histories[i]:
            # The n-th record of a segment in one state is its n-th run: a replay
            # (the epoch begun again on the same shard) is a record of its own.
            seg = (rec["epoch"], rec["start"], tuple(rec["shard"]))
            key = (*seg, seen.get(seg, 0))
            seen[seg] = key[-1] + 1
            old = merged.get(key)
            if old is None or _later(rec, old):
                merged[key] = {**rec, "elided": False}
    for summary in summaries:  # (it supersedes every record of the segments it holds)
        for e, rows in expand(summary):
            merged[(e, 0, tuple(summary["shard"]), 0)] = _folded(summary, e, rows)
    epochs: dict[int, list[_Judged]] = {}
    for rec in merged.values():
        epochs.setdefault(rec["epoch"], []).append(rec)
    ids = tuple(dict.fromkeys(str(states[i].get("id", f"states[{i}]")) for i in aside))
    verdicts = [_judge(e, epochs[e]) for e in sorted(epochs)]
    note = _folds_note(summaries, clash, epochs)
    if note:
        folded = {e for s in summaries for e, _ in expand(s)} | clash
        verdicts = [
            replace(v, exact=False, note=f"{v.note}; {note}" if v.note else note)
            if v.epoch in folded
            else v
            for v in verdicts
        ]
    return Certificate(tuple(verdicts), ids)


def _summaries(compacted: list[list[Summary]]) -> tuple[list[Summary], set[int]]:
    """The summaries to count (``compacted``: each state's): per shard, those no other
    summary of it holds (a later one of its lane holds an earlier's epochs too); and
    the epochs two of them both hold without one holding the other's (not one lane:
    judged not exact)."""
    by_shard: dict[tuple[tuple[int, ...], bool | str], list[tuple[frozenset[int], Summary]]]
    by_shard = {}
    for summaries in compacted:
        for s in summaries:
            held = frozenset(e for e, _ in expand(s))
            by_shard.setdefault((tuple(s["shard"]), s["elastic"]), []).append((held, s))
    counted: list[Summary] = []
    clash: set[int] = set()
    for found in by_shard.values():
        found.sort(key=lambda f: -len(f[0]))
        mine: list[tuple[frozenset[int], Summary]] = []
        for held, s in found:
            same = [m for m in mine if held <= m[0]]
            if same:
                if any(held == m[0] and s["digest"] != m[1]["digest"] for m in same):
                    clash |= held
                continue
            for other, _ in mine:
                clash |= held & other
            mine.append((held, s))
        counted += [s for _, s in mine]
    return counted, clash


def _folded(summary: Summary, epoch: int, rows: int) -> _Judged:
    """The record of ``epoch`` that ``summary`` folded, as far as it says: its rows
    (its digest is in the summary's sum, checked by :func:`_folds_note`)."""
    whole = summary["whole"]
    promised = summary.get("promised", whole) if summary["elastic"] else {"rows": rows}
    tally: Tallied = {"rows": promised["rows"], "digest": "0"}
    return {
        "epoch": epoch,
        "shard": list(summary["shard"]),
        "elastic": summary["elastic"],
        "start": 0,
        "drops": summary["drops"],
        "rows": rows,
        "digest": "0",
        "promised": tally,
        "whole": whole,
        "elided": True,
    }


def _folds_note(summaries: list[Summary], clash: set[int], epochs: dict[int, list[_Judged]]) -> str:
    """Why the folded epochs are not exact ("" if they may be): their digests, weighted
    by epoch and summed over every shard's summaries and records, against the dataset's
    rows once per epoch (:mod:`exactbatch.loader.compaction`)."""
    if clash:
        return "summaries of one shard disagree on the epochs they hold"
    checked = [s for s in summaries if s["elastic"] or not s["drops"]]
    if not checked:
        return ""
    folded = {e for s in summaries for e, _ in expand(s)}
    unknown = "the folded epochs' rows cannot be checked"
    for e in folded:
        recs = [r for r in epochs.get(e, []) if not r["elastic"]]
        if recs and len({r["shard"][0] for r in recs}) < recs[0]["shard"][1]:
            return f"a shard of epoch {e} is not on record: {unknown}"
    total = sum(int(s["digest"], 16) for s in checked)
    held = {(e, tuple(s["shard"])) for s in summaries for e, _ in expand(s)}
    for e in folded:
        w = weight(e)
        promised: set[tuple[int, ...]] = set()  # (a shard's promise once, however many runs)
        for r in sorted(epochs.get(e, []), key=lambda r: r["promised"] is None):
            if r.get("elided"):
                continue
            if not r["elastic"]:
                shard = tuple(r["shard"])
                if (e, shard) in held or shard in promised:
                    continue
                promised.add(shard)
            t = (
                r["digest"]
                if r["elastic"]
                else (None if r["promised"] is None else r["promised"]["digest"])
            )
            if t is None:
                return f"epoch {e}'s promise on shard {r['shard'][0]} is not on record: {unknown}"
            total += w * int(t, 16)
    # Under elastic with drops, each rank's summary sums its epochs' own promises: the
    # largest of those folded as far (every other holds some of its epochs) count once.
    groups = {
        (frozenset(e for e, _ in expand(s)), s["promised"]["digest"])
        for s in checked
        if "promised" in s
    }
    largest = [g for g in groups if not any(g[0] < h[0] for h in groups)]
    by_promise: set[int] = set()
    for held_by, _ in largest:
        if by_promise & held_by:
            return f"the ranks' summaries disagree on the epochs' promises: {unknown}"
        by_promise |= held_by
    whole = int(checked[0]["whole"]["digest"], 16)
    want = sum(weight(e) for e in folded - by_promise) * whole
    want += sum(int(digest, 16) for _, digest in largest)
    if (total - want) & _MASK:
        return "the folded epochs' rows, summed over the shards, are not the dataset's rows"
    return ""


def certify_named(states: list[State], owners: Sequence[str], where: str) -> Certificate:
    """:func:`certify` of ``states``, whose i-th came from ``owners[i]`` (a file, a
    checkpoint), all from ``where``: a ``ValueError`` about one state names its owner
    instead of its place in the list, any other names ``where`` (a ``TypeError`` is
    one too)."""
    try:
        return certify(states)
    except (TypeError, ValueError) as e:
        message = str(e)
        at = re.match(r"states\[(\d+)\]", message)
        if at is None or int(at[1]) >= len(owners):
            raise ValueError(f"{where}: {message}") from None
        rest = message[at.end() :]
        other = re.search(r"states\[(\d+)\]", rest)
        if other is not None and int(other[1]) < len(owners):
            rest = rest[: other.start()] + owners[int(other[1])] + rest[other.end() :]
        raise ValueError(f"{owners[int(at[1])]}: the state{rest}") from None


def _later(rec: Record, old: _Judged) -> bool:
    """Does ``rec`` supersede ``old``, a record of the same segment from another
    state (a segment's hand-outs only grow; one that ended beats one in progress)?"""
    return (rec["rows"], rec["promised"] is not None) > (old["rows"], old["promised"] is not None)


def _tally(t: Tallied) -> Tally:
    return Tally(t["rows"], int(t["digest"], 16))


def _judge(epoch: int, recs: list[_Judged]) -> EpochCertificate:
    handed = Tally()
    for r in recs:
        handed.add(r["rows"], int(r["digest"], 16))
    if len({r["elastic"] for r in recs}) > 1:
        return _verdict(epoch, handed, None, None, 0, "elastic and non-elastic states mixed")
    if recs[0]["elastic"]:
        return _judge_elastic(epoch, recs, handed)
    counts = {r["shard"][1] for r in recs}
    if len(counts) > 1:
        note = f"states of different shard counts {sorted(counts)} (not elastic)"
        return _verdict(epoch, handed, None, None, 0, note)
    (count,) = counts
    missing, repeated, notes = 0, 0, []
    expected = Tally()
    unknown = []
    for k in range(count):
        mine = [r for r in recs if r["shard"][0] == k]
        ended = [r["promised"] for r in mine if r["promised"] is not None]
        got = Tally()
        for r in mine:
            got.add(r["rows"], int(r["digest"], 16))
        if not ended:
            unknown.append(k)
            continue
        promised = _tally(ended[0])
        expected.add(promised.rows, promised.digest)
        diff = got.rows - promised.rows
        repeated += max(diff, 0)
        missing += max(-diff, 0)
        if not _same(got, promised, any(r.get("elided") for r in mine)):
            notes.append(
                f"shard {k}: {got.rows} rows of {promised.rows}"
                + ("" if diff else ", the same count but not the same rows")
            )
    whole = next((r["whole"] for r in recs if r["whole"] is not None), None)
    if unknown:
        notes.append(
            f"shard{'s' if len(unknown) > 1 else ''} {', '.join(map(str, unknown))} of {count}: "
            "no state shows the epoch's end (cut short, or the rank's states are missing)"
        )
        seen = sum(r["rows"] for r in recs if r["shard"][0] in unknown)
        missing_all = None if whole is None else max(whole["rows"] - expected.rows - seen, 0)
        return _verdict(epoch, handed, None, missing_all, repeated, "; ".join(notes))
    drops = any(r.get("drops") for r in recs)
    elided = any(r.get("elided") for r in recs)
    if whole is not None and not drops and not _same(expected, _tally(whole), elided):
        notes.append(
            f"the shards' rows ({expected.rows}) are not the dataset's ({whole['rows']}): "
            "shards overlap or leave rows out (a rank's shard_index or num_shards wrong?)"
        )
        short = whole["rows"] - expected.rows
        missing += max(short, 0)
        repeated += max(-short, 0)
        return _verdict(epoch, handed, whole["rows"], missing, repeated, "; ".join(notes))
    return _verdict(
        epoch, handed, expected.rows, missing, repeated, "; ".join(notes), expected, elided
    )


def _judge_elastic(epoch: int, recs: list[_Judged], handed: Tally) -> EpochCertificate:
    ended = [r["promised"] for r in recs if r["promised"] is not None]
    if not ended:
        note = "no state shows the epoch's end (cut short, or the last ranks' states are missing)"
        whole = next((r["whole"] for r in recs if r["whole"] is not None), None)
        short = None if whole is None else max(whole["rows"] - handed.rows, 0)
        return _verdict(epoch, handed, None, short, 0, note)
    promised = _tally(ended[0])
    diff = handed.rows - promised.rows
    note = ""
    elided = any(r.get("elided") for r in recs)
    if not _same(handed, promised, elided):
        note = (
            "the same count but not the same rows"
            if not diff
            else "the segments' hand-outs do not add up to the epoch's global order "
            "(a rank's states missing, or batches replayed after a checkpoint)"
        )
    return _verdict(
        epoch, handed, promised.rows, max(-diff, 0), max(diff, 0), note, promised, elided
    )


def _same(a: Tally, b: Tally, elided: bool) -> bool:
    """Equal tallies; only their rows where a folded record's digest is elided (the
    digests of folded epochs are checked together, by :func:`_folds_note`)."""
    return a.rows == b.rows if elided else a == b


def _verdict(
    epoch: int,
    handed: Tally,
    expected: int | None,
    missing: int | None,
    repeated: int,
    note: str,
    promised: Tally | None = None,
    elided: bool = False,
) -> EpochCertificate:
    exact = promised is not None and _same(handed, promised, elided) and not note
    return EpochCertificate(epoch, exact, handed.rows, expected, missing, repeated, note)
