"""What a state records of a dealing and how it resumes (exactbatch.feeds.state_rules):
check_ddp_steps, the elastic rule's refusal of a resume DDP could not step evenly."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from exactbatch import DataLoader
from exactbatch.feeds import state_rules
from exactbatch.order.digest import Tally, rows_digest


def _state(n, shards, steps=1):
    """An elastic state of ``n`` rows in batches of 10 after ``steps`` batches of each of
    ``shards`` ranks in lockstep (its global_batches_done: shards * steps)."""
    x = np.arange(float(n)).reshape(n, 1)
    states = []
    for s in range(shards):
        loader = DataLoader(x, 10, num_shards=shards, shard_index=s, elastic=True, seed=1)
        it = iter(loader)
        for _ in range(steps):
            next(it)
        states.append(loader.state_dict())
    return x, states[0]


def _resume(x, state, shards, world, **kw):
    """``state`` loaded by rank 0 of ``shards`` under a torch.distributed ``world``."""
    loader = DataLoader(x, 10, num_shards=shards, shard_index=0, elastic=True, seed=1, **kw)
    return _load_under(loader, state, world)


def _load_under(loader, state, world):
    """``loader`` after ``load_state_dict(state)`` under a torch.distributed ``world``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(state_rules, "torch_world_size", lambda: world)
        loader.load_state_dict(state)
    return loader


def test_a_resume_ddp_would_step_unevenly_this_epoch_is_refused_naming_the_steps():
    """10 global batches, 3 handed out: 7 left, at 3 ranks 3, 2 and 2 steps."""
    x, state = _state(100, 3)
    assert state["global_batches_done"] == 3
    with pytest.raises(ValueError) as e:
        _resume(x, state, 3, 3)
    assert str(e.value) == (
        "this elastic state resumes at global batch 3 of 10: the rest of this epoch has 7 "
        "global batches, which 3 ranks under torch.distributed would take as 3 and 2 steps, "
        "and DDP's all-reduces would fall out of step (a hang). Build the loader with "
        "even_batches=True (every rank the smallest share; the few batches past it are left "
        'out) or even_batches="pad" (every row, the last batches padded and masked), or '
        "resume at a world size that divides 7 and 10"
    )
    with pytest.raises(ValueError, match=r"7 global batches, .* 2 ranks .* as 4 and 3 steps"):
        _resume(x, state, 2, 2)


def test_a_resume_ddp_would_step_unevenly_in_later_epochs_is_refused():
    """9 global batches, 1 handed out: 8 left split evenly at 2 ranks, but every later
    epoch's 9 would not (5 and 4 steps)."""
    x, state = _state(90, 1)
    assert state["global_batches_done"] == 1
    with pytest.raises(ValueError, match=r"^this elastic state resumes at global batch 1 of "
                       r"9: every later epoch has 9 global batches, which 2 ranks .* as 5 and "
                       r"4 steps, .* divides 9 and 9$"):  # fmt: skip
        _resume(x, state, 2, 2)


@pytest.mark.parametrize(
    "shards,world,kw",
    [
        (2, 2, {}),  # 6 left and 10 an epoch: even at 2 ranks
        (3, 3, {"even_batches": True}),  # every rank the smallest share
        (3, 3, {"even_batches": "pad"}),  # every rank the largest, padded
        (3, None, {}),  # no torch.distributed
        (1, 1, {}),  # one rank steps alone
        (3, 4, {}),  # a world that is not these ranks' (the loader's own shard count)
    ],
)
def test_a_resume_ddp_steps_evenly_or_that_no_ddp_runs_is_let_through(shards, world, kw):
    x, state = _state(100, 2, steps=2)  # 4 handed out
    if shards == 2:
        assert state["global_batches_done"] == 4
    _resume(x, state, shards, world, **kw)
    if shards != 2:
        x3, state3 = _state(100, 3)  # 7 left: uneven at 3 ranks
        _resume(x3, state3, shards, world, **kw)


def _ranges_state(n, ranks, steps, **kw):
    """An elastic="ranges" state of ``n`` rows (chunks of 250, batches of 64) after
    ``steps`` lockstep steps of ``ranks`` ranks (rank 0's)."""
    x = np.arange(float(n)).reshape(n, 1)
    source = [x[a : a + 250] for a in range(0, n, 250)]
    loaders = [
        DataLoader(source, 64, num_shards=ranks, shard_index=r, elastic="ranges", seed=3, **kw)
        for r in range(ranks)
    ]
    its = [iter(ld) for ld in loaders]
    for _ in range(steps):
        for it in its:
            next(it)
    return source, loaders[0].state_dict()


