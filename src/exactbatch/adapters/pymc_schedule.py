"""The steps of a PyMC fit: the default schedule, the verdict's sums, the averages.

:class:`Adam` is ``pm.adam`` with its step size in a shared variable and its
state (the moments and the step count) kept where :class:`Run` can save,
restore and reset it. :class:`Run` is a ``pm.fit`` callback, called after
every step, that

* with the default schedule (:mod:`exactbatch.adapters.schedule`) runs the
  pilot - each candidate step size in turn for ``pilot_each`` steps, each
  from the same start (parameters and optimiser state), on consecutive
  batches - keeps the candidate whose losses over the second half of its
  run are lowest within noise (the largest such), restores its state, and
  then sets the step size of every step after;
* adds the approximation's parameters into the sums of the verdict's parts
  and, when asked, of the last epoch;
* and, at the end (:meth:`Run.finish`), judges the fit and puts the
  parameters to return into the approximation.

Costs: one copy of the parameters per step inside the summed windows (the
last two fifths of the steps), and of the parameters and the optimiser's
state at each pilot boundary. PyMC is imported on first use.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from exactbatch.adapters.convergence import (
    LAST,
    LAST_EPOCH,
    LAST_WINDOW,
    PARTS,
    TAIL,
    Convergence,
    estimate,
    judge,
    not_judged,
    parts,
)
from exactbatch.adapters.schedule import CANDIDATES, TAIL_DRAWS, Plan, pick_apart
from exactbatch.hints import Foreign

__all__ = ["PILOT_EACH", "Adam", "Run"]

PILOT_EACH = 0.02  # share of the steps each candidate of the pilot runs

# A running sum of the approximation's parameters: [their sums (float64 arrays), count]
# (a list, added to in place)
Total = list[Any]
# A candidate's run in the pilot: ((its parameters, Adam's state), its losses)
PilotRun = tuple[tuple[list[np.ndarray], list[np.ndarray]], list[float]]


def _pytensor() -> Foreign:
    """pytensor (what is called of it, ``shared``, ``function`` and ``config``, is not
    annotated or not explicitly exported: held as :data:`~exactbatch.hints.Foreign`)."""
    import pytensor

    return pytensor


def _tensor() -> Foreign:
    """pytensor.tensor (its functions re-exported without ``__all__``: as :func:`_pytensor`)."""
    import pytensor.tensor as pt

    return pt


class Adam:
    """``pm.adam`` (Kingma and Ba) whose step size :attr:`lr` is a shared variable
    and whose state can be saved, restored and reset between steps; each coordinate's
    step is at most :attr:`cap` ``/ sqrt(v_hat)`` (a shared variable, ``inf`` to begin:
    see :meth:`exactbatch.adapters.schedule.Plan.cap`). A step whose gradient is not
    finite is not taken (parameters and moments stay as they were)."""

    def __init__(
        self, lr: float, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-8
    ) -> None:
        pytensor = _pytensor()

        self.lr = pytensor.shared(np.asarray(lr, dtype=pytensor.config.floatX))
        # each coordinate's step at most cap / sqrt(v_hat) (Plan.cap; inf: none)
        self.cap = pytensor.shared(np.asarray(np.inf, dtype=pytensor.config.floatX))
        # ... and the sum of step * sqrt(v_hat) at most budget: the largest cut to a level
        self.budget = pytensor.shared(np.asarray(np.inf, dtype=pytensor.config.floatX))
        self.beta1, self.beta2, self.epsilon = beta1, beta2, epsilon
        self.state: list[Foreign] = []  # shared variables: the step count, the moments

    def __call__(
        self, grads: Sequence[Foreign], params: Sequence[Foreign]
    ) -> OrderedDict[Foreign, Foreign]:
        pytensor, pt = _pytensor(), _tensor()

        floatx = pytensor.config.floatX
        t_prev = pytensor.shared(np.asarray(0.0, dtype=floatx))
        one = pt.constant(1)
        t = t_prev + 1
        b1, b2 = self.beta1, self.beta2
        c1, c2 = one - b1**t, one - b2**t
        updates: OrderedDict[Foreign, Foreign] = OrderedDict()
        moments: list[Foreign] = []
        steps: list[tuple[Foreign, Foreign, Foreign, Foreign]] = []
        for param, g in zip(params, grads, strict=True):
            value = param.get_value(borrow=True)
            m_prev = pytensor.shared(np.zeros_like(value), shape=param.type.shape)
            v_prev = pytensor.shared(np.zeros_like(value), shape=param.type.shape)
            m_t = b1 * m_prev + (one - b1) * g
            v_t = b2 * v_prev + (one - b2) * g**2
            updates[m_prev], updates[v_prev] = m_t, v_t
            root = pt.sqrt(v_t / c2) + self.epsilon
            steps.append((param, m_t, root, pt.minimum(self.lr * root, self.cap)))
            moments += [m_prev, v_prev]
        level = _fill(pt.concatenate([pt.flatten(a) for *_, a in steps]), self.budget)
        for param, m_t, root, spent in steps:
            updates[param] = param - (m_t / c1) * pt.minimum(spent, level) / root / root
        updates[t_prev] = t
        # a gradient not finite (a likelihood of -inf: a step too large for the data)
        # takes no step: the parameters stay finite, the step's loss shows it
        finite = pt.all([pt.all(pt.invert(pt.isnan(g) | pt.isinf(g))) for g in grads])
        updates = OrderedDict((k, pt.switch(finite, v, k)) for k, v in updates.items())
        self.state = [t_prev, *moments]
        return updates

    def save(self) -> list[np.ndarray]:
        return [s.get_value().copy() for s in self.state]

    def load(self, values: Sequence[np.ndarray]) -> None:
        for s, v in zip(self.state, values, strict=True):
            s.set_value(v)

    def reset(self) -> None:
        self.load([np.zeros_like(v) for v in self.save()])


def _fill(spent: Foreign, budget: Foreign) -> Foreign:
    """The level ``c`` at which ``sum(min(spent, c))`` is ``budget`` (the largest of
    ``spent`` when it all fits): :func:`exactbatch.adapters.numpyro_adam.fill` in
    PyTensor, in closed form. With ``s`` sorted and ``S_k`` the sum of its ``k``
    smallest, ``sum(min(s, c)) = min_k (S_k + (n - k) c)`` (each term bounds it from
    above, the one of ``c``'s own interval meets it), so the level is
    ``max_k (budget - S_k) / (n - k)``: a sort and a cumulative sum, where 40 unrolled
    halvings made the step's graph ten times larger and PyTensor's rewriting of it,
    as ``pm.fit`` compiles the step, most of a short fit's time."""
    pt = _tensor()

    s = pt.sort(spent)
    top = s[-1]
    below = pt.cumsum(s) - s  # S_k: the sum of the k smallest, k = 0 .. n - 1
    left = pt.arange(s.shape[0], 0, -1).astype(s.dtype)  # n - k
    level = pt.clip(pt.max((budget - below) / left), 0, top)  # a budget below 0: 0
    return pt.switch(pt.le(pt.sum(spent), budget), top, level)


class Run:
    """A ``pm.fit`` callback over the ``num_steps`` steps of one fit (see the module).

    ``default`` selects the default schedule (then :attr:`optimizer` is the
    :class:`Adam` to pass as ``obj_optimizer``); ``average`` the mean of the last
    epoch's iterates (``epoch`` batches; None: since the last epoch began, which
    :meth:`new_epoch` marks)."""

    def __init__(
        self,
        num_steps: int,
        epoch: int | None,
        default: bool,
        average: bool,
        rows: int | None = None,
    ) -> None:
        self.num_steps, self.epoch, self.default = num_steps, epoch, default
        self.pilot_each = max(1, math.ceil(num_steps * PILOT_EACH))
        self.plan = Plan(num_steps, epoch, pilot=len(CANDIDATES) * self.pilot_each, rows=rows)
        self.optimizer = Adam(CANDIDATES[0]) if default else None
        self.spans, self.width = parts(num_steps, epoch)
        first = self.plan.pilot if default else 0
        # the loss's scale: PyMC divides it by N / B by default (scale_cost_to_minibatch)
        self.cost = 1.0
        self.avg_start: int | None = None
        if average:
            self.avg_start = max(first, num_steps - epoch) if epoch else first
        self.sums: list[Total | None] = [None] * len(self.spans)
        self.average: Total | None = None
        self.losses: list[float] = []
        self.calls = 0
        # the pilot's start, its candidates' runs, the kept step: set as the pilot goes
        self.start: list[np.ndarray] | None = None
        self.runs: list[PilotRun] | None = None
        self.lr0: float | None = None
        # the objective's draws a step (a shared variable: see share_draws), and the tail's
        self.draws: Foreign = None  # a pytensor shared variable
        self.tail_draws = TAIL_DRAWS

    def share_draws(self, fit_kwargs: dict[str, Any]) -> None:
        """Make ``fit_kwargs["obj_n_mc"]`` (the objective's draws of the guide a step;
        the caller's, else 1) a shared variable that the tail raises to at least
        :data:`~exactbatch.adapters.schedule.TAIL_DRAWS` (see the schedule): ``pm.fit``
        compiles its step once, with the draws a symbolic size."""
        pytensor = _pytensor()

        given = fit_kwargs.get("obj_n_mc")
        first = 1 if given is None else int(given)
        self.draws = pytensor.shared(np.int64(first), name="obj_n_mc")
        self.tail_draws = max(first, TAIL_DRAWS)
        fit_kwargs["obj_n_mc"] = self.draws

    def new_epoch(self) -> None:
        if self.epoch is None and self.avg_start is not None:
            self.avg_start, self.average = max(self.calls, self.avg_start), None

    def remember(self, approx: Foreign) -> None:
        """Note the approximation's parameters before the first step: the pilot's start."""
        self.start = [p.get_value().copy() for p in approx.params]
        self.runs = []

    def __call__(self, approx: Foreign, losses: np.ndarray | None, i: int) -> None:
        step, self.calls = self.calls, self.calls + 1
        if losses is not None and len(losses):
            self.losses.append(float(losses[-1]))
        params = getattr(approx, "params", None)
        if params is None:  # a stand-in for pm.fit: nothing to read or restore
            return
        values = None
        for k, (a, b) in enumerate(self.spans):
            if a <= step < b:
                values = values or [p.get_value() for p in params]
                self.sums[k] = _add(self.sums[k], values)
        if self.avg_start is not None and step >= self.avg_start:
            values = values or [p.get_value() for p in params]
            self.average = _add(self.average, values)
        if self.default and self.start is not None:
            self._schedule(step, params)

    def _schedule(self, step: int, params: list[Foreign]) -> None:
        """After step ``step``: end a candidate's run (the next one starts where the first
        did), end the pilot (the kept candidate's state back), or set the next step size."""
        each, pilot, opt = self.pilot_each, self.plan.pilot, self.optimizer
        assert opt is not None  # (the default schedule's Adam)
        if step < pilot and (step + 1) % each == 0:
            c = step // each
            state = [p.get_value().copy() for p in params], opt.save()
            assert self.runs is not None and self.start is not None  # (in the pilot)
            self.runs.append((state, self.losses[c * each : (c + 1) * each]))
            if c + 1 < len(CANDIDATES):
                for p, v in zip(params, self.start, strict=True):
                    p.set_value(v.copy())
                opt.reset()
                opt.lr.set_value(np.asarray(CANDIDATES[c + 1], dtype=opt.lr.dtype))
                return
            best = pick_apart([run_losses for _, run_losses in self.runs])
            self.lr0 = CANDIDATES[best]
            (values, moments), _ = self.runs[best]
            for p, v in zip(params, values, strict=True):
                p.set_value(v)
            opt.load(moments)
            self.runs = None
        if self.lr0 is not None:
            lr = self.plan.step_size(self.lr0, step + 1)
            opt.lr.set_value(np.asarray(lr, dtype=opt.lr.dtype))
            if self.plan.restart(step + 1):  # Adam starts afresh (Plan.restarts)
                opt.reset()
            if step + 1 == self.plan.tail:  # ... and in the tail, capped, more draws a step
                if self.draws is not None:
                    self.draws.set_value(np.int64(self.tail_draws))
                cap, budget = (f(step + 1) * self.cost for f in (self.plan.cap, self.plan.budget))
                opt.cap.set_value(np.asarray(cap, dtype=opt.cap.dtype))
                opt.budget.set_value(np.asarray(budget, dtype=opt.budget.dtype))

    def finish(self, approx: Foreign) -> Convergence:
        """The verdict, with the approximation's parameters set to the estimate it names
        (``returned``, :func:`~exactbatch.adapters.convergence.estimate`): the last
        epoch's mean (``average``); else with the default schedule the mean of the
        verdict's two windows when it found no drift, of its last window when it did;
        else the last iterate."""
        params = getattr(approx, "params", None)
        if params is None:
            return not_judged("the approximation has no parameters to average", 0)
        epoch = self.epoch if self.default else None
        means = [_mean(s) for s in self.sums]
        # the tail's steps average tail_draws draws of the guide (ADVI): the sds' floor
        draws = self.tail_draws if self.draws is not None else 1
        verdict = (
            _verdict(approx, means, self.losses, self.width, epoch, draws) if self.width else None
        )
        verdict = verdict or judge([], self.losses, 0)  # not judged
        returned = estimate(verdict, self.default, self.average is not None)
        chosen: list[np.ndarray] | None = None
        if returned == LAST_EPOCH:
            chosen = _mean(self.average)
        elif returned in (TAIL, LAST_WINDOW):
            # the tail (both windows) judged still; the last window's when it travels (its
            # last iterate jitters by posterior sds at the tail's step)
            if returned == TAIL:
                sums: list[Total] = [s for s in self.sums if s is not None]
            else:
                sums = [s for s in self.sums[PARTS:] if s is not None]
                sums = sums if len(sums) == len(self.sums[PARTS:]) else []
            if sums:
                chosen = _mean(_merge(sums))
        if chosen is None:
            returned = LAST
        else:
            for p, v in zip(params, chosen, strict=True):
                p.set_value(np.asarray(v, dtype=p.dtype))
        return replace(verdict, returned=returned)


def _add(total: Total | None, values: list[np.ndarray]) -> Total:
    if total is None:
        return [[np.array(v, dtype=np.float64) for v in values], 1]
    total[0] = [t + v for t, v in zip(total[0], values, strict=True)]
    total[1] += 1
    return total


def _merge(totals: list[Total]) -> Total:
    out: Total = [[np.zeros_like(v) for v in totals[0][0]], 0]
    for values, count in totals:
        out[0] = [a + b for a, b in zip(out[0], values, strict=True)]
        out[1] += count
    return out


def _mean(total: Total | None) -> list[np.ndarray] | None:
    if total is None:
        return None
    values, count = total
    return [v / count for v in values]


def _verdict(
    approx: Foreign,
    part_means: list[list[np.ndarray] | None],
    losses: list[float],
    width: int,
    epoch: int | None = None,
    draws: int = 1,
) -> Convergence | None:
    """The guide's posterior means and sds at each part's mean parameters."""
    pytensor = _pytensor()

    try:
        moments = pytensor.function([], [approx.mean, approx.std])
        names = [
            (name, sl) for group in approx.groups for name, sl, _, _ in group.ordering.values()
        ]
    except (AttributeError, NotImplementedError):  # an approximation without mean and std
        return None
    means = [m for m in part_means if m is not None]
    if len(means) < len(part_means):  # a part with no iterate
        return None
    params = approx.params
    last = [p.get_value() for p in params]
    found: list[dict[str, tuple[np.ndarray, np.ndarray]]] = []
    try:
        for values in means:
            for p, v in zip(params, values, strict=True):
                p.set_value(np.asarray(v, dtype=p.dtype))
            mean, sd = (np.asarray(a, dtype=np.float64) for a in moments())
            found.append({name: (mean[sl], sd[sl]) for name, sl in names})
    finally:
        for p, v in zip(params, last, strict=True):
            p.set_value(v)
    return judge(found, losses, width, epoch, draws)
