"""The fits' run loops without a fit: PyMC's schedule callback (the pilot, the step sizes,
the restarts, the tail's switches, the verdict's sums and the estimate put back) driven
step by step with a stand-in approximation, and NumPyro's run's bookkeeping (its spans,
its sums read back, the tail's mean, the estimate chosen). Each runs in a second or less:
these are the `samplers` mutation target's tests of that code (the end-to-end fits,
marked `fit`, are too slow to run once a mutant; see docs/development.md)."""

import math

import numpy as np
import pytest

from exactbatch.adapters import pymc_schedule as ps


def test_sums_merge_and_means_of_the_iterates():
    a = ps._add(None, [np.array([1, 2]), np.array([3.0])])
    assert a[1] == 1 and a[0][0].dtype == np.float64 and a[0][0].tolist() == [1.0, 2.0]
    assert ps._add(a, [np.array([3.0, 4.0]), np.array([5.0])]) is a
    assert a[1] == 2 and a[0][0].tolist() == [4.0, 6.0] and a[0][1].tolist() == [8.0]
    b = ps._add(None, [np.array([2.0, 0.0]), np.array([-2.0])])
    merged = ps._merge([a, b])
    assert merged[1] == 3 and merged[0][0].tolist() == [6.0, 6.0] and merged[0][1].tolist() == [6.0]
    assert a[1] == 2 and a[0][0].tolist() == [4.0, 6.0]  # the parts left as they were
    assert [m.tolist() for m in ps._mean(merged)] == [[2.0, 2.0], [2.0]]
    assert ps._mean(None) is None
    with pytest.raises(ValueError):
        ps._add(a, [np.zeros(2)])  # one array per parameter


# -- PyMC: pymc_schedule.Run, the pm.fit callback, driven step by step ----------------------


class _Group:
    def __init__(self, ordering):
        self.ordering = ordering


class _Approx:
    """What Run reads of a PyMC approximation: its parameters (shared variables), and for
    the verdict its mean and sd (expressions of them) and each latent's slice."""

    def __init__(self, mu, dtype=np.float64):
        import pytensor

        self.mu = pytensor.shared(np.asarray(mu, dtype=dtype), name="mu")
        self.rho = pytensor.shared(np.zeros(len(mu), dtype=dtype), name="rho")
        self.params = [self.mu, self.rho]
        self.mean, self.std = self.mu * 1.0, 2.0 + self.rho
        self.groups = [_Group({"a": ("a", slice(0, 1), (), "float64"),
                               "b": ("b", slice(1, 2), (), "float64")})]  # fmt: skip


def _opt_with_state(run, approx):
    """The schedule's Adam with its state made (its step graph built, not compiled)."""
    import pytensor

    grads = [pytensor.shared(np.zeros_like(p.get_value())) for p in approx.params]
    run.optimizer(grads, approx.params)
    return run.optimizer


def _set_moments(opt, value):
    opt.load([np.full_like(v, value) for v in opt.save()])


def test_pymc_pilot_runs_each_candidate_from_the_start_and_keeps_the_best():
    pytest.importorskip("pytensor")
    from exactbatch.adapters.schedule import CANDIDATES, Plan

    run = ps.Run(100, 10, default=True, average=False, rows=200)
    assert run.pilot_each == 2 and run.plan.pilot == 8 and run.plan.tail == 55
    assert run.plan.restarts == Plan(100, 10, pilot=8, rows=200).restarts == (8, 31, 55)
    approx = _Approx([0.0, 0.0])
    opt = _opt_with_state(run, approx)
    assert float(opt.lr.get_value()) == CANDIDATES[0]
    run.remember(approx)
    assert run.runs == [] and [v.tolist() for v in run.start] == [[0.0, 0.0], [0.0, 0.0]]
    # each candidate c moves mu to 10 c + s; its losses make candidate 2 the best
    pilot_losses = [10, 10, 5, 5, 1, 1, 2, 2]
    losses, lrs, resets = [], [], []
    for s in range(8):
        c = s // 2
        was = [0.0, 0.0] if s % 2 == 0 else [10.0 * c + s - 1] * 2
        assert approx.mu.get_value().tolist() == was
        approx.mu.set_value(np.full(2, 10.0 * c + s))
        _set_moments(opt, c + 1.0)
        losses.append(pilot_losses[s])
        run(approx, np.array(losses), s + 1)
        lrs.append(float(opt.lr.get_value()))
        resets.append(not any(np.any(v) for v in opt.save()))
    assert run.losses == pilot_losses and run.calls == 8
    # a candidate's run ends every pilot_each steps: back to the start, Adam reset, the
    # next step size; the last one ends the pilot: the best candidate's parameters back
    assert lrs[:7] == [CANDIDATES[0], CANDIDATES[1], CANDIDATES[1], CANDIDATES[2],
                       CANDIDATES[2], CANDIDATES[3], CANDIDATES[3]]  # fmt: skip
    assert resets[:7] == [False, True, False, True, False, True, False]
    assert run.lr0 == CANDIDATES[2] and run.runs is None
    assert approx.mu.get_value().tolist() == [25.0, 25.0]  # candidate 2's last step
    assert lrs[7] == pytest.approx(run.plan.step_size(CANDIDATES[2], 8))
    assert resets[7]  # (the pilot's end is the plan's first restart)


def _pilot_done(run, approx, opt):
    """Drive the pilot (8 steps) with candidate 2 the best; the losses so far."""
    run.remember(approx)
    losses = []
    for s, loss in enumerate([10, 10, 5, 5, 1, 1, 2, 2]):
        losses.append(loss)
        run(approx, np.array(losses), s + 1)
    return losses


def test_pymc_schedule_after_the_pilot_decays_restarts_and_switches_the_tail_on():
    pytest.importorskip("pytensor")
    from exactbatch.adapters.schedule import TAIL_DRAWS

    run = ps.Run(100, 10, default=True, average=False, rows=200)
    kwargs = {}
    run.share_draws(kwargs)
    assert kwargs["obj_n_mc"] is run.draws and int(run.draws.get_value()) == 1
    assert run.tail_draws == TAIL_DRAWS
    run.cost = 0.1  # the loss's scale (B / N)
    approx = _Approx([0.0, 0.0])
    opt = _opt_with_state(run, approx)
    losses = _pilot_done(run, approx, opt)
    lr0, plan = run.lr0, run.plan
    for s in range(8, 100):
        _set_moments(opt, 1.0)
        losses.append(1.0)
        run(approx, np.array(losses), s + 1)
        want = plan.step_size(lr0, s + 1)
        assert float(opt.lr.get_value()) == pytest.approx(want), s
        zeroed = not any(np.any(v) for v in opt.save())
        assert zeroed == (s + 1 in (31, 55)), s
        tail = s + 1 >= 55
        assert int(run.draws.get_value()) == (TAIL_DRAWS if tail else 1), s
        cap, budget = float(opt.cap.get_value()), float(opt.budget.get_value())
        if tail:
            assert cap == pytest.approx(plan.cap(55) * 0.1) and cap < math.inf
            assert budget == pytest.approx(plan.budget(55) * 0.1) and budget < math.inf
        else:
            assert cap == math.inf and budget == math.inf, s