def _ranges_resume(source, state, shards, world, **kw):
    loader = DataLoader(source, 64, num_shards=shards, elastic="ranges", seed=3, **kw)
    _load_under(loader, state, world)


def test_a_ranges_resume_ddp_would_step_unevenly_is_refused_naming_the_steps():
    """2178 rows less 2 steps of 2 ranks: 1922 rows, 640 and 641 a rank at 3 ranks (10
    and 11 steps); 1922 rows less 1 step of 2 ranks: 1794, 598 a rank (10 steps), but a
    later epoch's 1922 gives 10 and 11."""
    source, state = _ranges_state(2178, 2, 2)
    with pytest.raises(ValueError) as e:
        _ranges_resume(source, state, 3, 3)
    assert str(e.value) == (
        'elastic="ranges" at 3 ranks under torch.distributed: the rest of this epoch gives '
        "the ranks 10 and 11 steps, and DDP's all-reduces would fall out of step (a hang). "
        'Build the loader with even_batches=True or even_batches="pad"'
    )
    source, state = _ranges_state(1922, 2, 1)
    with pytest.raises(ValueError, match=r": every later epoch gives the ranks 10 and 11 "):
        _ranges_resume(source, state, 3, 3)
    evened = [{"even_batches": True}, {"even_batches": "pad"}]
    for world, kw in [(None, {}), (4, {}), (3, evened[0]), (3, evened[1])]:
        _ranges_resume(source, state, 3, world, **kw)  # no DDP, another world, or evened
    _ranges_resume(source, state, 1, 1)  # one rank steps alone
    source, state = _ranges_state(1920, 2, 1)  # 640 a rank, now and later
    _ranges_resume(source, state, 3, 3)


# -- RangesRule's own answers, asked directly (the records and the standing ask them) -----


class _Epoch:
    """An epoch as a rule asks it: whether this rank has seen its end."""

    def __init__(self, exhausted):
        self._exhausted = exhausted

    def exhausted(self):
        return self._exhausted


def _ranges_feed(n=1922, count=3, index=0, **kw):
    x = np.arange(float(n)).reshape(n, 1)
    loader = DataLoader(x, 64, num_shards=count, shard_index=index, elastic="ranges", **kw)
    return loader._feed


def test_a_ranges_epoch_rolls_when_the_longest_share_is_done_or_an_even_rank_sees_its_end():
    """1922 rows at 3 ranks: shares of 640, 641, 641 rows, 10, 11, 11 steps: the epoch is
    over after 11 steps (10 with even_batches=True, or at once when this rank saw its
    end); resumed after a segment of 2 ranks' 2 steps (1666 rows left: 555, 555, 556,
    9 steps each) after 9. A rank's end seen does not end it without even_batches."""
    feed = _ranges_feed()
    rule, going, ended = feed.rule, _Epoch(False), _Epoch(True)
    assert [rule.rolled(feed, going, (), d) for d in (10, 11, 12)] == [False, True, True]
    assert rule.rolled(feed, ended, (), 10) is False
    assert [rule.rolled(feed, going, ((2, 2),), d) for d in (8, 9)] == [False, True]
    even = _ranges_feed(even_batches=True)
    assert [even.rule.rolled(even, going, (), d) for d in (9, 10)] == [False, True]
    assert even.rule.rolled(even, ended, (), 0) is True


def test_a_ranges_records_segment_goes_on_at_its_own_count_less_this_ranks_steps():
    """A record's segment: at the state's last count, the state's segment goes on, its
    hand-outs counted from the ledger less this rank's own steps of it; at another
    count (or none before), a segment of its own from the ledger as it is."""
    n, b = 1922, 64
    x = np.arange(float(n)).reshape(n, 1)
    feed = _ranges_feed(seed=5)
    ledger = Tally()
    ledger.add(1000, 12345)
    own = DataLoader(x, b, num_shards=3, shard_index=0, elastic="ranges", seed=5)
    mine = Tally()
    it = iter(own)
    for _ in range(2):
        ids = next(it)[0][:, 0].astype(np.int64)
        mine.add(len(ids), rows_digest(ids))
    at = SimpleNamespace(seed=5, epoch=0, first=((3, 2),), done=2, ledger=ledger)
    base, first, continued = feed.rule.segment(at, feed)
    want = ledger.minus(mine)
    assert (base.rows, base.digest, first, continued) == (want.rows, want.digest, ((3, 2),), True)
    for segments in ((), ((2, 2),)):
        at = SimpleNamespace(seed=5, epoch=0, first=segments, done=2, ledger=ledger)
        base, first, continued = feed.rule.segment(at, feed)
        assert (base.rows, base.digest, first, continued) == (1000, 12345, segments, False)
        assert base is not ledger


