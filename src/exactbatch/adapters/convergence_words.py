"""The convergence verdict's words: why a fit warns, with its figures.

What :func:`exactbatch.adapters.convergence.warn_if_moving` and the verdict's ``str``
say for each bound a :class:`~exactbatch.adapters.convergence.Convergence` is above:
a mean's shift, a drift, an error beyond its bound or a floor above it (too few
epochs to judge), sds not judged at this length. Pure Python: the figures come from
the verdict
(read by attribute: this module imports nothing of ours).
"""

from __future__ import annotations

from typing import Protocol


class Convergence(Protocol):
    """What these words read of a verdict (a ``convergence.Convergence``, frozen, whose
    module imports this one: described here, not imported back, so the two form no
    circle)."""

    @property
    def drift(self) -> float | None: ...

    @property
    def movement(self) -> float | None: ...

    @property
    def where(self) -> str: ...

    @property
    def window(self) -> int: ...

    @property
    def threshold(self) -> float: ...

    @property
    def z(self) -> float: ...

    @property
    def t(self) -> float: ...

    @property
    def error(self) -> float | None: ...

    @property
    def error_where(self) -> str: ...

    @property
    def error_max(self) -> float: ...

    @property
    def error_floor(self) -> float: ...

    @property
    def sd_error(self) -> float | None: ...

    @property
    def sd_error_where(self) -> str: ...

    @property
    def sd_error_max(self) -> float: ...

    @property
    def sd_floor(self) -> float: ...

    @property
    def sds_judged(self) -> bool: ...

    @property
    def shift_where(self) -> str: ...

    @property
    def shift_moved(self) -> float | None: ...

    @property
    def shift_noise(self) -> float | None: ...

    @property
    def means_judged(self) -> bool: ...

    @property
    def shifted(self) -> bool: ...

    def steps_to_judge_means(self) -> int: ...

    def steps_advised_means(self) -> int: ...

    def steps_to_judge_sds(self) -> int: ...


__all__ = ["reasons", "shift", "too_few_epochs", "unjudged"]


def unjudged(verdict: Convergence, wander: float) -> str:
    """Why a fit's sds were not judged, and the steps that would judge them (``wander``:
    the parts' error beyond that many times the floor would have been judged)."""
    return (
        f"a guide sd's average over its last {2 * verdict.window} steps is uncertain by at "
        f"least {verdict.sd_floor:.3g} of itself (the batches' noise: 0.5 * sqrt(batches an "
        f"epoch / averaged steps / the guide's draws a step)), above the bound "
        f"{verdict.sd_error_max}, whatever the fit, and no sd's parts wandered beyond "
        f"{wander:g}x that. Run more epochs: at least {verdict.steps_to_judge_sds()} steps "
        f"judge them"
    )


def too_few_epochs(verdict: Convergence) -> str:
    """Why a fit's means cannot be judged at its length (their floor above the bound),
    and the steps that would judge them."""
    return (
        f"too few epochs to judge its means: an average over a window of "
        f"{verdict.window} steps is uncertain by at least {verdict.error_floor:.3g} "
        f"posterior sd (the batches' noise, whatever the step: 0.5 * sqrt(batches an epoch "
        f"/ window steps); a wander slower than the verdict's parts hides from their "
        f"scatter), above the bound "
        f"{verdict.error_max} sd, whatever the fit. Run more epochs: at least "
        f"{verdict.steps_to_judge_means()} steps judge them, and about "
        f"{verdict.steps_advised_means()} leave the batches' noise room under the bound"
    )


def shift(verdict: Convergence) -> str:
    """A mean's shift between the windows, with its figures."""
    return (
        f"its mean {verdict.shift_where.removesuffix(' mean')} moved {verdict.shift_moved:.3g} "
        f"sd between its last two windows of {verdict.window} steps, beyond {verdict.t:.2f}x "
        f"its noise ({verdict.shift_noise:.3g} sd), half of it above the threshold of "
        f"{verdict.threshold} sd: not the batches' noise - the fit still travels, or moved "
        f"in its tail and stopped, and the tail's average holds half that move"
    )


def reasons(verdict: Convergence) -> list[str]:
    """Each bound the verdict is above, with its figures."""
    said = []
    if verdict.shifted and not (verdict.drift is not None and verdict.drift > verdict.threshold):
        said.append(shift(verdict))
    if verdict.drift is not None and verdict.drift > verdict.threshold:
        said.append(
            f"the posterior still drifted {verdict.drift:.3g} sd ({verdict.where}) between "
            f"its last two windows of {verdict.window} steps, beyond {verdict.z:.2f}x the "
            f"noise and above the threshold of {verdict.threshold} sd (it moved "
            f"{verdict.movement:.3g} sd)"
        )
    if not verdict.means_judged:
        said.append(too_few_epochs(verdict))
    elif verdict.error is not None and verdict.error > verdict.error_max:
        said.append(
            f"the average of its last {2 * verdict.window} steps is uncertain by "
            f"{verdict.error:.3g} posterior sd ({verdict.error_where}; standard error, bound "
            f"{verdict.error_max} sd): the batches' noise has not averaged away, which "
            f"takes more epochs in the tail as N / batch_size grows"
        )
    if (
        verdict.sds_judged
        and verdict.sd_error is not None
        and (verdict.sd_error > verdict.sd_error_max)
    ):
        said.append(
            f"its sds are uncertain by {verdict.sd_error:.3g} of themselves "
            f"({verdict.sd_error_where}; standard error, bound {verdict.sd_error_max}): a "
            f"guide's sd averages the batches' noise away slowly (its error shrinks as "
            f"sqrt(N / batch_size / steps))"
        )
    return said
