"""The certificate's verdicts, figure by figure: records made by hand (what states
carry, :mod:`exactbatch.loader.history`) for each way a run can be wrong, and the
exact counts and words :func:`exactbatch.certify` must answer with.

tests/loader/test_certify.py runs real loaders; here every field of the answer
is pinned, so that a miscount (a shard's repeats not added up, the rows an
absent shard leaves out) or a verdict without its reason cannot pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch import certify
from exactbatch.certificate import Certificate, EpochCertificate
from exactbatch.loader.history import check_records
from exactbatch.order.digest import range_digest, rows_digest

N = 100


def _t(rows) -> dict:
    """A ledger tally of the row ids ``rows`` (a range or a list)."""
    ids = np.asarray(list(rows), dtype=np.int64)
    return {"rows": len(ids), "digest": f"{rows_digest(ids):016x}"}


def rec(handed, *, shard=(0, 1), promised=None, epoch=0, start=0, elastic=False, whole=N):
    """A record of ``handed`` row ids; ``promised``: the promise once ended (None: not
    ended); ``whole``: the dataset's rows 0..whole-1 (None: unknown)."""
    out = {
        "epoch": epoch,
        "shard": list(shard),
        "elastic": elastic,
        "start": start,
        "drops": False,
        **_t(handed),
        "promised": None if promised is None else _t(promised),
        "whole": None
        if whole is None
        else {"rows": whole, "digest": f"{range_digest(0, whole):016x}"},
    }
    return out


def state(*records) -> dict:
    return {"version": 2, "history": list(records)}


def verdict(*records) -> EpochCertificate:
    (e,) = certify([state(r) for r in records]).epochs
    return e


def test_shards_that_each_repeat_rows_add_up_their_repeats():
    e = verdict(
        rec([*range(50), 0, 1, 2], shard=(0, 2), promised=range(50)),
        rec([*range(50, 100), 50, 51], shard=(1, 2), promised=range(50, 100)),
    )
    assert (e.exact, e.handed, e.expected, e.missing, e.repeated) == (False, 105, 100, 0, 5)
    assert e.note == "shard 0: 53 rows of 50; shard 1: 52 rows of 50"


def test_shards_that_each_miss_rows_add_up_what_is_missing():
    e = verdict(
        rec(range(47), shard=(0, 2), promised=range(50)),
        rec(range(50, 98), shard=(1, 2), promised=range(50, 100)),
    )
    assert (e.exact, e.handed, e.expected, e.missing, e.repeated) == (False, 95, 100, 5, 0)


def test_the_same_count_of_other_rows_is_named_so():
    e = verdict(rec([*range(49), 99], promised=range(50), whole=50))
    assert (e.exact, e.missing, e.repeated) == (False, 0, 0)
    assert e.note == "shard 0: 50 rows of 50, the same count but not the same rows"


def test_shards_no_state_shows_ended_are_named_and_their_rows_estimated():
    e = verdict(
        rec(range(30), shard=(0, 3), promised=range(30)),
        rec(range(30, 40), shard=(1, 3)),  # cut short
    )
    assert (e.exact, e.handed, e.expected, e.missing, e.repeated) == (False, 40, None, 60, 0)
    assert e.note == (
        "shards 1, 2 of 3: no state shows the epoch's end (cut short, or the rank's states "
        "are missing)"
    )
    one = verdict(rec(range(30), shard=(0, 2), promised=range(30)))
    assert one.note.startswith("shard 1 of 2: no state") and one.missing == 70
    unknown = verdict(rec(range(30), shard=(0, 2), promised=range(30), whole=None))
    assert unknown.missing is None
    assert str(unknown).startswith("epoch 0: NOT exact: 30 rows handed out, ? promised; an ")


def test_shards_whose_promises_do_not_cover_the_dataset_are_caught():
    short = verdict(
        rec(range(40), shard=(0, 2), promised=range(40)),
        rec(range(50, 100), shard=(1, 2), promised=range(50, 100)),
    )
    assert (short.exact, short.expected, short.missing, short.repeated) == (False, 100, 10, 0)
    assert short.note == (
        "the shards' rows (90) are not the dataset's (100): shards overlap or leave rows "
        "out (a rank's shard_index or num_shards wrong?)"
    )
    over = verdict(
        rec(range(60), shard=(0, 2), promised=range(60)),
        rec(range(50, 100), shard=(1, 2), promised=range(50, 100)),
    )
    assert (over.exact, over.missing, over.repeated) == (False, 0, 10)


def test_rows_left_out_by_design_are_not_a_gap():
    r = rec(range(96), promised=range(96))
    r["drops"] = True
    e = verdict(r)
    assert (e.exact, e.handed, e.expected, e.missing, e.repeated, e.note) == (
        True,
        96,
        96,
        0,
        0,
        "",
    )


