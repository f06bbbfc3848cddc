"""The steps of one NumPyro fit (:func:`exactbatch.adapters.numpyro.fit`): the pilot
and the schedule's steps as one jitted call each, the sums of the verdict's windows on
the device, the verdict from the guide's draws, and the estimate returned.

JAX and NumPyro are imported on first use.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from exactbatch.adapters.convergence import (
    LAST_EPOCH,
    LAST_WINDOW,
    PARTS,
    TAIL,
    Convergence,
    estimate,
    judge,
    parts,
)
from exactbatch.adapters.jax import Handed
from exactbatch.adapters.numpyro_adam import restart_moments, with_schedule
from exactbatch.adapters.schedule import CANDIDATES, TAIL_DRAWS, Plan, pick
from exactbatch.hints import Foreign, PyTree

if TYPE_CHECKING:
    import jax

__all__ = ["GUIDE_DRAWS", "Bar", "Run", "verdict"]

GUIDE_DRAWS = 256  # draws of the guide per window for the verdict's means and sds

# One compiled step: (SVI state, sums, losses, step, *args) -> (state, sums, losses)
Step = Callable[..., tuple[Foreign, "jax.Array", "jax.Array"]]
# the fit's batches (as_jax's, the features' and labels'), without end
Batches = Iterator[tuple[Handed, Handed]]


class Bar(Protocol):
    """What the steps call of the progress bar (tqdm's, or one that does nothing)."""

    show: bool

    def update(self, n: int) -> object: ...

    def set_postfix(self, *, loss: str, refresh: bool) -> object: ...


class Run:
    """The steps of one fit: the pilot (default schedule), then the others.

    Every step is one call of a jitted function that updates the state, writes its
    loss into a device array and adds the unconstrained parameters into the sums of
    the windows it falls in (the verdict's two, and the last epoch's when it is
    averaged); :meth:`results` reads them back in one ``device_get``."""

    def __init__(
        self,
        svi: Foreign,
        model_kwargs: dict[str, Any],
        default: bool,
        num_steps: int,
        epoch: int | None,
        average: bool,
        rows: int | None = None,
    ) -> None:
        import jax
        import jax.numpy as jnp
        from jax.flatten_util import ravel_pytree

        self.jax, self.jnp, self.ravel = jax, jnp, ravel_pytree
        self.svi, self.kw, self.default = svi, model_kwargs, default
        self.num_steps, self.epoch = num_steps, epoch
        self.plan = Plan(num_steps, epoch, rows=rows) if default else None
        # the tail's steps average TAIL_DRAWS draws of the guide (see the schedule): the
        # same SVI (model, guide, optimiser, state) with a loss of that many particles
        self.tail_svi = svi
        if default:
            from numpyro.infer import Trace_ELBO

            self.tail_svi = copy.copy(svi)
            self.tail_svi.loss = Trace_ELBO(num_particles=TAIL_DRAWS, vectorize_particles=True)
        spans, self.width = parts(num_steps, epoch)
        # the sums: one per part of the verdict's windows, then the last epoch's (its start
        # moves with each new epoch when the epoch's length is unknown)
        avg_start = num_steps if not average else max(0, num_steps - epoch) if epoch else 0
        spans = [*spans, (avg_start, num_steps)]
        self.starts = np.array([a for a, _ in spans], dtype=np.int32)
        self.ends = np.array([b for _, b in spans], dtype=np.int32)
        self.spans: tuple[jax.Array, jax.Array] | None = None  # on the device (see _spans)
        self.step_no = 0
        self.sums: jax.Array | None = None
        self.losses: jax.Array | None = None
        self.lr0: float | None = None
        self.unravel: Callable[[jax.Array], PyTree] | None = None

    def new_epoch(self) -> None:
        if self.epoch is None and self.starts[-1] < self.num_steps:
            self.starts[-1] = self.step_no  # average the epoch now beginning
            self.spans = None

    def _core(
        self,
        svi: Foreign,
        state: Foreign,
        sums: jax.Array,
        i: jax.Array,
        lr: jax.Array,
        cap: jax.Array,
        budget: jax.Array,
        starts: jax.Array,
        ends: jax.Array,
        xb: jax.Array,
        yb: jax.Array,
    ) -> tuple[Foreign, jax.Array, jax.Array]:
        jnp = self.jnp
        if self.default:
            state = with_schedule(state, lr, cap, budget)
        state, loss = svi.update(state, xb, yb, **self.kw)
        flat, _ = self.ravel(self.svi.optim.get_params(state.optim_state))
        inside = (starts <= i) & (i < ends)
        return state, sums + jnp.where(inside[:, None], flat[None, :], 0), loss

    def _jit(self, core: Step, donate: tuple[int, ...]) -> Step:
        """``core`` as one jitted step that also writes the loss into ``losses[i]``."""

        def step(
            state: Foreign, sums: jax.Array, losses: jax.Array, i: jax.Array, *args: jax.Array
        ) -> tuple[Foreign, jax.Array, jax.Array]:
            state, sums, loss = core(state, sums, i, *args)
            return state, sums, losses.at[i].set(loss)

        jitted: Step = self.jax.jit(step, donate_argnums=donate)
        return jitted

    def _spans(self) -> tuple[jax.Array, jax.Array]:
        """The spans' starts and ends on the device, put once (again after a change)."""
        if self.spans is None:
            self.spans = self.jnp.asarray(self.starts), self.jnp.asarray(self.ends)
        return self.spans

    def _fresh(self, params: PyTree) -> tuple[jax.Array, jax.Array]:
        """Zero sums and losses (fresh buffers: they are donated). The sums are one
        array, a row of the raveled parameters per span: one buffer for the step to
        pass, not one per parameter and span, keeps the per-step dispatch cheap."""
        jnp = self.jnp
        flat, self.unravel = self.ravel(params)
        sums = jnp.zeros((len(self.starts), flat.size), dtype=flat.dtype)
        return sums, jnp.zeros(self.num_steps, dtype=jnp.result_type(float))

    def steps(self, state: Foreign, feed: Batches, bar: Bar) -> Foreign:
        """Run the fit's steps on ``feed``'s batches; the final state."""
        step = self._jit(partial(self._core, self.svi), (1, 2))
        # the tail's step (compiled on its first call): TAIL_DRAWS draws of the guide
        tail = self._jit(partial(self._core, self.tail_svi), (1, 2)) if self.default else step
        every = max(1, self.num_steps // 100)  # the bar's loss: a sync every 1% of steps
        self.sums, self.losses = self._fresh(self.svi.optim.get_params(state.optim_state))
        if self.default:
            state = self._pilot(step, state, feed, bar)
        lr0 = self.lr0 or 0.0
        plan = self.plan  # (None but with the default schedule)
        for i in range(self.step_no, self.num_steps):
            xb, yb = next(feed)
            lr = cap = budget = 0.0
            if plan is not None:
                if plan.restart(i):
                    state = restart_moments(state)
                lr, cap, budget = plan.step_size(lr0, i), plan.cap(i), plan.budget(i)
            args = (
                self.sums, self.losses, i, np.float32(lr), np.float32(cap),
                np.float32(budget), *self._spans(), xb, yb,
            )  # fmt: skip
            if not (plan is not None and plan.draws(i) > 1):
                state, self.sums, self.losses = step(state, *args)
            else:
                try:
                    state, self.sums, self.losses = tail(state, *args)
                except Exception:
                    if self.tail_svi.loss.vectorize_particles is False or self.sums.is_deleted():
                        raise  # not a trace's failure: the step ran (its buffers given)
                    # a model vmap cannot trace (its first tail step, ~55% into the fit):
                    # the same draws, keys and state, one after another (lax.map)
                    from numpyro.infer import Trace_ELBO

                    self.tail_svi.loss = Trace_ELBO(TAIL_DRAWS, vectorize_particles=False)
                    tail = self._jit(partial(self._core, self.tail_svi), (1, 2))
                    state, self.sums, self.losses = tail(state, *args)
            self.step_no = i + 1
            bar.update(1)
            if bar.show and (i % every == 0 or i + 1 == self.num_steps):
                bar.set_postfix(loss=f"{float(self.losses[i]):.4g}", refresh=False)
        return state

    def _pilot(self, step: Step, state: Foreign, feed: Batches, bar: Bar) -> Foreign:
        """Each candidate step size from ``state`` on the same batches and random draws
        (the same compiled step, called once per candidate); the kept one's state."""
        jax, plan = self.jax, self.plan
        # (a pilot: the default schedule's, from the sums and losses the steps made)
        assert plan is not None and self.sums is not None and self.losses is not None
        runs = [(state, self.sums, self.losses)]
        runs += [(state, *self._fresh(self.svi.optim.get_params(state.optim_state)))
                 for _ in CANDIDATES[1:]]  # fmt: skip
        for i in range(plan.pilot):
            xb, yb = next(feed)
            runs = [
                step(
                    st,
                    sums,
                    losses,
                    i,
                    np.float32(lr),
                    *[np.float32(np.inf)] * 2,
                    *self._spans(),
                    xb,
                    yb,
                )  # fmt: skip
                for (st, sums, losses), lr in zip(runs, CANDIDATES, strict=True)
            ]
            self.step_no = i + 1
            bar.update(1)
        pilot = np.stack([jax.device_get(losses[: plan.pilot]) for _, _, losses in runs], 1)
        best = pick(pilot)
        self.lr0 = CANDIDATES[best]
        state, self.sums, self.losses = runs[best]
        return state

    def results(self) -> tuple[np.ndarray, list[PyTree | None], PyTree | None]:
        """The losses (NumPy), the mean unconstrained parameters of each part of the
        verdict's windows, and those of the last epoch (None when not averaged)."""
        jax, unravel = self.jax, self.unravel
        assert unravel is not None  # (set with the sums, by the steps)
        losses, sums = jax.device_get((self.losses, self.sums))
        counts = self.ends - np.minimum(self.starts, self.ends)
        means = [
            unravel(total / count) if count else None
            for total, count in zip(sums, counts, strict=True)
        ]
        return np.asarray(losses), means[:-1], means[-1]

    def tail_mean(self, part_means: list[PyTree], last: bool = False) -> PyTree:
        """The mean unconstrained parameters of the verdict's two windows (``last``: of
        its second window only)."""
        first = PARTS if last else 0
        counts = (self.ends - self.starts)[first : 2 * PARTS]
        weights = counts / counts.sum()
        return self.jax.tree_util.tree_map(
            lambda *v: sum(w * x for w, x in zip(weights, v, strict=True)),
            *part_means[first : 2 * PARTS],
        )

    def finish(
        self, guide: Foreign, state: Foreign, xb: np.ndarray, yb: np.ndarray
    ) -> tuple[PyTree, Convergence, np.ndarray]:
        """``(params, verdict, losses)`` at the end of the steps: the verdict (its
        ``returned`` the estimate :func:`~exactbatch.adapters.convergence.estimate`
        names) and the constrained parameters of that estimate - the last epoch's
        mean, the tail's average when judged still, its last window's when still
        travelling (behind the tail's average), else the last iterate."""
        losses, part_means, average = self.results()
        found = verdict(self.svi, guide, part_means, losses, self, xb, yb, self.kw)
        found = replace(found, returned=estimate(found, self.default, average is not None))
        params = self.svi.get_params(state)  # LAST
        if found.returned == LAST_EPOCH:
            params = self.svi.constrain_fn(average)
        elif found.returned in (TAIL, LAST_WINDOW):
            last = found.returned == LAST_WINDOW
            params = self.svi.constrain_fn(self.tail_mean(part_means, last=last))
        return params, found, losses


def verdict(
    svi: Foreign,
    guide: Foreign,
    part_means: list[PyTree],
    losses: np.ndarray,
    run: Run,
    xb: np.ndarray,
    yb: np.ndarray,
    model_kwargs: dict[str, Any],
) -> Convergence:
    """The convergence verdict from the parts' mean parameters: the guide's posterior
    means and sds at each, from the same draws (one compiled, vectorised call); with the
    default schedule, the sds' error floored by the epoch's batches."""
    width = run.width
    if not width:
        return judge([], losses, 0)
    import jax
    import jax.numpy as jnp
    from numpyro.infer import Predictive

    def moments(params: PyTree) -> dict[str, tuple[jax.Array, jax.Array]]:
        draws = Predictive(
            guide, params=svi.constrain_fn(params), num_samples=GUIDE_DRAWS, parallel=True
        )(jax.random.key(0), xb, yb, **model_kwargs)
        return {
            name: (v.mean(axis=0), v.std(axis=0))
            for name, v in draws.items()
            if jnp.issubdtype(v.dtype, jnp.floating)
        }

    stacked = jax.tree_util.tree_map(lambda *v: jnp.stack(v), *part_means)
    found = jax.device_get(jax.jit(jax.vmap(moments))(stacked))
    parts = [
        {name: (mean[k], sd[k]) for name, (mean, sd) in found.items()}
        for k in range(len(part_means))
    ]
    # the tail's steps average TAIL_DRAWS draws of the guide: the sds' floor with them
    if not run.default:
        return judge(parts, losses, width)
    return judge(parts, losses, width, run.epoch, run.tail_svi.loss.num_particles)
