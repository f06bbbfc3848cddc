"""The fit helpers' default schedule and convergence verdict, unit by unit (NumPy only):
the tail's step scales with the fit's length and sqrt(N / B) within its bounds, short
fits keep a step that moves, and the verdict tells a still fit from a travelling one and
from one too noisy to trust, with its false alarms at most 5% by construction."""

import math

import numpy as np
import pytest

from exactbatch.adapters.convergence import (
    ALPHA,
    ERROR_MAX,
    PARTS,
    THRESHOLD,
    judge,
    parts,
    warn_if_moving,
)
from exactbatch.adapters.schedule import (
    CAP,
    FLOOR,
    RELAX,
    SPREAD,
    Plan,
    pick,
    pick_apart,
    windows,
)
from exactbatch.errors import ConvergenceWarning

# -- the schedule ------------------------------------------------------------------------


def test_windows_are_a_fifth_each_in_whole_epochs():
    assert windows(1000, None) == (600, 200)
    assert windows(1000, 30) == (640, 180)  # 200 rounded down to 6 epochs of 30
    assert windows(1000, 300) == (600, 200)  # a window shorter than an epoch: as is
    assert windows(4, None) == (4, 0)


def test_the_tail_step_relaxes_within_a_part_whatever_the_fit_length():
    """RELAX / (steps of a part), the part a quarter of a fifth of the steps: 10x the
    steps, a tenth of the step - not a hundredth of lr0 whatever the length."""
    for steps in (2000, 20_000):
        plan = Plan(steps, None)
        part = steps // 5 // PARTS
        assert plan.part == part
        assert plan.tail_step(0.1) == pytest.approx(RELAX / part)
    assert Plan(20_000, None).tail_step(0.1) == pytest.approx(Plan(2000, None).tail_step(0.1) / 10)


def test_the_tail_step_grows_with_sqrt_of_the_batches_an_epoch():
    """A log-sd's gradient carries the batch's noise, sqrt(N / B) times its pull: the
    tail's step grows by sqrt(N / B) / 2 once that is above 1 (within the bounds)."""
    small, large = Plan(40_000, 4), Plan(400_000, 400)
    assert small.tail_step(0.3) == pytest.approx(RELAX / small.part)  # sqrt(4) / 2 = 1
    assert large.tail_step(0.3) == pytest.approx(RELAX * math.sqrt(400) / 2 / large.part)


def test_the_tail_step_bounds_the_jitters_bias():
    """At most SPREAD / sqrt(N / B): the iterate's jitter shifts a nonlinear likelihood's
    mean by about step * sqrt(N / B) posterior sds (N = 10k, B = 64, 5000 steps: the step
    was lr0 / 3, a noise sd 0.74 sd off, judged converged)."""
    plan = Plan(5000, 156)
    assert plan.tail_step(0.1) == pytest.approx(SPREAD / math.sqrt(156))
    assert plan.tail_step(0.1) < RELAX * plan.noise / plan.part and plan.tail_step(0.1) < 0.1 / CAP
    assert Plan(5000, None).tail_step(0.1) == pytest.approx(RELAX / Plan(5000, None).part)
    # the floor still holds: a step that moves at all
    assert Plan(5000, 10**9).tail_step(0.1) == pytest.approx(0.1 / FLOOR)


def test_the_tail_step_stays_within_its_bounds():
    """At most lr0 / CAP (a short fit keeps a step that moves: 300 steps no longer end
    at a hundredth of lr0, frozen), at least lr0 / FLOOR."""
    short = Plan(300, 1)
    assert short.tail_step(0.3) == pytest.approx(0.3 / CAP)
    assert short.step_size(0.3, 299) == pytest.approx(0.3 / CAP)
    huge = Plan(10_000_000, None)
    assert huge.tail_step(0.3) == pytest.approx(0.3 / FLOOR)


