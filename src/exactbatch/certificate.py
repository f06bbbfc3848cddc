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
from dataclasses import dataclass

from exactbatch.loader.history import check_records
from exactbatch.loader.lineage import follow, same_run
from exactbatch.order.digest import Tally

__all__ = ["Certificate", "EpochCertificate", "certify", "certify_named"]


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


def certify(states: Iterable[dict]) -> Certificate:
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
    for i, state in enumerate(states):
        if not isinstance(state, dict):
            raise TypeError(f"states[{i}] must be a dict from state_dict(); got {type(state)}")
        if "history" not in state:
            raise ValueError(
                f"states[{i}] has no 'history': it was taken by an exactbatch before "
                "certify, or is not a DataLoader state"
            )
        check_records(state["history"], f"states[{i}]['history']")
    same_run(states)
    kept, aside = follow(states)
    merged: dict[tuple, dict] = {}
    for i in kept:
        seen: dict[tuple, int] = {}
        for rec in states[i]["history"]:
            # The n-th record of a segment in one state is its n-th run: a replay
            # (the epoch begun again on the same shard) is a record of its own.
            seg = (rec["epoch"], rec["start"], tuple(rec["shard"]))
            key = (*seg, seen.get(seg, 0))
            seen[seg] = key[-1] + 1
            old = merged.get(key)
            if old is None or _later(rec, old):
                merged[key] = rec
    epochs: dict[int, list[dict]] = {}
    for rec in merged.values():
        epochs.setdefault(rec["epoch"], []).append(rec)
    ids = tuple(dict.fromkeys(str(states[i].get("id", f"states[{i}]")) for i in aside))
    return Certificate(tuple(_judge(e, epochs[e]) for e in sorted(epochs)), ids)


def certify_named(states: list[dict], owners: Sequence[str], where: str) -> Certificate:
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


def _later(rec: dict, old: dict) -> bool:
    """Does ``rec`` supersede ``old``, a record of the same segment from another
    state (a segment's hand-outs only grow; one that ended beats one in progress)?"""
    return (rec["rows"], rec["promised"] is not None) > (old["rows"], old["promised"] is not None)


def _tally(t: dict) -> Tally:
    return Tally(t["rows"], int(t["digest"], 16))


def _judge(epoch: int, recs: list[dict]) -> EpochCertificate:
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
        ended = [r for r in mine if r["promised"] is not None]
        got = Tally()
        for r in mine:
            got.add(r["rows"], int(r["digest"], 16))
        if not ended:
            unknown.append(k)
            continue
        promised = _tally(ended[0]["promised"])
        expected.add(promised.rows, promised.digest)
        diff = got.rows - promised.rows
        repeated += max(diff, 0)
        missing += max(-diff, 0)
        if got != promised:
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
    if whole is not None and not drops and expected != _tally(whole):
        notes.append(
            f"the shards' rows ({expected.rows}) are not the dataset's ({whole['rows']}): "
            "shards overlap or leave rows out (a rank's shard_index or num_shards wrong?)"
        )
        short = whole["rows"] - expected.rows
        missing += max(short, 0)
        repeated += max(-short, 0)
        return _verdict(epoch, handed, whole["rows"], missing, repeated, "; ".join(notes))
    return _verdict(epoch, handed, expected.rows, missing, repeated, "; ".join(notes), expected)


def _judge_elastic(epoch: int, recs: list[dict], handed: Tally) -> EpochCertificate:
    ended = [r for r in recs if r["promised"] is not None]
    if not ended:
        note = "no state shows the epoch's end (cut short, or the last ranks' states are missing)"
        whole = next((r["whole"] for r in recs if r["whole"] is not None), None)
        short = None if whole is None else max(whole["rows"] - handed.rows, 0)
        return _verdict(epoch, handed, None, short, 0, note)
    promised = _tally(ended[0]["promised"])
    diff = handed.rows - promised.rows
    note = ""
    if handed != promised:
        note = (
            "the same count but not the same rows"
            if not diff
            else "the segments' hand-outs do not add up to the epoch's global order "
            "(a rank's states missing, or batches replayed after a checkpoint)"
        )
    return _verdict(epoch, handed, promised.rows, max(-diff, 0), max(diff, 0), note, promised)


def _verdict(epoch, handed: Tally, expected, missing, repeated, note, promised=None):
    exact = promised is not None and handed == promised and not note
    return EpochCertificate(epoch, exact, handed.rows, expected, missing, repeated, note)
