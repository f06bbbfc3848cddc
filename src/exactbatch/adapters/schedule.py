"""The default step sizes of the fit helpers (``optim=None``), and the windows they judge.

A minibatch fit over ``num_steps`` steps runs Adam (Kingma and Ba) through
three phases, each a fixed share of the steps:

* **Pilot** (the first 5% in NumPyro; in PyMC 2% for each candidate): the candidate step sizes
  :data:`CANDIDATES` run from the same start (NumPyro: side by side, on the
  same batches and random draws; PyMC: one after another, each on batches of
  its own). :func:`pick` and :func:`pick_apart` keep the largest stable
  step: the one of the lowest loss over the second half of its run, or the
  next larger one while its loss still falls - a short pilot favours the
  step that gains most in a few steps, which is smaller than what a long fit
  can use (Stan's ADVI adapts its step by such a pilot: Kucukelbir et al.
  2017). The fit goes on from where the kept candidate stands.
* **Decay** (to 55% of the steps: :data:`SETTLE` part before the verdict's windows):
  the step falls linearly from the kept
  ``lr0`` to the tail's step. A constant step leaves the iterate jittering by
  many posterior sds on large data; for a fixed budget a linear decay is
  the schedule whose last iterate does best (Defazio et al. 2023).
* **Tail** (the last 45%: a settle span of :data:`SETTLE` part, then the verdict's two
  windows): the step stays at :meth:`Plan.tail_step`, sized
  so that the fit still relaxes within each of the verdict's parts: at a
  small step Adam moves an unconstrained parameter by about the step each
  step, and a guide's log-sd returns to its optimum in about ``0.7 / step``
  steps when the guide's draws are the noise, and in ``sqrt(N / B) / (2 *
  step)`` when the batch's noise is (a log-sd's gradient carries it); a
  posterior mean in ``1 / (step * sqrt(B))`` for standardised data. The
  tail's step is ``RELAX * max(1, sqrt(N / B) / 2) / part`` (``part`` the
  steps of one of the verdict's ``2 * PARTS`` parts), within ``[lr0 /
  FLOOR, lr0 / CAP]``, and at most ``SPREAD / sqrt(N / B)``: at the tail's
  step each iterate jitters about the optimum by ``J`` posterior sds, ``J**2``
  growing as step * N / sqrt(B), and where the likelihood is not quadratic
  in a parameter (a noise scale's log, a logistic's coefficients) the
  jitter shifts the iterates' mean itself - by about ``J**2 / sqrt(N)``
  posterior sds, step * sqrt(N / B): a bias the tail's average keeps and
  the verdict cannot see (it is still). Measured on the grid: 0.74 sd (a
  noise sd's log) at step lr0 / 3 = 0.033 and N / B = 156; at the bound
  (0.016) 0.39 sd, converged. A smaller step,
  a hundredth of ``lr0`` whatever the fit's length, froze short fits where
  they stood (the verdict then saw nothing move); a larger N makes each
  iterate jitter by more posterior sds (their variance grows as
  N / sqrt(batch_size) times the step), which the tail's average takes
  away and the verdict measures (its ``error``): an average over a
  window of W steps is within about ``sqrt((N / B) / W)`` posterior sds
  whatever the step, so a fit that has seen too few epochs in its tail
  is told so, not hidden behind a step too small to move.

The tail begins :data:`SETTLE` part (a quarter of a window: 5% of the steps) before
the verdict's first window (:attr:`Plan.judged`), never before the pilot's end.
Everything the tail switches on - Adam's restart, the flat step, the cap, the
budget, the guide's draws - sends the iterate off for a while, and a first
window that began there held that transient as a move of the means, which the
verdict's shift rule (:mod:`exactbatch.adapters.convergence`) reads as a fit
not converged (measured: breast cancer, NumPyro, B = 32, 10,000 steps, seed 1:
``w[15]``'s first part +0.19 reference sds, the next three +0.05 to +0.11; begun a
part earlier, +0.09, and its shift margin 0.084 to 0.036; seed 2's 0.023 to 0.006).
The settle span is run, but neither judged nor averaged (its cost: 5% of the steps
more at the tail's draws). What is left of those
shifts is the batches' slow wander (the parts' path the same whatever the settle:
the windows' batches are), not the transient: two or four parts settled did no
better than one (docs/statistics.md).

Adam's moments restart at zero where the pilot ends, at the start of each of
the decay's :data:`RESTARTS` pieces and where the tail begins
(:attr:`Plan.restarts`): Adam's bias-corrected second moment is nearly the
mean of the squared gradients since it last started (over fewer than ``1 /
(1 - beta2)`` = 1,000 steps), so it otherwise still remembers the first
steps' gradients, hundreds of times the tail's for a guide sd that began far
too wide, and holds that parameter back to a creep of ~1% of itself a part
(measured: a noise sd's guide sd 2.00x the reference after 2,000 steps,
moving too slowly for the verdict's threshold; with the tail's restart
alone, N = 50k, B = 256, 2000 steps: that sd's ``sqrt(v)`` still 20,800
after the pilot and 4,400 at the tail, where its gradient's noise is ~14 -
it moved at a fifteenth of its step through the whole decay and was 4.6x too
wide at the tail; restarted after the pilot and mid-decay: 1.5x at steps
100-200, 1.01x on the tail's average). In the tail each coordinate's step is
also at most ``SPREAD * sqrt(N) / sqrt(v)`` (:meth:`Plan.cap`; ``v`` Adam's
second moment, the coordinate's gradient noise): Adam moves a coordinate by
about the step in its own units, so a coefficient of a column 100x the
others' (posterior sd 100x smaller) jittered by 22 posterior sds at the
tail's step, and the residuals it fed biased the noise sd by 4.0 of its sds
(measured, unstandardised features; 0.35 with the cap). At stationarity a
coordinate jitters by ``J**2 ~ step * sqrt(v) / 2`` of its posterior
variances whatever its scale, and the jitter's bias is ``~J**2 / sqrt(N)``
posterior sds: the cap bounds it for every coordinate as ``SPREAD / sqrt(N /
B)`` does for a standardised one (whose ``sqrt(v)`` is about ``N /
sqrt(B)``). ``v`` is in the loss's units: PyMC divides its loss by N / B,
and its cap with it. And the sum over the coordinates of ``step * sqrt(v)``
is at most ``BIAS * sqrt(2 N)`` (:meth:`Plan.budget`): every coefficient's
jitter feeds the residuals, so a noise sd's log is biased by about that sum
over ``sqrt(2 N)`` of its posterior sds (measured: 20 group intercepts and 3
coefficients, 0.54 sd at the tail's step, 0.28 at half of it). ``BIAS`` is
0.1, not 0.2: on issue 40's grid (linear, 4 coefficients) halving it took the
quiet fits' ``log sigma`` from 0.10-0.25 sd to 0.04-0.17, every verdict the
same (docs/statistics.md). The coordinates that spend most (the means:
their gradient noise is about ``sqrt(N)`` times a log-sd's) are cut down to
a common level; the others keep the step that relaxes the guide's sds.

In the tail each step's gradient averages :data:`TAIL_DRAWS` draws of the guide
(NumPyro: ``Trace_ELBO(num_particles=TAIL_DRAWS)``; PyMC: ``obj_n_mc``), where the
decay's steps take one: a guide sd's tail average otherwise scatters between fits by
``0.5 * sqrt(epoch / averaged steps)`` of itself - the batch's noise enters a log-sd's
gradient times the guide's draw, and averages away over the draws of one batch, not
by a smaller step (a smaller one jitters less and relaxes slower, by the same factor).
Measured at 20 epochs averaged (N = 10k, B = 256, 2000 steps), the scatter of a
780-step average of a log-sd: 0.083-0.113 at one draw, one fit in five then holding an
sd outside 0.8-1.25x of the reference; 0.040-0.066 at four (``bench/fit_hold.py``).
Eight, not four: at the fewest steps whose windows judge the means (20 epochs, the
means' floor at its bound: the length the verdict advises) the tail averages 8 epochs,
and at four draws an sd's average scatters by ``0.25 * sqrt(1 / 8)`` = 0.088 of itself,
0.8x only 2.5 of those away (measured, N = 10k, B = 64, 3120 steps, 12 fits: a log
ratio's sd 0.093, sds 0.80-1.24x; issue 40's N = 50k, B = 64 at 15,620 steps: 0.78-1.16x);
at eight, 0.062 and 3.6 (measured 0.054, 0.88-1.15x). The draws cost the tail's steps,
not the decay's, where the iterate travels and its noise averages over many steps anyway.

The fit returns the mean of the iterates of the verdict's two windows (the tail
less its settle span) when the verdict finds no drift, else the mean of its last
window's (a fit still
travelling is behind its tail's average; its last iterate jitters by
posterior sds: see :func:`exactbatch.adapters.convergence.estimate`).

NumPy only: no optional package is imported here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["BIAS", "CANDIDATES", "CAP", "FLOOR", "PARTS", "PILOT", "RELAX", "RESTARTS", "SETTLE",
           "TAIL_DRAWS", "Plan", "pick", "pick_apart", "windows"]  # fmt: skip

CANDIDATES = (0.3, 0.1, 0.03, 0.01)  # Adam step sizes the pilot tries, largest first
FLOOR = 1000  # the tail's step is at least lr0 / FLOOR ...
CAP = 3  # ... and at most lr0 / CAP
RELAX = 2.0  # the tail's step is RELAX / (steps of a part): a log-sd relaxes in a third of a part
SPREAD = 0.2  # ... and at most SPREAD / sqrt(batches an epoch): the jitter's bias bounded
BIAS = 0.1  # the tail's sum over coordinates of step * sqrt(v): at most BIAS * sqrt(2 N)
PARTS = 4  # parts of each of the verdict's two windows
RESTARTS = 2  # Adam's moments restart at the start of each of the decay's RESTARTS pieces
TAIL_DRAWS = 8  # draws of the guide a step in the tail: a guide sd's average scatters 0.35x
PILOT = 0.05  # share of the steps the pilot takes
WINDOW = 0.2  # share of the steps in each of the verdict's two windows: the tail
SETTLE = 1  # parts the tail runs before the verdict's first window: its transient not judged


def windows(num_steps: int, epoch: int | None) -> tuple[int, int]:
    """``(start, width)``: the verdict compares the mean of the iterates of steps
    ``[start, start + width)`` with those of ``[start + width, num_steps)``.

    ``width`` is a fifth of the steps, rounded down to whole epochs when it spans at
    least one (over a whole epoch every row was seen once, so the minibatch noise
    cancels); ``(num_steps, 0)`` when there are too few steps for two windows."""
    width = int(num_steps * WINDOW)
    if epoch and width >= epoch:
        width -= width % epoch
    if width < 1:
        return num_steps, 0
    return num_steps - 2 * width, width


class Plan:
    """The default schedule of a fit of ``num_steps`` steps (see the module doc).

    ``pilot`` is its number of pilot steps, ``tail`` the step its tail begins at (where
    Adam's moments restart), ``judged`` the first step of the verdict's windows (the
    tail's :data:`SETTLE` part later, at most), ``rows`` the data's N (None: unknown, no
    cap);
    :meth:`step_size` gives the step size of step ``i`` once the pilot chose ``lr0``.
    """

    def __init__(
        self, num_steps: int, epoch: int | None, pilot: int | None = None, rows: int | None = None
    ):
        self.num_steps = num_steps
        self.pilot = max(1, math.ceil(num_steps * PILOT)) if pilot is None else pilot
        start, width = windows(num_steps, epoch)
        self.part = max(1, width // PARTS if width else int(num_steps * WINDOW) // PARTS)
        # the verdict reads (and the fit averages) from its first window's start; the tail
        # begins SETTLE parts before it, so that the first window does not hold the tail's
        # own transient (Adam restarted, the cap, the budget and the draws switched on)
        self.judged = start if width else num_steps
        self.tail = max(self.pilot, self.judged - SETTLE * self.part if width else num_steps)
        # a log-sd's gradient carries the batch's noise, sqrt(N / B) times its pull back
        self.noise = max(1.0, math.sqrt(epoch) / 2) if epoch else 1.0
        # the iterate's jitter biases a nonlinear likelihood's mean by ~ step * sqrt(N / B)
        self.spread = SPREAD / math.sqrt(epoch) if epoch else math.inf
        # ... and of any coordinate, whatever its scale: its step times its gradient's noise
        self.coordinate = SPREAD * math.sqrt(rows) if rows else math.inf
        # ... and of all of them together (the jitter's bias on a latent they all feed)
        self.total = BIAS * math.sqrt(2 * rows) if rows else math.inf
        # where Adam's moments restart: the decay's pieces' starts (the pilot's end first),
        # and the tail's
        span = self.tail - self.pilot
        self.restarts = tuple(sorted({self.pilot + k * span // RESTARTS for k in range(RESTARTS)}
                                     | {self.tail}))  # fmt: skip

    def tail_step(self, lr0: float) -> float:
        """The tail's step: ``RELAX * max(1, sqrt(epoch) / 2) / part``, at most
        ``SPREAD / sqrt(epoch)`` and ``lr0 / CAP``, at least ``lr0 / FLOOR`` (``epoch``
        the batches of an epoch)."""
        return max(lr0 / FLOOR, min(lr0 / CAP, self.spread, RELAX * self.noise / self.part))

    def restart(self, i: int) -> bool:
        """Do Adam's moments restart before step ``i``? At the pilot's end, at the start
        of each of the decay's :data:`RESTARTS` pieces, and where the tail begins."""
        return i in self.restarts and i < self.num_steps

    def cap(self, i: int) -> float:
        """The bound on ``step * sqrt(v)`` of each coordinate at step ``i`` (``v`` Adam's
        second moment): ``SPREAD * sqrt(N)`` in the tail (``N`` the data's rows), none
        (``inf``) before it or when N is not known."""
        return self.coordinate if i >= self.tail else math.inf

    def budget(self, i: int) -> float:
        """The bound on the sum over the coordinates of ``step * sqrt(v)`` at step ``i``:
        ``BIAS * sqrt(2 N)`` in the tail, none (``inf``) before it or without N."""
        return self.total if i >= self.tail else math.inf

    def draws(self, i: int) -> int:
        """The guide's draws a step at step ``i``: :data:`TAIL_DRAWS` in the tail, else 1."""
        return TAIL_DRAWS if i >= self.tail else 1

    def step_size(self, lr0: float, i: int) -> float:
        """Linear from ``lr0`` after the pilot to :meth:`tail_step` at the tail, then flat."""
        end = self.tail_step(lr0)
        if i >= self.tail:
            return end
        span = max(1, self.tail - self.pilot)
        done = min(max(i - self.pilot, 0), span) / span
        return lr0 + done * (end - lr0)


def _settling(run: ArrayLike) -> bool:
    """Are a candidate's losses finite and lower over the second half of its run than
    over the first (it converges, where a step too large wanders or diverges)?"""
    losses = np.asarray(run, dtype=np.float64)
    half = len(losses) // 2
    return (
        bool(half)
        and bool(np.isfinite(losses).all())
        and bool(losses[half:].mean() < losses[:half].mean())
    )


def _largest_stable(runs: Sequence[ArrayLike] | np.ndarray, best: int) -> int:
    """``best``, or the next larger step when its run is settling: a short pilot favours
    the step that gains most over a few steps, which is smaller than the best for a long
    fit (whose step then decays a hundredfold)."""
    return best - 1 if best > 0 and _settling(runs[best - 1]) else best


def pick(losses: ArrayLike) -> int:
    """The largest stable step, from a pilot of the candidates side by side.

    ``losses`` is a sequence of rows (one per pilot step) of one loss per
    candidate, the candidates largest step first, all run from the same start
    on the same batches and random draws. The best is the candidate of the
    lowest mean loss over the second half of the pilot (a non-finite loss
    there never is, while another is finite); picked is the next larger step
    when its losses are finite and falling (lower over the second half of the
    pilot than the first), else the best."""
    rows = np.asarray(losses, dtype=np.float64)
    half = rows[len(rows) // 2 :] if len(rows) > 1 else rows
    finite = np.isfinite(half).all(axis=0)
    if not finite.any():
        return int(rows.shape[1]) - 1  # all diverged: the smallest step
    means = np.where(finite, half.mean(axis=0), np.inf)
    return _largest_stable(rows.T, int(np.argmin(means)))


def pick_apart(runs: Sequence[Sequence[float] | np.ndarray]) -> int:
    """:func:`pick` for candidates run one after another, each from the same start on
    batches of its own: ``runs`` holds each candidate's losses, largest step first."""
    halves = [np.asarray(r[len(r) // 2 :], dtype=np.float64) for r in runs]
    means = [h.mean() if len(h) and np.isfinite(h).all() else np.inf for h in halves]
    if not np.isfinite(means).any():
        return len(runs) - 1
    return _largest_stable(runs, int(np.argmin(means)))