def test_the_step_decays_linearly_from_lr0_to_the_tail_step():
    plan = Plan(1000, None)
    lr0, end = 0.1, plan.tail_step(0.1)
    assert plan.pilot == 50 and plan.tail == 600
    assert plan.step_size(lr0, 50) == pytest.approx(lr0)
    assert plan.step_size(lr0, 325) == pytest.approx((lr0 + end) / 2)
    assert plan.step_size(lr0, 599) == pytest.approx(lr0 + 549 / 550 * (end - lr0))
    assert plan.step_size(lr0, 600) == plan.step_size(lr0, 999) == pytest.approx(end)


def test_pick_keeps_the_largest_stable_step():
    falling = np.linspace(10, 1, 20)
    rows = np.stack([falling + 5, falling, falling - 0.5, falling + 1], 1)  # best: 2
    assert pick(rows) == 1  # the next larger is finite and falling
    rows[:, 1] = np.linspace(1, 10, 20)  # rising: not settling
    assert pick(rows) == 2
    rows[-1, 2] = np.inf
    assert pick(rows) == 3 or pick(rows) == 1
    assert pick(np.full((4, 4), np.nan)) == 3
    assert pick_apart([[5, 4], [3, 2], [3, 1], [np.inf, 1]]) == 1


# -- the verdict -------------------------------------------------------------------------


def _parts(values, sds=None):
    """judge's parts from (2 * PARTS, latents) posterior means (sds all 1 unless given)."""
    values = np.asarray(values, dtype=np.float64)
    sds = np.ones_like(values) if sds is None else np.asarray(sds, dtype=np.float64)
    return [{"w": (values[k], sds[k])} for k in range(2 * PARTS)]


def _still(rng, latents, scale):
    return rng.standard_normal((2 * PARTS, latents)) * scale


def test_a_still_fit_is_converged_and_a_travelling_one_is_not():
    rng = np.random.default_rng(0)
    noise = _still(rng, 5, 0.01)
    still = judge(_parts(noise), np.zeros(100), 50)
    assert still.converged and still.moving is False
    assert still.error == pytest.approx(still.error)  # finite
    ramp = np.linspace(0, 0.5, 2 * PARTS)[:, None] + noise
    moving = judge(_parts(ramp), np.zeros(100), 50)
    assert moving.moving and not moving.converged
    assert (
        moving.where
        == "w[" + str(int(np.argmax(np.abs(ramp[4:].mean(0) - ramp[:4].mean(0))))) + "] mean"
    )
    # the movement is the change of the windows' means, in the last window's sds
    sds = np.full((2 * PARTS, 5), 2.0)
    halved = judge(_parts(ramp, sds), np.zeros(100), 50)
    assert halved.movement == pytest.approx(moving.movement / 2)


def test_a_noisy_fit_is_not_converged_though_it_does_not_drift():
    """Subtracting the noise from the movement read every noisy mean as converged: the
    tail average's standard error must itself be small."""
    rng = np.random.default_rng(1)
    noisy = judge(_parts(_still(rng, 5, 1.0)), np.zeros(100), 50)
    assert noisy.moving is False and noisy.error > ERROR_MAX and not noisy.converged
    with pytest.warns(ConvergenceWarning, match=r"uncertain by .* posterior sd"):
        warn_if_moving(noisy)


def test_the_error_is_the_standard_error_of_the_tails_average():
    """Parts that alternate (no lag-1 correlation to widen for) about their mean: the
    error is their sd over sqrt(2 * PARTS)."""
    alt = np.array([1.0, -1, 1, -1, -1, 1, -1, 1])[:, None] * 0.1
    v = judge(_parts(np.c_[alt, alt]), np.zeros(100), 50)
    want = np.sqrt((alt**2).sum() / (2 * PARTS - 1)) / np.sqrt(2 * PARTS)
    assert v.error == pytest.approx(want)


def test_parts_that_follow_one_another_widen_the_error():
    """A slow wander (the parts correlated): the error grows by sqrt((1 + r) / (1 - r))."""
    rng = np.random.default_rng(2)
    walk = np.cumsum(rng.standard_normal((2 * PARTS, 9)), axis=0) * 0.05
    wander = judge(_parts(walk), np.zeros(100), 50)
    about = walk - walk.mean(0)
    plain = (np.sqrt((about**2).sum(0) / (2 * PARTS - 1)) / np.sqrt(2 * PARTS)).max()
    assert wander.error > plain * 1.2