def test_an_elastic_epoch_is_judged_against_its_global_order():
    whole = range(100)
    exact = verdict(
        rec(range(60), shard=(0, 2), elastic=True),
        rec(range(60, 100), shard=(1, 2), elastic=True, start=6, promised=whole),
    )
    assert (exact.exact, exact.handed, exact.expected, exact.missing, exact.repeated) == (
        True,
        100,
        100,
        0,
        0,
    )
    assert exact.note == "" and str(exact) == "epoch 0: exact, 100 rows each handed out once"
    over = verdict(
        rec(range(70), shard=(0, 2), elastic=True),
        rec(range(60, 100), shard=(1, 2), elastic=True, start=6, promised=whole),
    )
    assert (over.exact, over.expected, over.missing, over.repeated) == (False, 100, 0, 10)
    assert over.note == (
        "the segments' hand-outs do not add up to the epoch's global order (a rank's states "
        "missing, or batches replayed after a checkpoint)"
    )
    other = verdict(rec([*range(99), 7], elastic=True, promised=whole))
    assert (other.exact, other.missing, other.repeated) == (False, 0, 0)
    assert other.note == "the same count but not the same rows"


def test_an_elastic_epoch_no_state_shows_ended_is_cut_short():
    e = verdict(rec(range(60), elastic=True), rec(range(60, 80), elastic=True, start=6))
    assert (e.exact, e.handed, e.expected, e.missing, e.repeated) == (False, 80, None, 20, 0)
    assert e.note == (
        "no state shows the epoch's end (cut short, or the last ranks' states are missing)"
    )
    assert verdict(rec(range(60), elastic=True, whole=None)).missing is None


def test_states_of_other_kinds_or_shard_counts_are_not_merged():
    mixed = verdict(rec(range(50), promised=range(50)), rec(range(50), elastic=True, start=5))
    assert (mixed.exact, mixed.expected, mixed.missing) == (False, None, None)
    assert mixed.note == "elastic and non-elastic states mixed"
    counts = verdict(
        rec(range(50), shard=(0, 2), promised=range(50)),
        rec(range(50, 100), shard=(1, 3), promised=range(50, 100)),
    )
    assert counts.note == "states of different shard counts [2, 3] (not elastic)"
    assert not counts.exact


def test_a_later_state_of_a_segment_wins_whatever_the_order_given():
    early, late = rec(range(30)), rec(range(100), promised=range(100))
    for order in ([early, late], [late, early]):
        assert certify([state(r) for r in order])
    ended = rec(range(100), promised=range(100))
    running = rec(range(100))  # the same rows, its end not on record yet
    for order in ([ended, running], [running, ended]):
        assert certify([state(r) for r in order]), order


def test_each_epoch_is_judged_apart_and_the_report_lists_them():
    cert = certify(
        [state(rec(range(100), promised=range(100)), rec(range(90), epoch=1, promised=range(100)))]
    )
    assert isinstance(cert, Certificate) and not cert
    assert [(e.epoch, e.exact) for e in cert.epochs] == [(0, True), (1, False)]
    assert [e.epoch for e in cert.failures] == [1]
    assert str(cert) == (
        "NOT certified: 1 of 2 epochs not exact\n"
        "  epoch 0: exact, 100 rows each handed out once\n"
        "  epoch 1: NOT exact: 90 rows handed out, 100 promised; 10 rows missing, "
        "0 repeated (shard 0: 90 rows of 100)"
    )
    good = certify([state(rec(range(100), promised=range(100)))])
    assert str(good) == (
        "certified: 1 epochs, every row of each handed out exactly once\n"
        "  epoch 0: exact, 100 rows each handed out once"
    )
    assert certify(iter([state(rec(range(100), promised=range(100)))]))  # any iterable


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda r: r.update(epoch=True), r"\['epoch'\] must be an int; got True"),
        (lambda r: r.update(rows=1.0), r"\['rows'\] must be an int"),
        (lambda r: r.update(start=None), r"\['start'\] must be an int"),
        (lambda r: r.update(shard=(0, 1)), r"\['shard'\] must be a list"),
        (lambda r: r.update(elastic=0), r"\['elastic'\] must be a bool"),
        (lambda r: r.update(digest=None), r"\['digest'\] must be a hexadecimal string; got None"),
        (lambda r: r.update(digest="xyz"), r"\['digest'\] must be a hexadecimal string; got 'xyz'"),
        (lambda r: r.update(promised={"rows": 1}), r"\['promised'\]\['digest'\] must be a hex"),
        (lambda r: r.update(promised={"digest": "0"}), r"\['promised'\] must be None or"),
        (lambda r: r.update(whole=[1]), r"\['whole'\] must be None or"),
        # a key every record has, missing: named here, not a KeyError where it is read
        (lambda r: r.pop("promised"), r"\['promised'\] must be None or \{rows, digest\}"),
        (lambda r: r.pop("whole"), r"\['whole'\] must be None or"),
        (lambda r: r.pop("drops"), r"\['drops'\] must be a bool; got None"),
        (lambda r: r.update(drops=1), r"\['drops'\] must be a bool; got 1"),
    ],
)
def test_a_malformed_record_is_named_with_its_key(change, match):
    r = rec(range(10), promised=range(10))
    change(r)
    with pytest.raises(ValueError, match=match):
        check_records([rec(range(3)), r], "here")
    with pytest.raises(ValueError, match=r"^states\[1\]\['history'\]\[0\]"):
        certify([state(rec(range(3))), state(r)])


