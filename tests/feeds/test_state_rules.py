"""What a state records of a dealing and how it resumes (exactbatch.feeds.state_rules):
check_ddp_steps, the elastic rule's refusal of a resume DDP could not step evenly."""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch import DataLoader
from exactbatch.feeds import state_rules


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


def _ranges_state(n, ranks, steps):
    """An elastic="ranges" state of ``n`` rows (chunks of 250, batches of 64) after
    ``steps`` lockstep steps of ``ranks`` ranks (rank 0's)."""
    x = np.arange(float(n)).reshape(n, 1)
    source = [x[a : a + 250] for a in range(0, n, 250)]
    loaders = [
        DataLoader(source, 64, num_shards=ranks, shard_index=r, elastic="ranges", seed=3)
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
