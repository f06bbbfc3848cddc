"""Keeping a state small: the records of old, clean epochs folded into one summary per
shard, which :func:`exactbatch.certify` checks as surely as the records.

A state keeps the records (:mod:`exactbatch.loader.history`) of its last
:data:`KEEP` epochs in full. An older record is folded into its shard's
*summary* when it is *clean*: its segment began at the epoch's start, ended
on record, is the only record of that segment in the state, and its epoch is
not in the summary yet; a non-elastic one was also exact on its shard (the
rows handed out are the rows promised), and an elastic one that drops rows
(``drop_last``, ``even_batches=True``) promised as many rows as the epochs
folded before it.
Anything else (a replay, an epoch cut short, a loss) stays in full, so
certify still names it. A summary holds, per shard (``[index, count]``):

* ``epochs``: runs ``[first, last, rows]``, each epoch of the run with
  ``rows`` handed out on this shard (one run for a plain run);
* ``digest``: the sum, mod 2**64, of each folded record's digest times its
  epoch's weight (:func:`weight`, an odd 64-bit hash of the epoch);
* ``whole`` (the dataset's rows) and ``drops``, as the records said;
* ``promised``, elastic with drops only (the rows left out differ epoch by
  epoch): each epoch's promised rows (one count for all) and the sum of its
  promised digests, weighted alike.

Digests are sums, so certify, which sums every shard's records of an epoch
and compares with the dataset's rows, can sum the weighted digests of every
shard's summaries and records of the folded epochs and compare with the
weighted dataset (under elastic with drops, the weighted promises): a
difference in any epoch shows (with the digest's own odds), and the rows of
each epoch are still checked one by one. Every rank
folds its own records alike; a summary supersedes the full records of the
segments it holds, in any state, as a later record does. The state's size is
then bounded in the number of epochs: a few KB after 10,000 epochs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

from exactbatch.loader.records import Record, Summary, Tallied

__all__ = ["KEEP", "check_summaries", "compact", "expand", "summary_rows", "weight"]

KEEP = 4  # the last epochs whose records a state keeps in full
_MASK = (1 << 64) - 1


def weight(epoch: int) -> int:
    """The odd 64-bit weight of ``epoch``'s digests in a summary."""
    h = hashlib.blake2b(epoch.to_bytes(8, "little"), digest_size=8).digest()
    return int.from_bytes(h, "little") | 1


def _covers(summary: Summary, epoch: int) -> bool:
    return any(lo <= epoch <= hi for lo, hi, _ in summary["epochs"])


def _clean(
    rec: Record, promised: Tallied, whole: Tallied, records: list[Record], summary: Summary | None
) -> bool:
    """Is ``rec`` (its epoch ended on record: ``promised``, of a dataset of rows
    ``whole``) clean, to be folded into ``summary`` (module docs)?"""
    if rec["start"] != 0:
        return False
    if summary is not None and (_covers(summary, rec["epoch"]) or summary["whole"] != whole):
        return False  # (a second run of a folded epoch stays on record)
    seg = (rec["epoch"], tuple(rec["shard"]))
    if sum((r["epoch"], tuple(r["shard"])) == seg and r["start"] == 0 for r in records) != 1:
        return False
    if rec["elastic"]:  # (with drops: the summary sums each epoch's own promise)
        if summary is None:
            return True
        if "promised" not in summary:
            return not rec["drops"]
        return promised["rows"] == summary["promised"]["rows"]
    return promised == {"rows": rec["rows"], "digest": rec["digest"]}


def _insert(runs: list[list[int]], epoch: int, rows: int) -> None:
    """Add ``epoch`` (``rows``) to the sorted runs, merging neighbours of equal rows."""
    runs.append([epoch, epoch, rows])
    runs.sort()
    merged: list[list[int]] = []
    for run in runs:
        if merged and merged[-1][1] + 1 == run[0] and merged[-1][2] == run[2]:
            merged[-1][1] = run[1]
        else:
            merged.append(run)
    runs[:] = merged