def test_every_verdict_names_its_epoch_and_counts_nothing_it_cannot_know():
    mixed = certify(
        [
            state(rec(range(50), epoch=3, promised=range(50))),
            state(rec(range(50), epoch=3, elastic=True, start=5)),
        ]
    ).epochs[0]
    assert (mixed.epoch, mixed.repeated, mixed.missing) == (3, 0, None)
    counts = certify(
        [
            state(rec(range(50), epoch=2, shard=(0, 2), promised=range(50))),
            state(rec(range(50, 100), epoch=2, shard=(1, 3), promised=range(50, 100))),
        ]
    ).epochs[0]
    assert (counts.epoch, counts.repeated, counts.missing) == (2, 0, None)
    cut = certify([state(rec(range(60), epoch=4, elastic=True))]).epochs[0]
    assert (cut.epoch, cut.repeated) == (4, 0)
    gap = certify(
        [
            state(rec(range(40), epoch=5, shard=(0, 2), promised=range(40))),
            state(rec(range(50, 100), epoch=5, shard=(1, 2), promised=range(50, 100))),
        ]
    ).epochs[0]
    assert gap.epoch == 5


def test_rows_all_handed_out_by_a_rank_not_shown_ended_are_not_counted_missing():
    e = verdict(rec(range(50), shard=(0, 2), promised=range(50)), rec(range(50, 100), shard=(1, 2)))
    assert (e.exact, e.missing) == (False, 0)
    assert verdict(rec(range(100), elastic=True)).missing == 0


def test_a_shard_s_own_gap_and_the_shards_coverage_gap_add_up():
    e = verdict(
        rec(range(38), shard=(0, 2), promised=range(40)),  # 2 rows short of its promise
        rec([*range(50, 100), 50], shard=(1, 2), promised=range(50, 100)),  # 1 repeated
    )
    assert (e.missing, e.repeated) == (2 + 10, 1)
    assert e.note == (
        "shard 0: 38 rows of 40; shard 1: 51 rows of 50; the shards' rows (90) are not the "
        "dataset's (100): shards overlap or leave rows out (a rank's shard_index or "
        "num_shards wrong?)"
    )
    over = verdict(
        rec(range(60), shard=(0, 2), promised=range(60)),
        rec([*range(50, 100), 50], shard=(1, 2), promised=range(50, 100)),
    )
    assert (over.missing, over.repeated) == (0, 1 + 10)
    two = verdict(
        rec(range(20), shard=(0, 3), promised=range(30)),
        rec(range(30, 40), shard=(1, 3)),
    )
    assert two.note == (
        "shard 0: 20 rows of 30; shards 1, 2 of 3: no state shows the epoch's end (cut "
        "short, or the rank's states are missing)"
    )


def test_what_is_not_a_state_or_a_record_is_named_in_full():
    with pytest.raises(
        TypeError, match=r"^certify takes a list of states \(one dict per rank\), not one state$"
    ):
        certify(state())
    with pytest.raises(TypeError, match=r"^states\[0\] must be a dict from state_dict\(\); got "):
        certify([[1]])
    with pytest.raises(TypeError, match=r"got <class 'list'>$"):
        certify([[1]])
    with pytest.raises(ValueError, match=r"before certify, or is not a DataLoader state$"):
        certify([{"version": 2}])
    with pytest.raises(TypeError, match=r"^here must be a list of records; got dict$"):
        check_records({}, "here")
    with pytest.raises(TypeError, match=r"^here\[0\] must be a dict; got int$"):
        check_records([3], "here")
    with pytest.raises(ValueError, match="hexadecimal"):
        check_records([{**rec(range(3)), "digest": "g0"}], "here")  # (valid in base 17)
    assert str(certify([])) == "NOT certified: the states hold no epoch"