def test_a_latent_gone_nan_is_not_converged():
    values = np.zeros((2 * PARTS, 3))
    values[-1, 1] = np.nan
    v = judge(_parts(values), np.zeros(100), 50)
    assert not v.converged and v.where == "w[1] mean"


def test_too_short_a_fit_is_not_judged():
    v = judge([], np.zeros(3), 0)
    assert v.converged is None and v.moving is None and "not judged" in str(v)
    assert parts(4, None) == ([], 0)
    spans, width = parts(1000, None)
    assert width == 200 and spans[0] == (600, 650) and spans[-1] == (950, 1000)


@pytest.mark.parametrize("latents", [1, 4, 30])
def test_false_alarms_are_at_most_alpha_by_construction(latents):
    """Still fits (parts independent, equal noise about the optimum; 400 seeds): the
    drift test passes z = the Bonferroni normal quantile over every mean and sd judged,
    so at most ALPHA of them drift (measured: 0-2.5%), whatever the number of latents."""
    rng = np.random.default_rng(latents)
    alarms = 0
    for _ in range(400):
        means = _still(rng, latents, 0.02)
        sds = 1 + _still(rng, latents, 0.02)
        v = judge(_parts(means, sds), np.zeros(100), 50)
        alarms += bool(v.moving)
    assert alarms / 400 <= ALPHA
    assert v.z == pytest.approx(
        __import__("statistics").NormalDist().inv_cdf(1 - ALPHA / (4 * latents))
    )


def test_the_threshold_is_in_posterior_sds():
    """A drift just under THRESHOLD passes; one above it does not (a straight line: no
    noise about it)."""
    for move, moving in ((THRESHOLD * 0.9, False), (THRESHOLD * 1.1, True)):
        line = np.arange(2 * PARTS)[:, None] * move / PARTS + np.zeros(2)
        v = judge(_parts(line), np.zeros(100), 50)
        assert v.movement == pytest.approx(move) and v.moving is moving


def test_the_movement_is_in_the_last_windows_sds_and_the_noise_is_its_standard_error():
    """A fit whose sds narrowed between the windows: the movement is read in the last
    window's sds (the posterior the fit returns); the noise is the residual sd about a
    straight line through the parts times sqrt(2 / PARTS) (the standard error of a
    difference of two means of PARTS parts)."""
    ramp = np.arange(2 * PARTS)[:, None] * 0.1 + np.zeros(2)
    sds = np.r_[np.full((PARTS, 2), 1.1), np.full((PARTS, 2), 1.0)]
    v = judge(_parts(ramp, sds), np.zeros(100), 50)
    assert v.movement == pytest.approx(PARTS * 0.1)  # in the last window's sds (1)
    wiggle = np.array([1.0, -1, -1, 1, 1, -1, -1, 1])[:, None] * 0.1 + np.zeros(2)
    w = judge(_parts(wiggle, 1 + 5 * wiggle), np.zeros(100), 50)  # the sds noisier yet
    assert w.where.endswith("mean")
    t = np.arange(2 * PARTS) - (2 * PARTS - 1) / 2
    slope = (t * wiggle[:, 0]).sum() / (t**2).sum()
    resid = wiggle[:, 0] - wiggle[:, 0].mean() - slope * t
    sigma = np.sqrt((resid**2).sum() / (2 * PARTS - 2))
    assert w.noise == pytest.approx(sigma * np.sqrt(2 / PARTS))


def test_an_error_at_its_bound_is_converged():
    from exactbatch.adapters.convergence import Convergence

    at = Convergence(0.0, 0.0, 0.0, "w mean", 50, None, None, error=ERROR_MAX)
    assert at.converged and not at.moving
    over = Convergence(0.0, 0.0, 0.0, "w mean", 50, None, None, error=ERROR_MAX * 1.01)
    assert over.converged is False