def test_a_ranges_records_start_is_the_rows_handed_out_before_its_segment():
    """Every rank's steps of the segments before (at this count, 3, the last one
    named at 3 is the segment in progress)."""
    feed = _ranges_feed()
    assert feed.rule.start_of(feed, ()) == 0
    assert feed.rule.start_of(feed, ((2, 2),)) == 2 * 2 * 64
    assert feed.rule.start_of(feed, ((2, 2), (3, 1))) == 2 * 2 * 64  # (its own goes on)
    assert feed.rule.start_of(feed, ((2, 2), (4, 1))) == 2 * 2 * 64 + 4 * 64


def test_rows_of_a_feed_that_does_not_know_them_is_a_type_error():
    with pytest.raises(TypeError) as e:
        state_rules.rows_of(SimpleNamespace(total_size=None))
    assert str(e.value) == "a feed dealt by ranges knows its rows; got None"
    with pytest.raises(TypeError) as e:
        state_rules.global_batches(SimpleNamespace(total_batches=None))
    assert str(e.value) == "an elastic feed's epoch is cut into global batches; got None"


def test_a_ranges_state_with_bad_segments_or_pending_batches_is_refused_naming_them():
    source, state = _ranges_state(1922, 2, 1)
    with pytest.raises(TypeError) as e:
        _ranges_resume(source, {**state, "segments": "no"}, 3, None)
    assert str(e.value) == "state['segments'] must be a list of [num_shards, steps]; got 'no'"
    with pytest.raises(ValueError) as e:
        _ranges_resume(source, {**state, "pending": [0]}, 3, None)
    assert str(e.value) == (
        "this elastic state lists batches [0] as not handed out below batches handed out "
        "(a batch whose read had failed waited to be read again), so its position is no "
        "global batch another shard count could resume at; take the state after that "
        "batch is handed out (a state waits for reads in flight, never for a failed one)"
    )


def test_a_ranges_resume_at_two_ranks_is_checked_and_drop_last_counts_the_steps():
    """1281 rows at 2 ranks: shares of 640 and 641 rows, 10 and 11 steps: refused under
    DDP at a world of 2; with drop_last both ranks take 10 steps: let through."""
    source, state = _ranges_state(1281, 2, 0)
    with pytest.raises(ValueError, match=r"^elastic=\"ranges\" at 2 ranks .* 10 and 11 steps"):
        _ranges_resume(source, state, 2, 2)
    source, state = _ranges_state(1281, 2, 0, drop_last=True)
    _ranges_resume(source, state, 2, 2, drop_last=True)


def test_an_elastic_epoch_rolls_when_every_global_batch_is_out_or_an_even_rank_sees_its_end():
    """10 global batches at 3 ranks: over when 3 * done reaches them from ``first`` (or
    with even_batches=True when this rank has seen its end); a record's segment is its
    own from the global batch it resumes at."""
    x = np.arange(100.0).reshape(100, 1)
    feed = DataLoader(x, 10, num_shards=3, elastic=True)._feed
    going, ended = _Epoch(False), _Epoch(True)
    assert [feed.rule.rolled(feed, going, 4, d) for d in (1, 2)] == [False, True]
    assert feed.rule.rolled(feed, ended, 0, 0) is False
    even = DataLoader(x, 10, num_shards=3, elastic=True, even_batches=True)._feed
    assert even.rule.rolled(even, ended, 0, 0) is True
    ledger = Tally()
    ledger.add(30, 99)
    at = SimpleNamespace(seed=0, epoch=0, first=4, done=1, ledger=ledger)
    base, first, continued = feed.rule.segment(at, feed)
    assert (base.rows, base.digest, first, continued) == (30, 99, 4, False)
    assert base is not ledger