def compact(records: list[Record], summaries: list[Summary], shard: list[int]) -> None:
    """Fold the clean records of ``shard`` older than the last :data:`KEEP` epochs into
    its summary in ``summaries`` (made if none), in place."""
    if not records:
        return
    newest = max(r["epoch"] for r in records)
    summary = next((s for s in summaries if s["shard"] == shard), None)
    kept = []
    for rec in records:
        if rec["shard"] != shard or rec["epoch"] > newest - KEEP:
            kept.append(rec)
            continue
        promised, whole = rec["promised"], rec["whole"]
        if promised is None or whole is None or not _clean(rec, promised, whole, records, summary):
            kept.append(rec)
            continue
        if summary is None:
            summary = {
                "shard": list(shard),
                "elastic": rec["elastic"],
                "drops": False,
                "epochs": [],
                "digest": "0",
                "whole": whole.copy(),
            }
            if rec["elastic"] and rec["drops"]:
                summary["promised"] = {"rows": promised["rows"], "digest": "0"}
            summaries.append(summary)
        total = int(summary["digest"], 16) + weight(rec["epoch"]) * int(rec["digest"], 16)
        summary["digest"] = f"{total & _MASK:016x}"
        if "promised" in summary:  # (a new dict: a state taken before keeps its own)
            promise = weight(rec["epoch"]) * int(promised["digest"], 16)
            promise += int(summary["promised"]["digest"], 16)
            summary["promised"] = {**summary["promised"], "digest": f"{promise & _MASK:016x}"}
        summary["drops"] = bool(summary["drops"] or rec["drops"])
        _insert(summary["epochs"], rec["epoch"], rec["rows"])
    records[:] = kept


def expand(summary: Summary) -> Iterator[tuple[int, int]]:
    """``(epoch, rows)`` of each epoch ``summary`` holds."""
    for lo, hi, rows in summary["epochs"]:
        for e in range(lo, hi + 1):
            yield e, rows


def summary_rows(summaries: Iterable[Summary]) -> int:
    """The rows the summaries hold (a state's clock counts them with its records')."""
    return sum((hi - lo + 1) * rows for s in summaries for lo, hi, rows in s["epochs"])


def check_summaries(value: object, where: str = "state['compacted']") -> list[Summary]:
    """``value`` as a state holds it, checked: a ``TypeError`` or ``ValueError`` naming
    the summary and the key otherwise."""
    if not isinstance(value, list):
        raise TypeError(f"{where} must be a list of summaries; got {type(value).__name__}")
    for i, s in enumerate(value):
        at = f"{where}[{i}]"
        if not isinstance(s, dict):
            raise TypeError(f"{at} must be a dict; got {type(s).__name__}")
        shard = s.get("shard")
        if not (isinstance(shard, list) and len(shard) == 2 and all(_int(v) for v in shard)):
            raise ValueError(f"{at}['shard'] must be [index, count]; got {shard!r}")
        for key in ("elastic", "drops"):
            if not isinstance(s.get(key), bool) and not (key == "elastic" and s[key] == "ranges"):
                raise ValueError(f"{at}['{key}'] must be a bool; got {s.get(key)!r}")
        runs = s.get("epochs")
        if not isinstance(runs, list) or not all(
            isinstance(r, list) and len(r) == 3 and all(_int(v) for v in r) and r[0] <= r[1]
            for r in runs
        ):
            raise ValueError(f"{at}['epochs'] must be a list of [first, last, rows]; got {runs!r}")
        whole = s.get("whole")
        if (
            not isinstance(whole, dict)
            or not _int(whole.get("rows"))
            or not _hex(whole.get("digest"))
        ):
            raise ValueError(f"{at}['whole'] must be {{rows, digest}}; got {whole!r}")
        if not _hex(s.get("digest")):
            raise ValueError(
                f"{at}['digest'] must be a hexadecimal string; got {s.get('digest')!r}"
            )
        promised = s.get("promised", {"rows": 0, "digest": "0"})
        if (
            not isinstance(promised, dict)
            or not _int(promised.get("rows"))
            or not _hex(promised.get("digest"))
        ):
            raise ValueError(f"{at}['promised'] must be {{rows, digest}}; got {promised!r}")
    return value


def _int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def _hex(v: object) -> bool:
    try:
        return isinstance(v, str) and int(v, 16) >= 0
    except ValueError:
        return False
