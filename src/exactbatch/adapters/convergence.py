"""The convergence verdict of the fit helpers: did the fit stop moving, and how sure is it?

A fit that has not converged looks like one that has: the loss is noisy,
and a small step makes the parameters crawl wherever they are. The verdict
reads the fit's last two windows of steps (see
:func:`exactbatch.adapters.schedule.windows`: two fifths of the steps, in
whole epochs), each cut into :data:`PARTS` parts, and the guide's posterior
mean and sd of every latent at the mean of each part's iterates. All
figures are in posterior sds of the guide (the last window's):

* ``movement``: the largest change of a posterior mean or sd from the first
  window to the second.
* ``noise``: the standard error of that change, from the scatter of the
  parts' values about a straight line through them, floored by the median
  over the latents.
* ``drift``: the largest change beyond ``z`` standard errors, ``z`` the
  two-sided normal quantile of :data:`ALPHA` shared by every mean and sd
  judged (Bonferroni). Above :data:`THRESHOLD`: a fit still travelling; the
  last window's average is returned, not the tail's.
* ``shift``: for the posterior *means*, a change between the windows beyond
  ``t`` standard errors (Student's quantile at the same level, :data:`DOF`
  degrees of freedom a latent) whose half (:data:`HELD`, what the tail's
  average holds of a levelled move) is above :data:`THRESHOLD`, the smaller
  of those two margins, the largest over the means. Above 0: not converged.
* ``error``: the largest standard error of the tail's average, floored as
  the noise and, with the epoch (the default schedule), by
  :data:`MEANS_FLOOR` ``* sqrt(epoch / window)`` (``error_floor``). Above
  :data:`ERROR_MAX`: not converged; a floor above it leaves the means **too
  few epochs to judge** (``means_judged`` False), and the fit warns so with
  the steps that would judge them (``steps_to_judge_means``) and those that
  leave the batches' noise room under the bound (``steps_advised_means``:
  the floor at :data:`ROOM` of it).
* ``sd_error``: the largest standard error of the tail's average of a guide
  sd, relative to it, floored by ``0.5 * sqrt(epoch / averaged steps /
  draws)``. Above :data:`SD_ERROR_MAX`: not converged; a floor above it
  leaves the sds **not judged at this length** (``sds_judged`` False),
  unless an sd's parts scatter by more than :data:`WANDER` times the floor.
* ``elbo_change``: the change of the mean loss (the negative ELBO estimate)
  between the windows, with its standard error.

Any above its bound: :class:`exactbatch.ConvergenceWarning`, naming each
with its figures and saying which estimate the fit returned
(:func:`estimate`; ``returned`` on the verdict): with the default schedule
the tail's average (:data:`TAIL`) when the fit no longer drifts, the mean of
the last window's iterates (:data:`LAST_WINDOW`) when it still travels.

Why each rule and constant is what it is, with the fits that measured them:
docs/statistics.md, "The verdict's rules, and the fits behind them".

Pure Python and NumPy: no optional package is imported here.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np
from numpy.typing import ArrayLike

from exactbatch.adapters import convergence_words as words
from exactbatch.adapters.schedule import PARTS, windows
from exactbatch.errors import ConvergenceWarning

__all__ = ["ALPHA", "DOF", "ERROR_MAX", "HELD", "LAST", "LAST_EPOCH", "LAST_WINDOW",
           "MEANS_FLOOR", "PARTS", "ROOM", "SD_ERROR_MAX", "TAIL", "THRESHOLD", "TOO_SHORT",
           "WANDER", "Convergence", "estimate", "judge", "not_judged", "parts",
           "warn_if_moving"]  # fmt: skip

THRESHOLD = 0.1  # posterior sds the fit may still drift between its last two windows
HELD = 0.5  # the share of a levelled move between the windows that the tail's average holds
ERROR_MAX = 0.25  # the largest standard error of the returned average, in posterior sds
MEANS_FLOOR = 0.5  # a window's mean is uncertain by at least this x sqrt(epoch / window)
ROOM = 0.8  # the advised length's means' floor, as a share of the bound
RHO_MAX = 0.9  # the largest lag-1 correlation of the parts the error is widened for
SD_ERROR_MAX = 0.15  # ... of a guide sd's average, relative: 1/1.5 is 2.2 of them away
WANDER = 2.0  # an sd's parts' error beyond WANDER x its floor: not the batches' noise
ALPHA = 0.05  # the chance a converged fit's drift is called significant, over all latents
DOF = 2 * PARTS - 2  # a latent's noise: the parts' scatter about a straight line

# what a fit returns (:func:`estimate`)
TAIL = "the mean of the iterates of both windows (the last two fifths of the steps)"
LAST_WINDOW = "the mean of the last window's iterates (the last fifth of the steps)"
LAST = "the last iterate"
LAST_EPOCH = "the mean of the last epoch's iterates"


@dataclass(frozen=True)
class Convergence:
    """What the fit's last two windows say about its convergence.

    ``drift`` is the largest change of a posterior mean or sd between the
    windows beyond ``z`` standard errors, in posterior sds (None when the fit
    was too short for two windows, or the guide gave no sds); ``movement`` the
    largest change itself and ``noise`` its standard error; ``where`` names the
    latent that drifted most (``"w[3] mean"``); ``window`` is each window's
    steps; ``elbo_change`` the change of the mean loss from the first window to
    the second (negative: still falling) and ``elbo_se`` its standard error;
    ``threshold`` the drift above which the fit is still moving; ``error`` the
    largest standard error of the tail's average (``error_where`` its latent)
    and ``error_max`` its bound; ``z`` the standard errors a change must pass;
    ``sd_error`` the largest relative standard error of the tail's average of a
    guide sd (``sd_error_where``; None when not judged) and ``sd_error_max`` its
    bound; ``sd_floor`` the least relative standard error the batches' noise leaves a
    guide sd's tail average (0 when not known) and ``sds_judged`` False where that floor
    is above ``sd_error_max`` and no sd wandered beyond it: the sds not judged at this
    length (``converged`` then judges the means alone, and the fit warns that its sds
    are unchecked); ``returned`` the estimate the fit returned (:func:`estimate`; empty
    from :func:`judge` alone); ``shift`` the largest margin, in posterior sds, by which
    the change of a posterior mean between the windows is both beyond ``t`` standard
    errors and, its half (:data:`HELD`), above ``threshold`` (``shift_where`` its latent,
    ``shift_moved`` and ``shift_noise`` its change and standard error; None from a
    verdict built without it): above 0 the fit has not converged; ``error_floor`` the
    least standard error the batches' noise leaves a window's mean (:data:`MEANS_FLOOR`
    ``* sqrt(epoch / window)``, 0 when not known), which floors ``error`` and above
    ``error_max`` leaves the means too few epochs to judge (``means_judged`` False).
    """

    drift: float | None
    movement: float | None
    noise: float | None
    where: str
    window: int
    elbo_change: float | None
    elbo_se: float | None
    threshold: float = THRESHOLD
    error: float | None = None
    error_where: str = ""
    error_max: float = ERROR_MAX
    z: float = 2.0
    sd_error: float | None = None
    sd_error_where: str = ""
    sd_error_max: float = SD_ERROR_MAX
    returned: str = ""
    sd_floor: float = 0.0
    sds_judged: bool = True
    shift: float | None = None
    shift_where: str = ""
    shift_moved: float | None = None
    shift_noise: float | None = None
    t: float = 2.0
    error_floor: float = 0.0

    @property
    def means_judged(self) -> bool:
        """False where ``error_floor`` (the least standard error the batches' noise leaves a
        window's mean: too few epochs a window) is above ``error_max``: every fit of this
        length reads as uncertain, whatever its luck (``converged`` is then False)."""
        return self.error_floor <= self.error_max

    @property
    def shifted(self) -> bool:
        """True when a posterior mean changed between the windows beyond ``t`` standard
        errors and by more than ``threshold`` / :data:`HELD` (``shift`` above 0)."""
        return self.shift is not None and self.shift > 0

    @property
    def moving(self) -> bool | None:
        """True when the drift is above the threshold, or a mean shifted (``shifted``):
        the fit still travels, or its tail's average holds a move."""
        return None if self.drift is None else self.drift > self.threshold or self.shifted

    @property
    def converged(self) -> bool | None:
        """True when the fit no longer drifts and its average is within ``error_max``
        standard error (and its sds within ``sd_error_max``, where judged: see
        ``sds_judged``), and its means' error floor within ``error_max`` (``means_judged``);
        None when not judged."""
        if self.drift is None:
            return None
        if self.moving or (self.error is not None and self.error > self.error_max):
            return False
        if self.sd_error is None or not self.sds_judged:
            return True
        return self.sd_error <= self.sd_error_max

    def steps_to_judge_means(self) -> int:
        """The steps whose windows would bring the means' floor within ``error_max`` (the
        floor shrinks as one over the square root of a window's steps)."""
        steps = 5 * self.window
        if self.means_judged or not self.error_floor:
            return steps
        return math.ceil(round(steps * (self.error_floor / self.error_max) ** 2, 6))

    def steps_advised_means(self) -> int:
        """The steps whose windows bring the means' floor to :data:`ROOM` of
        ``error_max``: judged with room for the batches' noise (at
        :meth:`steps_to_judge_means` the floor is the bound itself)."""
        return math.ceil(round(self.steps_to_judge_means() / ROOM**2, 6))

    def steps_to_judge_sds(self) -> int:
        """The steps whose tail would bring the sds' floor within ``sd_error_max`` (the
        floor shrinks as one over the square root of the averaged steps): for a fit
        whose sds were not judged at its length (its own steps otherwise)."""
        steps = 5 * self.window  # the verdict's windows are two fifths of the steps
        if self.sds_judged or not self.sd_floor:
            return steps
        return math.ceil(steps * (self.sd_floor / self.sd_error_max) ** 2)

    def __str__(self) -> str:
        if self.drift is None:
            return f"not judged: {self.where}"
        elbo = ""
        if self.elbo_change is not None:
            elbo = (
                f"; the mean loss changed by {self.elbo_change:+.4g} "
                f"(standard error {self.elbo_se:.2g})"
            )
        verdict = "converged" if self.converged else "NOT converged"
        error = ""
        if self.error is not None:
            error = (
                f"; the tail's average is within {self.error:.3f} sd standard error "
                f"({self.error_where}; bound {self.error_max} sd)"
            )
        if self.sd_error is not None and not self.sds_judged:
            error += f"; its sds not judged at this length: {words.unjudged(self, WANDER)}"
        elif self.sd_error is not None:
            error += (
                f"; its sds within {self.sd_error:.3f} relative standard error "
                f"({self.sd_error_where}; bound {self.sd_error_max})"
            )
        shift = ""
        if self.shifted:
            shift = f"; {words.shift(self)}"
        return (
            f"{verdict}: the posterior drifted {max(self.drift, 0):.3f} sd ({self.where}) "
            f"between the last two windows of {self.window} steps, beyond {self.z:.2f}x the "
            f"noise (it moved {self.movement:.3f} sd, noise {self.noise:.3f}; threshold "
            f"{self.threshold} sd){shift}{error}{elbo}"
        )


def estimate(verdict: Convergence, default: bool, averaged: bool = False) -> str:
    """What a fit returns, from its verdict: :data:`LAST_EPOCH` when it averages its last
    epoch (``averaged``, ``average_last_epoch=True``); with the default schedule
    (``default``) :data:`TAIL` when the verdict finds no drift and :data:`LAST_WINDOW`
    when it does (a travelling fit is behind its tail's average by about the movement,
    behind the last window's by half of it; its last iterate jitters by posterior sds at
    the tail's step); else (an optimiser of your own, a fit too short to judge)
    :data:`LAST`."""
    if averaged:
        return LAST_EPOCH
    if default and verdict.moving is not None:
        return LAST_WINDOW if verdict.moving else TAIL
    return LAST


def parts(num_steps: int, epoch: int | None) -> tuple[list[tuple[int, int]], int]:
    """The ``2 * PARTS`` spans of steps ``[start, end)`` the verdict reads, in order, and
    the width of each of its two windows (0, and no spans, for a fit too short)."""
    start, width = windows(num_steps, epoch)
    if width < PARTS:
        return [], 0
    cuts = [start + round(k * width / PARTS) for k in range(2 * PARTS + 1)]
    return list(zip(cuts[:-1], cuts[1:], strict=True)), width


def _labels(names: Sequence[str], sizes: Sequence[int]) -> Iterator[str]:
    for name, size in zip(names, sizes, strict=True):
        if size == 1:
            yield name
        else:
            yield from (f"{name}[{k}]" for k in range(size))


# one part of the tail: each latent's (mean, sd) arrays at the mean of its iterates
_Part = Mapping[str, tuple[ArrayLike, ArrayLike]]

TOO_SHORT = "too few steps for two windows to compare"


def not_judged(why: str, window: int) -> Convergence:
    """A verdict that judged nothing, saying why (``str`` gives "not judged: why")."""
    return Convergence(None, None, None, why, window, None, None)


def judge(
    parts: Sequence[_Part],
    losses: ArrayLike,
    window: int,
    epoch: int | None = None,
    draws: int = 1,
) -> Convergence:
    """The verdict from the guide's posterior ``(mean, sd)`` per latent at each part.

    ``parts`` is a list of ``2 * PARTS`` dicts, in step order, mapping each
    latent's name to its ``(mean, sd)`` arrays at the mean of that part's
    iterates: the first ``PARTS`` make the first window, the rest the second.
    ``losses`` are the fit's losses, whose last ``2 * window`` the loss trend
    reads. Latents whose sd is 0 (not random under the guide) are left out.
    ``epoch`` (the batches of an epoch, with the default schedule's Adam) floors
    the sds' error at ``0.5 * sqrt(epoch / (2 * window * draws))``, ``draws`` the
    guide's draws a step in the tail (the default schedule's :data:`TAIL_DRAWS`), and
    the means' at :data:`MEANS_FLOOR` ``* sqrt(epoch / window)``: see the module doc.
    """
    if not window or not parts:
        return not_judged(TOO_SHORT, 0)
    names = sorted(parts[-1])
    means = np.stack([_flat(part, names, 0) for part in parts])  # (2 * PARTS, latents)
    sds = np.stack([_flat(part, names, 1) for part in parts])
    labels = list(_labels(names, [np.size(parts[-1][k][0]) for k in names]))
    scale = sds[PARTS:].mean(axis=0)
    ok = np.isfinite(scale) & (scale > 0)
    if not ok.any():
        return not_judged("the guide gave no posterior sds", window)
    with np.errstate(invalid="ignore", divide="ignore"):
        changes = [_change(v / scale) for v in (means, sds)]
    moved = np.concatenate([m for m, _, _ in changes])
    # a guide sd's window averages wander by their own standard errors, which the parts
    # cannot see: the change between two windows of W steps each is floored by 2x the
    # tail's floor (sqrt(2) each window, sqrt(2) their difference)
    sd_noise = np.fmax(_floored(changes[1][1], ok), 2 * _sd_floor(epoch, window, draws))
    noise = np.concatenate([_floored(changes[0][1], ok), sd_noise])
    # a mean's window average wanders by up to MEANS_FLOOR * sqrt(epoch / window) sds, more
    # slowly than a part when the window holds few epochs: the parts' scatter misses it
    means_floor = MEANS_FLOOR * math.sqrt(epoch / window) if epoch else 0.0
    means_error = _floored(changes[0][2], ok)
    means_error = np.where(np.isnan(means_error), means_error, np.fmax(means_error, means_floor))
    error = np.concatenate([means_error, _floored(changes[1][2], ok)])
    ok = np.concatenate([ok, ok])
    z = NormalDist().inv_cdf(1 - ALPHA / (2 * int(ok.sum())))
    drift = np.where(ok, moved - z * noise, -np.inf)
    drift = np.where(np.isnan(drift), np.inf, drift)  # a latent gone NaN has not converged
    error = np.where(ok, error, -np.inf)
    error = np.where(np.isnan(error), np.inf, error)
    worst, least = int(np.argmax(drift)), int(np.argmax(error))
    # a mean's change beyond t standard errors is not the batches' noise, and where the
    # tail's average holds (HELD of it) above the threshold it matters: both, not the
    # threshold beyond z standard errors (a levelled move of 0.235 sd at noise 0.043
    # passed that), nor a wander moving 0.16 sd by 4 of the correlated parts' standard
    # errors (breast cancer, 10,000 steps: 0.08 sd off). Student's t: the noise is estimated
    # (the normal quantile took 6% of still fits of one latent); its degrees of freedom
    # pooled over the latents by the median floor
    means_ok = ok[: len(scale)]
    t = _t_quantile(ALPHA / int(ok.sum()), DOF * int(means_ok.sum()))  # two-sided, as z
    shifts = np.fmin(changes[0][0] - t * noise[: len(scale)], HELD * changes[0][0] - THRESHOLD)
    shifts = np.where(means_ok & np.isfinite(shifts), shifts, -np.inf)
    shifted = int(np.argmax(shifts))
    sd_error = _sd_error(changes[1][2], ok[len(scale) :], epoch, window, draws)
    widest = int(np.argmax(sd_error)) if sd_error is not None else 0
    # the floor above the bound: every fit's sds read as uncertain, whatever its luck -
    # not judged, unless an sd's parts scatter beyond WANDER x the floor (not the noise)
    floor = _sd_floor(epoch, window, draws)
    judged = not (sd_error is not None and floor > SD_ERROR_MAX
                  and sd_error[widest] <= WANDER * floor)  # fmt: skip
    tail = np.asarray(losses, dtype=np.float64)[-2 * window :]
    first, second = tail[:window], tail[window:]
    change: float | None = None
    se: float | None = None
    if len(second) == window and np.isfinite(tail).all():
        change = float(second.mean() - first.mean())
        se = float(np.sqrt(first.var() / window + second.var() / window))
    return Convergence(
        float(drift[worst]),
        float(moved[worst]),
        float(noise[worst]),
        _name(labels, worst),
        window,
        change,
        se,
        error=float(error[least]),
        error_where=_name(labels, least),
        z=z,
        sd_error=None if sd_error is None else float(sd_error[widest]),
        sd_error_where="" if sd_error is None else _name(labels, len(labels) + widest),
        sd_floor=floor,
        error_floor=means_floor,
        sds_judged=judged,
        shift=float(shifts[shifted]),
        shift_where=_name(labels, shifted),
        shift_moved=float(changes[0][0][shifted]),
        shift_noise=float(noise[shifted]),
        t=t,
    )


def _t_quantile(tail: float, dof: int) -> float:
    """The ``t`` whose two-sided tail under Student's t of ``dof`` (even) degrees of
    freedom is ``tail``: ``P(|T| < t) = sin(a) * sum_j c_j cos(a)**(2 j)``, ``a =
    atan(t / sqrt(dof))``, ``c_0 = 1``, ``c_j = c_(j-1) * (2j - 1) / (2j)`` for ``j <
    dof / 2`` (Abramowitz and Stegun 26.7.3), solved by bisection; above 600 degrees
    of freedom (a hundred latents), the normal quantile's expansion in ``1 / dof`` to the
    second order (26.7.5; within 1e-5 there, where the sum would take seconds at a
    hundred thousand latents)."""
    if dof > 600:
        z = NormalDist().inv_cdf(1 - tail / 2)
        return z + (z**3 + z) / (4 * dof) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * dof**2)

    def inside(t: float) -> float:
        a = math.atan(t / math.sqrt(dof))
        c, term, total = math.cos(a) ** 2, 1.0, 1.0
        for j in range(1, dof // 2):
            term *= c * (2 * j - 1) / (2 * j)
            total += term
        return math.sin(a) * total

    lo, hi = 0.0, 1.0
    while 1 - inside(hi) > tail:
        lo, hi = hi, 2 * hi
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 - inside(mid) > tail else (lo, mid)
    return (lo + hi) / 2


def _sd_error(
    se: np.ndarray, ok: np.ndarray, epoch: int | None, window: int, draws: int = 1
) -> np.ndarray | None:
    """The relative standard error of each guide sd's tail average: the parts' own,
    floored (with ``epoch``) by what the batch's noise leaves over the averaged steps."""
    if not ok.any():
        return None
    floored = np.where(np.isnan(se), np.inf, np.fmax(se, _sd_floor(epoch, window, draws)))
    return np.where(ok, floored, -np.inf)


def _sd_floor(epoch: int | None, window: int, draws: int = 1) -> float:
    """The relative standard error of a guide sd's average over the tail's ``2 * window``
    steps that the batch's noise leaves, with the default schedule, each step averaging
    ``draws`` draws of the guide: ``0.5 * sqrt(epoch / (2 * window * draws))`` (0 without
    ``epoch``; see the module doc)."""
    return 0.5 * float(np.sqrt(epoch / (2 * window * max(1, draws)))) if epoch else 0.0


def _name(labels: Sequence[str], k: int) -> str:
    return f"{labels[k % len(labels)]} {'mean' if k < len(labels) else 'sd'}"


def _floored(se: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """Each latent's standard error, floored by their median: the latents share one
    noise level, and six degrees of freedom give a rough estimate of each."""
    floored: np.ndarray = np.fmax(se, np.nanmedian(np.where(ok, se, np.nan)))
    return floored


def _change(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The change of each column of ``values`` (2 * PARTS rows, in step order) from the
    first half's mean to the second's, its standard error from the rows' scatter about a
    straight line (a steady drift is not counted as noise), and the standard error of
    the mean of all the rows (the tail's average)."""
    t = np.arange(2 * PARTS) - (2 * PARTS - 1) / 2
    slope = (t[:, None] * values).sum(axis=0) / (t**2).sum()
    resid = values - values.mean(axis=0) - slope * t[:, None]
    sigma = np.sqrt((resid**2).sum(axis=0) / (2 * PARTS - 2))
    moved = np.abs(values[PARTS:].mean(axis=0) - values[:PARTS].mean(axis=0))
    # the average's error: the parts' scatter about their mean (a slow wander counts),
    # widened for parts that follow one another (their lag-1 correlation, pooled)
    about = values - values.mean(axis=0)
    spread = np.sqrt((about**2).sum(axis=0) / (2 * PARTS - 1))
    power = (about**2).sum(axis=0)
    lag = (about[1:] * about[:-1]).sum(axis=0)
    seen = np.isfinite(power) & np.isfinite(lag) & (power > 0)
    rho = float(np.median(lag[seen] / power[seen])) if seen.any() else 0.0
    rho = min(max(rho, 0.0), RHO_MAX)
    widen = np.sqrt((1 + rho) / (1 - rho))
    return moved, sigma * np.sqrt(2 / PARTS), spread * widen / np.sqrt(2 * PARTS)


def _flat(side: _Part, names: Sequence[str], i: int) -> np.ndarray:
    return np.concatenate([np.ravel(np.asarray(side[k][i], dtype=np.float64)) for k in names])


def warn_if_moving(verdict: Convergence, stacklevel: int = 3) -> None:
    """Raise :class:`exactbatch.ConvergenceWarning` when the fit is judged not converged,
    naming each bound it is above with its figures, and what the fit returned; and
    when a fit was too short to be judged at all (its last iterate returned unchecked).
    A guide with no posterior sds (a point estimate) is not warned about."""
    if verdict.converged is None:
        if verdict.where == TOO_SHORT:
            warnings.warn(
                ConvergenceWarning(
                    f"fit not judged: {TOO_SHORT} (the verdict compares two windows of "
                    f"at least {PARTS} steps each, a fifth of the steps); its last iterate "
                    f"is returned unchecked. Run at least {5 * PARTS} steps"
                ),
                stacklevel=stacklevel,
            )
        return
    if verdict.converged and not verdict.sds_judged:
        returned = f" (returned: {verdict.returned})" if verdict.returned else ""
        warnings.warn(
            ConvergenceWarning(
                f"fit's sds not judged at this length: {words.unjudged(verdict, WANDER)}. Its "
                f"means "
                f"converged (drift {max(verdict.drift or 0.0, 0):.3g} sd, standard error "
                f"{verdict.error or 0.0:.3g} sd); its sds{returned} are unchecked. The figures are "
                f"in the result's .convergence"
            ),
            stacklevel=stacklevel,
        )
        return
    if verdict.converged is not False:
        return
    said = words.reasons(verdict)
    # too few epochs alone: not a fit seen to move, one that cannot be judged at its length
    alone = len(said) == 1 and not verdict.means_judged
    head = "fit too short to judge" if alone else "fit has not converged"
    advice = (
        ""
        if alone
        else (
            " Run more steps: 2-4x (the default schedule stretches over them), or larger "
            "batches; with your own optim=, end with a smaller step."
        )
    )
    returned = f"; returned: {verdict.returned}" if verdict.returned else ""
    if verdict.returned == LAST_WINDOW:
        returned += (
            f": {verdict.window} steps, behind the fit by about half its movement (a "
            f"travelling fit is behind the tail's average by all of it, and its last "
            f"iterate jitters by posterior sds)"
        )
    warnings.warn(
        ConvergenceWarning(
            f"{head}: {'; and '.join(said)}{returned}.{advice} The figures are in the "
            f"result's .convergence"
        ),
        stacklevel=stacklevel,
    )