@pytest.mark.parametrize("num_steps,each", [(40, 1), (150, 3)])
def test_pymc_schedule_of_other_pilot_lengths_and_float32(num_steps, each):
    """Candidates' runs of 1 and 3 steps (a fit of up to 50 steps, of 101 to 150), and a
    float32 model (floatX float32: the step size, cap and budget are set as float32,
    which a float64 value may not be stored into): the same pilot and schedule."""
    pytensor = pytest.importorskip("pytensor")
    from exactbatch.adapters.schedule import CANDIDATES

    with pytensor.config.change_flags(floatX="float32"):
        run = ps.Run(num_steps, 10, default=True, average=False, rows=400)
        assert run.pilot_each == each and run.plan.pilot == 4 * each
        approx = _Approx([0.0, 0.0], dtype=np.float32)
        opt = _opt_with_state(run, approx)
        assert opt.lr.dtype == "float32"
        run.remember(approx)
        # candidate 1's losses the lowest, the others' far above
        pilot = [[9.0] * each, [1.0] * each, [5.0] * each, [7.0] * each]
        losses, lrs = [], []
        for s in range(num_steps):
            c = s // each
            if s < run.plan.pilot:
                approx.mu.set_value(np.full(2, 10.0 * c + s, dtype=np.float32))
            losses.append(pilot[c][s % each] if s < run.plan.pilot else 1.0)
            run(approx, np.array(losses), s + 1)
            lrs.append(float(opt.lr.get_value()))
        lr0 = run.lr0
        assert lr0 == CANDIDATES[1] and run.runs is None
        assert lrs[: 4 * each] == pytest.approx(
            [CANDIDATES[min(3, s // each + ((s + 1) % each == 0))] for s in range(4 * each - 1)]
            + [run.plan.step_size(lr0, 4 * each)]
        )
        assert lrs[-1] == pytest.approx(run.plan.step_size(lr0, num_steps), rel=1e-6)
        assert float(opt.cap.get_value()) == pytest.approx(run.plan.cap(run.plan.tail), rel=1e-6)
        assert float(opt.budget.get_value()) == pytest.approx(run.plan.budget(run.plan.tail))


def test_pymc_plan_and_windows_are_made_with_the_epoch():
    """Epochs of 7 batches: the verdict's windows are whole epochs (14 steps of 100, not
    20), and the schedule's plan is the epoch's (its tail's noise and spread)."""
    pytest.importorskip("pytensor")
    from exactbatch.adapters.schedule import Plan

    run = ps.Run(100, 7, default=True, average=False, rows=500)
    assert run.width == 14 and run.spans[0][0] == 72 and run.spans[-1][1] == 100
    assert vars(run.plan) == vars(Plan(100, 7, pilot=run.plan.pilot, rows=500))
    assert run.plan.spread != Plan(100, None, pilot=run.plan.pilot, rows=500).spread


def test_pymc_draws_shared_keep_the_callers_and_raise_them_in_the_tail():
    pytest.importorskip("pytensor")
    run = ps.Run(100, None, default=True, average=False)
    kwargs = {"obj_n_mc": 9}
    run.share_draws(kwargs)
    assert int(kwargs["obj_n_mc"].get_value()) == 9 and run.tail_draws == 9
    assert kwargs["obj_n_mc"].name == "obj_n_mc"
    kwargs = {"obj_n_mc": 2}
    run.share_draws(kwargs)
    from exactbatch.adapters.schedule import TAIL_DRAWS

    assert int(kwargs["obj_n_mc"].get_value()) == 2 and run.tail_draws == TAIL_DRAWS > 2


def test_pymc_sums_of_the_verdicts_parts_and_the_estimate_put_back():
    """With a still fit (mu constant through the windows but for a zero-mean wiggle)
    the verdict finds no drift and the mean of both windows is put back: mu's mean
    over steps 60..99 exactly."""
    pytest.importorskip("pytensor")
    from exactbatch.adapters.convergence import LAST, TAIL

    run = ps.Run(100, 10, default=False, average=False)
    assert run.optimizer is None and run.avg_start is None and run.plan.pilot == 8
    approx = _Approx([0.0, 0.0])
    wiggle = [0.5, -0.5]
    for s in range(100):
        approx.mu.set_value(np.array([3.0 + wiggle[s % 2], 7.0 + s * (s < 60)]))
        run(approx, np.array([1.0] * (s + 1)), s + 1)
    assert [s[1] for s in run.sums] == [5] * 8  # steps 60..99 in parts of 5
    assert run.sums[0][0][0].tolist() == pytest.approx([15.0 + 0.5, 35.0])
    assert run.sums[0][0][1].tolist() == [0.0, 0.0]
    assert run.average is None
    found = run.finish(approx)
    assert found.returned == LAST  # not the default schedule: the last iterate
    assert found.error_floor == 0.0 and found.sd_floor == 0.0  # (no epoch: no floors)
    assert approx.mu.get_value().tolist() == [2.5, 7.0]  # step 99's
    run2 = ps.Run(100, 10, default=True, average=False)
    run2.share_draws({})
    approx2 = _Approx([0.0, 0.0])
    for s in range(100):
        approx2.mu.set_value(np.array([3.0 + wiggle[s % 2], 7.0]))
        run2(approx2, np.array([1.0] * (s + 1)), s + 1)
    found = run2.finish(approx2)
    assert found.returned == TAIL and found.moving is False
    assert approx2.mu.get_value().tolist() == pytest.approx([3.0, 7.0])
    assert found.window == 20
    # with the schedule, the floors of the epoch's noise and of the tail's draws
    from exactbatch.adapters.convergence import MEANS_FLOOR, _sd_floor
    from exactbatch.adapters.schedule import TAIL_DRAWS

    assert found.error_floor == MEANS_FLOOR * math.sqrt(10 / 20)
    assert found.sd_floor == _sd_floor(10, 20, TAIL_DRAWS) != _sd_floor(10, 20, 1)


def test_pymc_a_travelling_fit_returns_its_last_windows_mean():
    pytest.importorskip("pytensor")
    from exactbatch.adapters.convergence import LAST_WINDOW

    run = ps.Run(100, 10, default=True, average=False)
    approx = _Approx([0.0, 0.0])
    for s in range(100):
        approx.mu.set_value(np.array([s * 1.0, 0.0]))
        run(approx, np.array([1.0] * (s + 1)), s + 1)
    found = run.finish(approx)
    assert found.returned == LAST_WINDOW and found.moving
    assert approx.mu.get_value().tolist() == pytest.approx([89.5, 0.0])  # steps 80..99
    assert approx.mu.get_value().dtype == np.float64
    # the objective's draws never shared (a stand-in for pm.fit): one draw a step
    from exactbatch.adapters.convergence import _sd_floor

    assert found.sd_floor == _sd_floor(10, 20, 1)
    # a float32 guide gets the window's (float64) mean in its own dtype
    run = ps.Run(100, 10, default=True, average=False)
    approx = _Approx([0.0, 0.0], dtype=np.float32)
    for s in range(100):
        approx.mu.set_value(np.array([s * 1.0, 0.0], dtype=np.float32))
        run(approx, np.array([1.0] * (s + 1)), s + 1)
    assert run.finish(approx).returned == LAST_WINDOW
    assert approx.mu.get_value().dtype == np.float32
    assert approx.mu.get_value().tolist() == [89.5, 0.0]


def test_pymc_the_last_epochs_average():
    pytest.importorskip("pytensor")
    from exactbatch.adapters.convergence import LAST_EPOCH

    run = ps.Run(50, 10, default=False, average=True)
    assert run.avg_start == 40
    approx = _Approx([0.0, 0.0])
    for s in range(50):
        approx.mu.set_value(np.array([s * 1.0, 1.0]))
        run(approx, np.array([1.0] * (s + 1)), s + 1)
    assert run.average[1] == 10
    assert run.finish(approx).returned == LAST_EPOCH
    assert approx.mu.get_value().tolist() == pytest.approx([44.5, 1.0])
    # an epoch of unknown length: from the last epoch's start, marked by new_epoch
    run = ps.Run(50, None, default=True, average=True)
    assert run.avg_start == run.plan.pilot == 4
    for s in range(50):
        if s in (20, 35):
            run.new_epoch()
        approx.mu.set_value(np.array([s * 1.0, 1.0]))
        run(approx, np.array([1.0] * (s + 1)), s + 1)
    assert run.avg_start == 35 and run.average[1] == 15
    run.finish(approx)
    assert approx.mu.get_value().tolist() == pytest.approx([42.0, 1.0])
    # without the schedule (no pilot) and no epoch marked: every step, the first included
    run = ps.Run(50, None, default=False, average=True)
    assert run.avg_start == 0
    for s in range(50):
        approx.mu.set_value(np.array([s * 1.0, 1.0]))
        run(approx, np.array([1.0] * (s + 1)), s + 1)
    assert run.average[1] == 50
    run.finish(approx)
    assert approx.mu.get_value().tolist() == pytest.approx([24.5, 1.0])
    # no average asked: new_epoch changes nothing
    run = ps.Run(50, None, default=False, average=False)
    run.calls = 30
    run.new_epoch()
    assert run.avg_start is None
    # an epoch known: new_epoch changes nothing either
    run = ps.Run(50, 10, default=False, average=True)
    run.calls = 45
    run.new_epoch()
    assert run.avg_start == 40


def test_pymc_callback_of_a_stand_in_and_a_verdict_without_parameters():
    run = ps.Run(20, None, default=False, average=True)
    run(None, None, 1)
    run(None, np.array([]), 2)
    run(None, np.array([3.0, 2.5]), 3)
    assert run.calls == 3 and run.losses == [2.5] and run.average is None
    found = run.finish(object())
    assert found.drift is None and found.window == 0
    assert str(found) == "not judged: the approximation has no parameters to average"


def test_pymc_a_fit_too_short_for_the_windows_is_not_judged_and_keeps_its_last_iterate():
    pytest.importorskip("pytensor")
    from exactbatch.adapters.convergence import LAST, TOO_SHORT

    run = ps.Run(3, None, default=True, average=False)
    approx = _Approx([0.0, 0.0])
    for s in range(3):
        approx.mu.set_value(np.array([s * 1.0, 1.0]))
        run(approx, np.array([1.0] * (s + 1)), s + 1)
    assert run.width == 0
    found = run.finish(approx)
    assert found.drift is None and found.window == 0 and found.returned == LAST
    assert str(found) == f"not judged: {TOO_SHORT}"
    assert approx.mu.get_value().tolist() == [2.0, 1.0]


def test_pymc_verdict_needs_a_mean_and_every_part():
    pytest.importorskip("pytensor")
    approx = _Approx([1.0, 2.0])
    parts = [[np.array([1.0, 2.0]), np.array([0.0, 0.0])]] * 8
    assert ps._verdict(object(), parts, [1.0] * 40, 20) is None  # no mean or sd
    assert ps._verdict(approx, [*parts[:7], None], [1.0] * 40, 20) is None
    found = ps._verdict(approx, parts, [1.0] * 40, 20)
    assert found.moving is False and found.window == 20
    assert approx.mu.get_value().tolist() == [1.0, 2.0]  # the last iterate back


def test_pymc_verdict_of_a_float32_guide_judges_its_moments_in_float64():
    """A float32 guide's parameters take each part's float64 mean cast to their dtype, and
    its moments are judged (as float64), with the epoch and the tail's draws: the verdict
    is judge's on the float32 moments made float64, figure for figure. (A mean of 1000
    posterior sds moves by fractions of an sd: in float32 that is rounded away.)"""
    pytest.importorskip("pytensor")
    from dataclasses import astuple

    from exactbatch.adapters.convergence import MEANS_FLOOR, _sd_floor, judge

    approx = _Approx([1.0, 2.0], dtype=np.float32)
    mus = [np.array([1000.0 + 0.0123 * k * k, -3.0 + 0.37 * (k % 3)]) for k in range(8)]
    rhos = [np.array([-1.999 + 1e-4 * k, 0.5 - 0.01 * k]) for k in range(8)]
    losses = [float(k % 7) for k in range(40)]
    parts = [[m, r] for m, r in zip(mus, rhos, strict=True)]
    found = ps._verdict(approx, parts, losses, 20, 10, 3)
    assert approx.mu.get_value().dtype == np.float32
    assert approx.mu.get_value().tolist() == [1.0, 2.0]  # the last iterate back
    expected = []
    for m, r in zip(mus, rhos, strict=True):
        mean = np.float32(m).astype(np.float64)
        sd = (np.float32(2.0) + np.float32(r)).astype(np.float64)
        expected.append({"a": (mean[0:1], sd[0:1]), "b": (mean[1:2], sd[1:2])})
    np.testing.assert_equal(astuple(found), astuple(judge(expected, losses, 20, 10, 3)))
    assert found.error_floor == MEANS_FLOOR * math.sqrt(10 / 20)
    assert found.sd_floor == _sd_floor(10, 20, 3) != _sd_floor(10, 20, 1)
    # the tail's draws: 1 unless told
    once = ps._verdict(approx, parts, losses, 20, 10)
    assert once.sd_floor == _sd_floor(10, 20, 1)


# -- NumPyro: numpyro_run.Run with a stand-in SVI (jitted, but a few operations) ----------


class _Bar:
    def __init__(self, show):
        self.show, self.n, self.postfix = show, 0, []

    def update(self, n):
        self.n += n

    def set_postfix(self, *, loss, refresh):
        self.postfix.append((self.n, loss, refresh))


def _svi(jnp, default=False, fail_vectorized=False, fail_tail=False):
    """A stand-in SVI: the parameter w (two values) becomes the mean of the batch's
    rows, moved by the step size (1 without the schedule); the loss is the batch's
    label sum plus the step size (so the smallest candidate is the pilot's best)."""
    from collections import namedtuple
    from types import SimpleNamespace

    State = namedtuple("State", "optim_state")
    Opt = namedtuple("Opt", "hyperparams inner_state")

    class SVI:
        loss = SimpleNamespace(vectorize_particles=False, num_particles=1)

        def __init__(self):
            self.optim = SimpleNamespace(get_params=self.get_params)

        @staticmethod
        def get_params(optim_state):
            return {"w": optim_state[1][0] if default else optim_state}

        def update(self, state, xb, yb, shift=0.0):
            if fail_vectorized and self.loss.vectorize_particles:
                raise RuntimeError("vmap cannot trace this model")
            if fail_tail and self.loss.num_particles > 1:
                raise RuntimeError("the tail's step fails")
            extra = 1000.0 * (self.loss.num_particles - 1)  # the tail's draws, seen in its loss
            target = xb.mean(axis=0)
            if not default:
                return State(target), yb.sum() + shift
            step, (w, opt) = state.optim_state
            lr = opt.hyperparams["learning_rate"]
            # a cap or budget not a number (the pilot's are inf) makes the loss NaN
            cap_budget = opt.hyperparams["cap"] + opt.hyperparams["budget"]
            extra = extra + jnp.where(jnp.isnan(cap_budget), jnp.nan, 0.0)
            inner = {k: v + 1 for k, v in opt.inner_state.items()}
            new = State((step + 1, (w + lr * (target - w), opt._replace(inner_state=inner))))
            return new, yb.sum() + lr + extra

    def init(w):
        if not default:
            return State(jnp.asarray(w, dtype=jnp.float32))
        start = (("learning_rate", 0.3), ("cap", np.inf), ("budget", np.inf))
        hyper = {k: jnp.asarray(v, dtype=jnp.float32) for k, v in start}
        inner = {"count": jnp.zeros([], jnp.int32), "nu": jnp.zeros(2)}
        w = jnp.asarray(w, dtype=jnp.float32)
        return State((jnp.zeros([], jnp.int32), (w, Opt(hyper, inner))))

    return SVI(), init


def _feed(jnp, n=None):
    """Batch i: x rows all (i, 2 i), y rows summing to i."""
    i = 0
    while n is None or i < n:
        yield jnp.full((2, 2), float(i)) * jnp.array([1.0, 2.0]), jnp.full((2, 1), i / 2)
        i += 1


def test_numpyro_run_spans_of_the_verdict_and_the_last_epoch():
    pytest.importorskip("jax")
    from exactbatch.adapters.numpyro_run import Run

    run = Run(object(), {}, False, 100, 10, False)
    assert run.width == 20 and run.plan is None and run.tail_svi is run.svi
    assert run.lr0 is None and run.sums is None and run.losses is None and run.unravel is None
    assert run.starts.tolist() == [60, 65, 70, 75, 80, 85, 90, 95, 100]
    assert run.ends.tolist() == [65, 70, 75, 80, 85, 90, 95, 100, 100]
    assert run.starts.dtype == np.int32 and run.ends.dtype == np.int32
    assert Run(object(), {}, False, 100, 10, True).starts[-1] == 90
    assert Run(object(), {}, False, 100, 300, True).starts[-1] == 0
    assert Run(object(), {}, False, 100, None, True).starts[-1] == 0
    short = Run(object(), {}, False, 3, None, True)
    assert short.width == 0 and short.starts.tolist() == [0] and short.ends.tolist() == [3]
    # an epoch of unknown length: the last epoch's start moves to the step now
    run = Run(object(), {}, False, 100, None, True)
    run.step_no = 37
    run.spans = "stale"
    run.new_epoch()
    assert run.starts[-1] == 37 and run.spans is None
    for epoch, average in ((10, True), (None, False)):
        run = Run(object(), {}, False, 100, epoch, average)
        start = run.starts[-1]
        run.step_no, run.spans = 37, "kept"
        run.new_epoch()
        assert run.starts[-1] == start and run.spans == "kept"


def test_numpyro_run_steps_write_each_loss_and_sum_each_span():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp

    from exactbatch.adapters.numpyro_run import Run

    svi, init = _svi(jnp)
    run = Run(svi, {}, False, 20, None, True)
    assert run.starts.tolist() == [12, 13, 14, 15, 16, 17, 18, 19, 0]
    bar = _Bar(True)
    state = run.steps(init([0.0, 0.0]), _feed(jnp), bar)
    assert run.step_no == 20 and bar.n == 20
    assert np.asarray(state.optim_state).tolist() == [19.0, 38.0]
    losses, parts, average = run.results()
    assert losses.tolist() == list(range(20)) and isinstance(losses, np.ndarray)
    assert [p["w"].tolist() for p in parts] == [[i, 2 * i] for i in range(12, 20)]
    assert average["w"].tolist() == [9.5, 19.0]
    # the bar's loss every 1% of the steps (every step here) and at the last
    assert [n for n, _, _ in bar.postfix] == list(range(1, 21))
    assert bar.postfix[3] == (4, "3", False)
    assert run.tail_mean(parts)["w"].tolist() == pytest.approx([15.5, 31.0])
    assert run.tail_mean(parts, last=True)["w"].tolist() == pytest.approx([17.5, 35.0])
    # a bar that shows nothing is not asked for the loss; 1% of 200 steps is 2
    run = Run(svi, {}, False, 200, None, False)
    quiet, shown = _Bar(False), _Bar(True)
    run.steps(init([0.0, 0.0]), _feed(jnp), quiet)
    assert quiet.n == 200 and quiet.postfix == []
    run = Run(svi, {}, False, 202, None, False)
    run.steps(init([0.0, 0.0]), _feed(jnp), shown)
    assert [n for n, _, _ in shown.postfix][:3] == [1, 3, 5]
    assert [n for n, _, _ in shown.postfix][-2:] == [201, 202]  # the last step's too
    _, _, average = run.results()
    assert average is None
    # the model's keywords reach each step
    run = Run(svi, {"shift": 100.0}, False, 5, None, False)
    run.steps(init([0.0, 0.0]), _feed(jnp), quiet)
    assert run.results()[0].tolist() == [100.0, 101.0, 102.0, 103.0, 104.0]
    jax.clear_caches()


def test_numpyro_run_tail_mean_weighs_the_parts_by_their_steps():
    pytest.importorskip("jax")
    from exactbatch.adapters.numpyro_run import Run

    run = Run(object(), {}, False, 100, 10, False)
    run.starts = np.array([0, 1, 3, 6, 10, 15, 21, 28, 0])
    run.ends = np.array([1, 3, 6, 10, 15, 21, 28, 36, 0])
    parts = [{"w": np.float64(k)} for k in range(8)]
    counts = np.arange(1, 9)
    assert run.tail_mean(parts)["w"] == pytest.approx((counts * np.arange(8)).sum() / 36)
    assert run.tail_mean(parts, last=True)["w"] == pytest.approx(
        (counts[4:] * np.arange(4, 8)).sum() / counts[4:].sum()
    )


@pytest.mark.parametrize("returned", ["LAST", "LAST_EPOCH", "TAIL", "LAST_WINDOW"])
def test_numpyro_run_finish_returns_the_estimate_the_verdict_names(returned, monkeypatch):
    pytest.importorskip("jax")
    import jax.numpy as jnp

    from exactbatch.adapters import convergence
    from exactbatch.adapters import numpyro_run as nr

    svi, init = _svi(jnp)
    svi.constrain_fn = lambda p: {"constrained": p["w"]}
    svi.get_params = lambda state: {"last": np.asarray(state.optim_state)}
    run = nr.Run(svi, {}, False, 20, None, returned == "LAST_EPOCH")
    state = run.steps(init([0.0, 0.0]), _feed(jnp), _Bar(False))
    drift = {"TAIL": 0.0, "LAST_WINDOW": 1.0}.get(returned)  # (moving: above 0.1)
    seen = []

    def verdict(*args):
        seen.append(args)
        return convergence.Convergence(drift, None, None, "stand-in", 4, None, None)

    monkeypatch.setattr(nr, "verdict", verdict)
    monkeypatch.setattr(run, "default", returned in ("TAIL", "LAST_WINDOW"))
    params, found, losses = run.finish("guide", state, "xb", "yb")
    assert found.returned == getattr(convergence, returned)
    assert losses.tolist() == list(range(20))
    assert seen[0][0] is svi and seen[0][1] == "guide" and seen[0][4] is run
    assert seen[0][5:] == ("xb", "yb", {})
    assert [p["w"].tolist() for p in seen[0][2]] == [[i, 2 * i] for i in range(12, 20)]
    assert seen[0][3].tolist() == list(range(20))
    want = {"LAST": None, "LAST_EPOCH": [9.5, 19.0], "TAIL": [15.5, 31.0],
            "LAST_WINDOW": [17.5, 35.0]}[returned]  # fmt: skip
    if want is None:
        assert params["last"].tolist() == [19.0, 38.0]
    else:
        assert np.asarray(params["constrained"]).tolist() == pytest.approx(want)


def test_numpyro_verdict_of_a_fit_too_short_judges_nothing():
    pytest.importorskip("jax")
    from exactbatch.adapters.numpyro_run import Run, verdict

    run = Run(object(), {}, False, 3, None, False)
    found = verdict(None, None, [], np.zeros(3), run, None, None, {})
    assert found.drift is None and found.window == 0


def _default_fit(jnp, num_steps=100, **kw):
    from exactbatch.adapters.numpyro_run import Run

    svi, init = _svi(jnp, default=True, **kw)
    run = Run(svi, {}, True, num_steps, 7, False, rows=200)
    run.bar = _Bar(False)
    return run, run.steps(init([0.0, 0.0]), _feed(jnp), run.bar)


def test_numpyro_default_schedule_pilot_decay_restarts_and_tail():
    pytest.importorskip("jax")
    pytest.importorskip("numpyro")
    import jax.numpy as jnp

    from exactbatch.adapters.schedule import CANDIDATES, TAIL_DRAWS, Plan, pick

    run, state = _default_fit(jnp)
    plan = Plan(100, 7, rows=200)  # (epochs of 7 batches: windows of 14 steps)
    assert run.width == 14 and run.starts[0] == 72
    assert (run.plan.pilot, run.plan.tail) == (plan.pilot, plan.tail)
    assert run.plan.restarts == plan.restarts
    assert run.tail_svi is not run.svi and run.tail_svi.loss.num_particles == TAIL_DRAWS
    assert run.tail_svi.loss.vectorize_particles is True
    # the pilot: every candidate on the same batches (loss i + lr), the best kept
    pilot = np.array([[i + lr for lr in CANDIDATES] for i in range(plan.pilot)], np.float32)
    assert run.lr0 == CANDIDATES[pick(pilot)]
    losses, _, _ = run.results()
    assert losses[: plan.pilot].tolist() == pytest.approx(pilot[:, pick(pilot)].tolist())
    # then the plan's step sizes; the tail's steps with TAIL_DRAWS draws
    for i in range(plan.pilot, 100):
        extra = 1000.0 * (TAIL_DRAWS - 1) if i >= plan.tail else 0.0
        want = i + plan.step_size(run.lr0, i) + extra
        assert losses[i] == pytest.approx(want, rel=1e-6), i
    # the moments restarted at each of the plan's restarts: the last at the tail
    _, (_, opt) = state.optim_state
    assert int(opt.inner_state["count"]) == 100 - plan.tail
    assert float(opt.hyperparams["cap"]) == pytest.approx(plan.cap(99))
    assert float(opt.hyperparams["budget"]) == pytest.approx(plan.budget(99))
    assert float(opt.hyperparams["learning_rate"]) == pytest.approx(plan.step_size(run.lr0, 99))
    assert run.step_no == 100 and run.bar.n == 100 and run.bar.postfix == []


def test_numpyro_tail_a_model_vmap_cannot_trace_runs_its_draws_one_by_one():
    pytest.importorskip("jax")
    pytest.importorskip("numpyro")
    import jax.numpy as jnp

    from exactbatch.adapters.schedule import TAIL_DRAWS

    run, _ = _default_fit(jnp, fail_vectorized=True)
    assert run.tail_svi.loss.vectorize_particles is False
    assert run.tail_svi.loss.num_particles == TAIL_DRAWS
    losses, _, _ = run.results()
    extra = 1000.0 * (TAIL_DRAWS - 1)  # (the stand-in's loss counts the tail's draws)
    assert losses[-1] == pytest.approx(99 + run.plan.step_size(run.lr0, 99) + extra, rel=1e-6)
    assert run.step_no == 100
    # a failure that is not vmap's: raised, not retried
    from numpyro.infer import Trace_ELBO

    from exactbatch.adapters.numpyro_run import Run

    svi, init = _svi(jnp, default=True, fail_tail=True)
    run = Run(svi, {}, True, 100, 10, False, rows=200)
    run.tail_svi.loss = Trace_ELBO(TAIL_DRAWS, vectorize_particles=False)
    with pytest.raises(RuntimeError, match="the tail's step fails"):
        run.steps(init([0.0, 0.0]), _feed(jnp), _Bar(False))
    assert run.step_no == run.plan.tail


# -- NumPyro: fit's plumbing around its checks, with a stand-in SVI and run ------------------


def _numpyro_model():
    import numpyro
    import numpyro.distributions as dist

    def model(xb, yb, scale=1.0):
        w = numpyro.sample("w", dist.Normal(0, 1))
        with numpyro.plate("data", 40, subsample_size=xb.shape[0]):
            numpyro.sample("obs", dist.Normal(w * xb[:, 0], scale), obs=yb[:, 0])

    return model


def _fit_goes_on(monkeypatch, model, labels=1, **kw):
    """``model`` fitted one stand-in step over 40 rows in batches of 10 (``labels`` label
    columns of ones): its checks accept it and the fit takes its step."""
    import jax

    from exactbatch import DataLoader
    from exactbatch.numpyro import fit

    x = np.arange(40, dtype=np.float32).reshape(40, 1)
    loader = DataLoader((x, np.ones((40, labels), np.float32)), 10, seed=2)
    seen = _stand_ins(monkeypatch, 1)
    fit(model, object(), loader, 1, rng_key=jax.random.key(0), **kw)
    assert seen["steps"][0] == "state0"
    return loader


def _stand_ins(monkeypatch, steps_taken, moving=False):
    """fit's SVI and Run replaced: what fit hands them is recorded in ``seen``."""
    from exactbatch.adapters import convergence
    from exactbatch.adapters import numpyro as adapter

    seen = {}
    real_result = adapter._svi()[2]

    class SVI:
        def __init__(self, *args):
            seen["svi"] = args

        def init(self, key, xb, yb, **kw):
            seen["init"] = (key, np.asarray(xb), np.asarray(yb), kw)
            return "state0"

    class ELBO:
        pass

    class Run:
        lr0 = 0.03

        def __init__(self, *args):
            seen["run"] = args
            seen["epochs"] = 0

        def new_epoch(self):
            seen["epochs"] += 1

        def steps(self, state, feed, bar):
            seen["steps"] = (state, [np.asarray(next(feed)[0][:, 0]) for _ in range(steps_taken)])
            seen["bar"] = (bar.show, getattr(bar, "total", None))
            return "state1"

        def finish(self, guide, state, xb, yb):
            seen["finish"] = (guide, state, np.asarray(xb), np.asarray(yb))
            verdict = convergence.Convergence(1.0 if moving else 0.0, 1.0, 0.1, "w mean", 4,
                                              None, None, returned=convergence.TAIL)  # fmt: skip
            return {"w": 1.5}, verdict, np.arange(3.0)

    monkeypatch.setattr(adapter, "_svi", lambda: (SVI, ELBO, real_result))
    monkeypatch.setattr(adapter, "Run", Run)
    return seen


def test_numpyro_fit_hands_the_run_its_svi_batches_epochs_and_returns_its_result(monkeypatch):
    jax = pytest.importorskip("jax")
    pytest.importorskip("numpyro")
    from exactbatch import DataLoader
    from exactbatch.adapters.convergence import TAIL
    from exactbatch.numpyro import fit

    x = np.arange(40, dtype=np.float32).reshape(40, 1)
    y = np.ones((40, 1), np.float32)
    loader, same = (DataLoader((x, y), 10, seed=5) for _ in range(2))
    batches = [np.asarray(b[0])[:, 0].tolist() for _ in range(3) for b in same]
    seen = _stand_ins(monkeypatch, 9)
    model, guide, key = _numpyro_model(), object(), jax.random.key(3)
    r = fit(model, guide, loader, 9, rng_key=key, scale=2.0)
    svi_model, svi_guide, optim, elbo = seen["svi"]
    assert svi_model is model and svi_guide is guide and type(elbo).__name__ == "ELBO"
    assert callable(optim.init) and "learning_rate" in optim.init(np.zeros(1)).hyperparams
    assert seen["init"][0] is key and seen["init"][3] == {"scale": 2.0}
    assert seen["init"][1][:, 0].tolist() == batches[0]  # the first batch
    assert seen["run"][1:] == ({"scale": 2.0}, True, 9, 4, False, 40)
    assert seen["steps"][0] == "state0"
    # the batches without end: 9 steps of 10 rows over epochs of 4 batches
    assert [b.tolist() for b in seen["steps"][1]] == batches[:9] and seen["epochs"] == 2
    assert seen["bar"] == (False, None)
    # the loader stands after the 9 batches taken (none of those put ahead lost)
    assert np.asarray(next(iter(loader))[0])[:, 0].tolist() == batches[9]
    assert seen["finish"][0] is guide and seen["finish"][1] == "state1"
    assert seen["finish"][2][:, 0].tolist() == batches[0]
    params, state, losses = r
    assert params == {"w": 1.5} and state == "state1" and losses.tolist() == [0.0, 1.0, 2.0]
    assert type(r).__name__ == "FitResult" and r.step_size == 0.03
    assert r.convergence.returned == TAIL and r.convergence.drift == 0.0


def test_numpyro_fit_with_an_optim_of_its_own_a_bar_and_a_moving_verdict(monkeypatch):
    jax = pytest.importorskip("jax")
    pytest.importorskip("numpyro")
    pytest.importorskip("tqdm")
    from exactbatch import ConvergenceWarning, DataLoader
    from exactbatch.numpyro import fit

    x = np.arange(40, dtype=np.float32).reshape(40, 1)
    loader = DataLoader((x, np.ones((40, 1), np.float32)), 10, seed=1)
    seen = _stand_ins(monkeypatch, 2, moving=True)
    optim = object()
    with pytest.warns(ConvergenceWarning):
        fit(_numpyro_model(), object(), loader, 2, optim=optim, rng_key=jax.random.key(0),
            average_last_epoch=True, progress_bar=True)  # fmt: skip
    assert seen["svi"][2] is optim
    assert seen["run"][1:] == ({}, False, 2, 4, True, 40)
    assert seen["bar"] == (True, 2)
    assert seen["epochs"] == 0


def test_numpyro_a_latent_only_some_batch_sizes_sample_is_no_latent_per_row(monkeypatch):
    """The latent-per-row check compares each latent's shape on the batch and on the batch
    with one row more; a latent the model samples only on the first (its batch size, the
    only one a fit hands it) has nothing to compare: not refused, and the fit goes on."""
    pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    def model(xb, yb):
        w = numpyro.sample("w", dist.Normal(0, 1))
        if xb.shape[0] == 10:  # (traced on 11 rows: no such site)
            w = w + numpyro.sample("shift", dist.Normal(0, 1))
        with numpyro.plate("data", 40, subsample_size=xb.shape[0]):
            numpyro.sample("obs", dist.Normal(w * xb[:, 0], 1), obs=yb[:, 0])

    _fit_goes_on(monkeypatch, model)


def test_numpyro_latents_in_plates_not_subsampling_the_rows_are_accepted(monkeypatch):
    """A latent in a subsample plate of another size (5 of 50 groups), or in a plate of
    the dataset's N rows whose subsample is all of them (40 of 40 each step), is no latent
    per row: fit goes on (as in test_numpyro.py's fit of the former, without a fit)."""
    pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    def model(xb, yb):
        with numpyro.plate("groups", 50, subsample_size=5):
            numpyro.sample("g", dist.Normal(0, 1))
        with numpyro.plate("all", 40, subsample_size=40):
            numpyro.sample("u", dist.Normal(0, 1))
        w = numpyro.sample("w", dist.Normal(0, 1))
        with numpyro.plate("data", 40, subsample_size=xb.shape[0]):
            numpyro.sample("obs", dist.Normal(w * xb[:, 0], 1), obs=yb[:, 0])

    _fit_goes_on(monkeypatch, model)


def test_numpyro_a_likelihood_its_plate_expands_is_one_term_a_row(monkeypatch):
    """An intercept-only likelihood (a scalar location: the data plate expands it to the
    batch) has one term per row, read before the expansion: accepted, the fit goes on."""
    pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    def model(xb, yb):
        mu = numpyro.sample("mu", dist.Normal(0, 1))
        with numpyro.plate("data", 40, subsample_size=xb.shape[0]):
            numpyro.sample("obs", dist.Normal(mu, 1), obs=yb[:, 0])

    _fit_goes_on(monkeypatch, model)


def test_numpyro_a_plate_over_the_label_columns_is_not_the_rows(monkeypatch):
    """Two labels a row, observed in a plate of their 2 columns inside the data plate,
    with a latent sd per column: that plate is not the batch's rows (its latent is no
    latent per row, its size no dataset's): accepted, the fit goes on."""
    pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    def model(xb, yb):
        w = numpyro.sample("w", dist.Normal(0, 1))
        with numpyro.plate("cols", 2, dim=-1):
            sd = numpyro.sample("sd", dist.HalfNormal(1))
            with numpyro.plate("data", 40, subsample_size=xb.shape[0], dim=-2):
                numpyro.sample("obs", dist.Normal(w * xb[:, :1], sd), obs=yb)

    _fit_goes_on(monkeypatch, model, labels=2)


def test_numpyro_a_pseudo_observation_of_the_parameters_is_no_term_of_the_batch(monkeypatch):
    """An observed site of the parameters alone (a pseudo-observation, in no plate) does not
    read the batch: left unscaled, and the sites after it are checked all the same."""
    jax = pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    from exactbatch.numpyro import fit

    def model(xb, yb, labels_2d=False):
        w = numpyro.sample("w", dist.Normal(0, 1))
        numpyro.sample("prior_obs", dist.Normal(w, 1), obs=0.5)
        y = yb if labels_2d else yb[:, 0]
        with numpyro.plate("data", 40, subsample_size=xb.shape[0]):
            numpyro.sample("obs", dist.Normal(w * xb[:, 0], 1), obs=y)

    loader = _fit_goes_on(monkeypatch, model)
    with pytest.raises(ValueError, match="observed site 'obs' has a log-density of shape"):
        fit(model, object(), loader, 1, rng_key=jax.random.key(0), labels_2d=True)


def test_numpyro_term_shapes_of_plates_at_other_dims(monkeypatch):
    """The data plate at dim -2 over a (B, 1) log-density, and a (1, B) log-density in a
    plate at dim -1 (a leading axis of 1), are one term a row: accepted; (B, 1) labels
    against a (B,) location are refused, naming the value's shape."""
    jax = pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    from exactbatch import DataLoader
    from exactbatch.numpyro import fit

    def model(xb, yb, form):
        w = numpyro.sample("w", dist.Normal(0, 1))
        if form == "dim-2":
            with numpyro.plate("data", 40, subsample_size=xb.shape[0], dim=-2):
                numpyro.sample("obs", dist.Normal(w * xb, 1), obs=yb)
        elif form == "leading-1":
            with numpyro.plate("data", 40, subsample_size=xb.shape[0]):
                numpyro.sample("obs", dist.Normal(w * xb[:, 0][None, :], 1), obs=yb[:, 0])
        else:
            with numpyro.plate("data", 40, subsample_size=xb.shape[0]):
                numpyro.sample("obs", dist.Normal(w * xb[:, 0], 1), obs=yb)

    x = np.arange(40, dtype=np.float32).reshape(40, 1)
    loader = DataLoader((x, np.ones((40, 1), np.float32)), 10, seed=2)
    _stand_ins(monkeypatch, 1)
    for form in ("dim-2", "leading-1"):
        fit(model, object(), loader, 1, rng_key=jax.random.key(0), form=form)
    with pytest.raises(ValueError, match=r"its value of shape \(10, 1\) broadcasts"):
        fit(model, object(), loader, 1, rng_key=jax.random.key(0), form="column")


def test_numpyro_epochs_feed_without_end_and_refuse_an_empty_epoch():
    pytest.importorskip("jax")
    from exactbatch.adapters.numpyro import _bar, _epochs

    class Batches:  # as a loader's: each iter() a generator (closed when the feed is)
        def __init__(self, batches):
            self.batches, self.closed = batches, 0

        def __iter__(self):
            try:
                yield from self.batches
            finally:
                self.closed += 1

    marks = []
    batches = Batches([(np.zeros((2, 1)), np.ones((2, 1)), "ids")] * 2)
    feed = _epochs(batches, 2, lambda: marks.append(1))
    got = [next(feed) for _ in range(5)]
    assert len(got[0]) == 2 and marks == [1, 1]
    feed.close()
    assert batches.closed == 3  # two epochs done, the third closed with the feed
    with pytest.raises(
        ValueError, match="^the loader's epoch handed out no batch: nothing to feed$"
    ):
        next(_epochs(Batches([]), 2, lambda: None))
    with pytest.raises(ValueError, match="drop_last|rows"):
        next(_epochs(Batches([(np.zeros((3, 1)), np.zeros((3, 1)))]), 2, lambda: None))
    with _bar(False, 5) as bar:
        assert bar.show is False and bar.update(1) is None and bar.set_postfix(loss="1") is None


def _same_verdict(got, want):
    """Two verdicts alike, their figures to float32's precision (one vmapped call of the
    guide against one call per part)."""
    import dataclasses

    for field in dataclasses.fields(want):
        a, b = getattr(got, field.name), getattr(want, field.name)
        if isinstance(b, float) and isinstance(a, float):
            assert a == pytest.approx(b, rel=1e-4, abs=1e-6), field.name
        else:
            assert a == b, field.name


def test_numpyro_verdict_reads_the_guides_means_and_sds_at_each_part():
    """verdict draws the guide at each part's mean parameters (the same keys): a guide
    w ~ Normal(loc, 1) whose loc moves by 1 between the windows drifts, one standing
    still does not; each coordinate of a vector latent has its own mean and sd; integer
    sites are left out; the default schedule's floor reads the tail's draws."""
    jax = pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    from types import SimpleNamespace

    import jax.numpy as jnp
    import numpyro.distributions as dist

    from exactbatch.adapters.convergence import judge
    from exactbatch.adapters.numpyro_run import GUIDE_DRAWS, Run, verdict

    assert GUIDE_DRAWS == 256
    seen = {}

    def guide(xb, yb, shift=0.0):
        seen["args"] = (xb.shape, yb.shape, shift)
        loc = numpyro.param("loc", 0.0)
        numpyro.sample("w", dist.Normal(loc + shift, 1.0))
        numpyro.sample("k", dist.Poisson(3.0))
        # a vector latent: each coordinate's own mean and sd (the second still)
        numpyro.sample("v", dist.Normal(jnp.stack([loc, 0.0]), jnp.array([1.0, 3.0])).to_event(1))

    svi = SimpleNamespace(constrain_fn=lambda p: {"loc": p["loc"] * 2.0})
    run = Run(svi, {}, False, 100, None, False)
    xb, yb = jnp.zeros((4, 1)), jnp.zeros((4, 1))
    moving = [{"loc": jnp.asarray(0.25 + 0.5 * (k >= 4))} for k in range(8)]  # 0.5, then 1.5
    found = verdict(svi, guide, moving, np.zeros(100), run, xb, yb, {"shift": 1.0})
    assert seen["args"] == ((4, 1), (4, 1), 1.0)
    assert found.window == 20 and found.moving and found.where in ("w mean", "v[0] mean")
    assert found.movement == pytest.approx(1.0, abs=0.05)  # moved by 1 sd (its draws' sd)
    # the parts' means and sds as judge reads them: the same draws (key 0) at every part
    parts = []
    for loc in (0.5, 1.5):
        draws = numpyro.infer.Predictive(guide, params={"loc": loc}, num_samples=256)(
            jax.random.key(0), xb, yb, shift=1.0
        )
        parts += [{n: (draws[n].mean(0), draws[n].std(0)) for n in ("w", "v")}] * 4
    _same_verdict(found, judge(parts, np.zeros(100), 20))
    still = [{"loc": jnp.asarray(0.25)} for _ in range(8)]
    found = verdict(svi, guide, still, np.zeros(100), run, xb, yb, {"shift": 1.0})
    assert found.moving is False and found.movement == pytest.approx(0.0, abs=1e-6)
    # the parts' means and sds as judge reads them: the same draws at every part
    key = jax.random.key(0)
    draws = numpyro.infer.Predictive(guide, params={"loc": 0.5}, num_samples=256)(
        key, xb, yb, shift=1.0
    )
    parts = [{n: (draws[n].mean(0), draws[n].std(0)) for n in ("w", "v")}] * 8
    _same_verdict(found, judge(parts, np.zeros(100), 20))
    # with the default schedule: the epoch and the tail's draws set the sds' floor
    run.default, run.epoch = True, 10
    run.tail_svi = SimpleNamespace(loss=SimpleNamespace(num_particles=4))
    found = verdict(svi, guide, still, np.zeros(100), run, xb, yb, {"shift": 1.0})
    _same_verdict(found, judge(parts, np.zeros(100), 20, 10, 4))


@pytest.mark.parametrize("rows", [10, 2])
def test_numpyro_a_sum_over_the_batch_in_its_plate_is_refused_naming_the_plate(rows, monkeypatch):
    """A factor of the batch's summed log-density inside the data plate (no value per row:
    the plate repeats it for each row) is refused with the plate and the count, in batches
    of 10 rows and of 2; in batches of 1 row the sum is that row's term, and an
    intercept-only likelihood's scalar location a value per row: both accepted."""
    jax = pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    from exactbatch import DataLoader
    from exactbatch.numpyro import fit

    def model(xb, yb, summed=True):
        w = numpyro.sample("w", dist.Normal(0, 1))
        with numpyro.plate("data", 40, subsample_size=xb.shape[0]):
            if summed:
                numpyro.factor("obs", dist.Normal(w * xb[:, 0], 1).log_prob(yb[:, 0]).sum())
            else:
                numpyro.sample("obs", dist.Normal(w, 1), obs=yb[:, 0])

    x = np.arange(40, dtype=np.float32).reshape(40, 1)
    loader = DataLoader((x, np.ones((40, 1), np.float32)), rows, seed=2)
    _stand_ins(monkeypatch, 1)
    with pytest.raises(ValueError, match="observed site 'obs' depends on the batch but") as e:
        fit(model, object(), loader, 1, rng_key=jax.random.key(0))
    assert (
        f"has no value per row (dim -1 of plate 'data'): the plate repeats it for each of "
        f"the {rows} rows, so it counts {rows} x 40/{rows} times" in str(e.value)
    )
    one = DataLoader((x, np.ones((40, 1), np.float32)), 1, seed=2)
    seen = _stand_ins(monkeypatch, 1)
    for summed in (True, False):
        fit(model, object(), one, 1, rng_key=jax.random.key(0), summed=summed)
        assert seen["steps"][0] == "state0"


def test_numpyro_a_hand_scale_around_the_plate_is_refused_unless_within_a_millionth(
    monkeypatch,
):
    """handlers.scale(2) around the subsample plate (40 rows in batches of 10: the plate
    counts each row 4 times, the scale makes it 8) is refused with both counts and the
    extra factor; a scale off 1 by half a millionth (float32 rounding) is accepted. Two
    plates around a wrongly shaped site are both named in its refusal."""
    jax = pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    import numpyro.distributions as dist

    from exactbatch import DataLoader
    from exactbatch.numpyro import fit

    def model(xb, yb, scale):
        w = numpyro.sample("w", dist.Normal(0, 1))
        with numpyro.handlers.scale(scale=scale):
            with numpyro.plate("data", 40, subsample_size=xb.shape[0]):
                numpyro.sample("obs", dist.Normal(w * xb[:, 0], 1), obs=yb[:, 0])

    x = np.arange(40, dtype=np.float32).reshape(40, 1)
    loader = DataLoader((x, np.ones((40, 1), np.float32)), 10, seed=2)
    seen = _stand_ins(monkeypatch, 1)
    fit(model, object(), loader, 1, rng_key=jax.random.key(0), scale=1 + 5e-7)
    assert seen["steps"][0] == "state0"
    with pytest.raises(ValueError, match="observed site 'obs' counts 8 times per row") as e:
        fit(model, object(), loader, 1, rng_key=jax.random.key(0), scale=2.0)
    assert "not total_size/batch_size = 40/10 = 4: the subsample plate 'data'" in str(e.value)
    assert "multiplies that by 2 (handlers.scale(N/B)" in str(e.value)

    def two_plates(xb, yb):
        w = numpyro.sample("w", dist.Normal(0, 1))
        with numpyro.plate("cols", 2, dim=-1):
            with numpyro.plate("data", 40, subsample_size=xb.shape[0], dim=-2):
                numpyro.sample("obs", dist.Normal(w * xb[:, :1], 1), obs=yb[:, None, :])

    wide = DataLoader((x, np.ones((40, 2), np.float32)), 10, seed=2)
    with pytest.raises(ValueError, match="has a log-density of shape") as e:
        fit(two_plates, object(), wide, 1, rng_key=jax.random.key(0))
    assert "the plates around it ('data', 'cols') make (10, 2)" in str(e.value)
