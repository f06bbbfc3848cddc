"""Minibatch stochastic variational inference in NumPyro, fed by a DataLoader.

NumPyro scales a minibatch likelihood through ``numpyro.plate(name, N,
subsample_size=B)``: a site observed inside it counts N / B times. The fit
is right only when N is the dataset's row count, every batch has B rows and
every term of the batch is scaled and shaped as the plate says; anything
else silently mis-scales the ELBO. ``fit(model, guide, loader, num_steps,
rng_key=...)`` runs ``numpyro.infer.SVI`` with ``Trace_ELBO`` over the
loader's batches, checks all of that first, and judges its own convergence
at the end.

Guarantees and refusals:

* Before the first step the model is traced once on the loader's next
  batch (:mod:`exactbatch.adapters.numpyro_terms`): every subsample plate
  around an observed site has size ``loader.total_size`` and subsample size
  ``batch_size``; every observed site whose log-density depends on the
  batch lies in it, with exactly the plates' shape and one value per row.
  Else a ``ValueError`` naming the plate or site, the numbers and the fix.
* A loader whose mixing window is smaller than the data (a stream through a
  shuffle buffer) has its next batches examined first
  (:mod:`exactbatch.adapters.order_check`): ``exactbatch.MixingWarning``,
  with the figures and the fix, when they are not well mixed.
* Every batch has exactly ``batch_size`` rows, or the loader is refused with
  a ``ValueError`` naming ``drop_last``; a loader of several shards (or an
  elastic one) is refused: the fit runs in one process.
* Exactly ``num_steps`` batches are taken, step i the loader's i-th from
  where it stands; epochs roll over inside, so a fit is never cut short.
  ``loader.state_dict()`` afterwards resumes right after them.
* ``optim=None`` (the default) runs the schedule of
  :mod:`exactbatch.adapters.schedule`: a pilot that picks Adam's step size,
  a linear decay, a flat tail. Any other ``optim`` is used as given.
* The result's ``convergence`` says how far the posterior still moved over
  the fit's last two windows and how well its average is pinned down
  (:mod:`exactbatch.adapters.convergence`); above a bound,
  ``exactbatch.ConvergenceWarning``, saying which estimate was returned.

Costs: batches come through :func:`exactbatch.jax.as_jax` (put on the
device two batches ahead, float32 unless 64-bit JAX is on). The step is
``svi.update`` under ``jax.jit``, compiled once (one batch shape), and
writes its loss into a device array, read back once at the end with the
window sums of the verdict; the pilot is one more compiled step that runs
the candidates side by side (``vmap``) for 5% of the steps. The verdict
draws 256 samples of the guide twice.

NumPyro, JAX and optax are imported on first use, not by importing this module.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from exactbatch.adapters.convergence import (
    LAST_EPOCH,
    LAST_WINDOW,
    PARTS,
    TAIL,
    estimate,
    judge,
    parts,
    warn_if_moving,
)
from exactbatch.adapters.jax import as_jax
from exactbatch.adapters.minibatch import (
    check_batch_rows,
    check_exact_batches,
    check_one_process,
    epoch_length,
    first_batch,
)
from exactbatch.adapters.numpyro_adam import default_optim, restart_moments, with_schedule
from exactbatch.adapters.numpyro_terms import (
    check_latents,
    check_plates,
    check_terms,
    trace_model,
)
from exactbatch.adapters.order_check import check_order
from exactbatch.adapters.schedule import CANDIDATES, Plan, pick
from exactbatch.checks import check_flag, check_int
from exactbatch.extras import need
from exactbatch.loader import DataLoader

__all__ = ["fit"]

GUIDE_DRAWS = 256  # draws of the guide per window for the verdict's means and sds


def _svi():
    """NumPyro's ``SVI``, ``Trace_ELBO`` and ``SVIRunResult``, imported on first use."""
    infer = need("numpyro.infer", by="exactbatch.numpyro", package="NumPyro", extra="numpyro")
    return infer.SVI, infer.Trace_ELBO, infer.svi.SVIRunResult


def _epochs(batches, rows: int, on_new_epoch):
    """The loader's batches without end, epoch after epoch (``on_new_epoch()`` at each
    rollover); closing the generator gives the batches put ahead back to the loader."""
    it = iter(batches)
    try:
        while True:
            batch = next(it, None)
            if batch is None:  # the epoch is over: the next one begins
                it = iter(batches)
                batch = next(it, None)
                if batch is None:
                    raise ValueError("the loader's epoch handed out no batch: nothing to feed")
                on_new_epoch()
            check_batch_rows(batch[0].shape[0], rows)
            yield batch[0], batch[1]  # (a loader with_rows: the fit has no use for the ids)
    finally:
        it.close()


@functools.cache
def _result_class(run_result):
    """``SVIRunResult`` with a ``convergence`` attribute (still a 3-tuple)."""

    class Result(run_result):
        """NumPyro's ``SVIRunResult(params, state, losses)``, and ``convergence``."""

        convergence = None
        step_size = None

    Result.__name__ = Result.__qualname__ = "FitResult"
    return Result


def fit(
    model: Callable[..., Any],
    guide: Callable[..., Any],
    loader: DataLoader,
    num_steps: int,
    *,
    optim: Any = None,
    rng_key: Any,
    average_last_epoch: bool = False,
    progress_bar: bool = False,
    **model_kwargs: Any,
) -> Any:
    """Fit ``guide`` to ``model`` by SVI (``Trace_ELBO``), one new batch of ``loader`` per step.

    Each step calls ``model(xb, yb, **model_kwargs)`` and ``guide(xb, yb,
    **model_kwargs)`` with the batch as ``jax.Array`` s of shapes
    (batch_size, d) and (batch_size, l) (labels stay 2-D: ``yb[:, 0]`` for
    one label). The model observes the batch inside
    ``numpyro.plate("data", loader.total_size, subsample_size=loader.batch_size)``.

    ``num_steps`` optimisation steps take exactly ``num_steps`` batches, step
    i the loader's i-th from where it stands, epochs rolling over inside.
    ``rng_key`` is a ``jax.random.key``.

    ``optim=None`` (the default): Adam on the schedule of
    :mod:`exactbatch.adapters.schedule`, which needs no tuning - for the first
    5% of the steps a pilot runs the candidate step sizes (0.3, 0.1, 0.03, 0.01)
    side by side on the same batches and random draws and keeps the largest
    stable one; the step then decays linearly to the tail's step (bounded by
    the data's N and the batch; see the module) at 60% of the steps and stays
    there. Any other ``optim`` - a NumPyro optimiser
    (``numpyro.optim.Adam(0.01)``) or an optax one - is used as given, with
    no pilot.

    The params returned (``result.convergence.returned`` names which): with
    the default schedule, the mean of the iterates of the tail (the verdict's
    two windows, the last two fifths of the steps) when the verdict finds no
    drift, else the mean of the last window's iterates (the last fifth of the
    steps: a travelling fit is behind the tail's average, and the tail's
    step leaves each iterate jittering by posterior sds); with an
    ``optim`` of your own, or a fit too short to judge, the last iterate.
    ``average_last_epoch=True``: the mean of the iterates over the fit's last
    epoch instead (the last ``min(num_steps, len(loader))`` steps; for a
    stream of unknown size, those since its last epoch began), averaged in
    the optimiser's unconstrained space - for a constant step of your own.

    ``progress_bar=True`` shows a tqdm bar with the loss (install tqdm).

    Returns NumPyro's ``SVIRunResult(params, state, losses)`` with two more
    attributes: ``params`` a dict of constrained parameter values, ``state``
    the final ``SVIState``, ``losses`` a NumPy array of the ``num_steps``
    losses (each the negative ELBO estimate of its step, scaled to the whole
    dataset; the pilot's are those of the step size it kept), ``step_size``
    the step the pilot kept (None with an ``optim`` of your own), and
    ``convergence`` an :class:`exactbatch.adapters.convergence.Convergence`:
    how far the guide's posterior means and sds moved, in its posterior sds,
    between the fit's last two windows of a fifth of the steps each, its
    noise, the drift beyond ``z`` times the noise, the standard errors of the
    tail's average (means and sds), the loss's trend, and ``returned``. When
    the drift is above 0.1 sd, or an error above its bound, the fit raises
    ``exactbatch.ConvergenceWarning`` naming each figure and what it
    returned: run more steps.

    Refuses, before any step: a loader that may hand out a partial batch
    (``ValueError`` naming ``drop_last``); a loader of several shards or an
    elastic one; a loader of unknown total_size; a model whose subsample
    plate's size is not ``loader.total_size`` or whose subsample size is not
    ``batch_size`` (``ValueError`` naming both numbers); an observed site
    that depends on the batch outside that plate, or whose log-density has
    not exactly the plates' shape ((B, 1) labels against a (B,) location), or
    holds no value per row (``ValueError`` naming the site and the shapes);
    a loader without labels (l = 0) when the model fails on its batch or
    observes nothing in a plate (the message points at ``labels=``).
    """
    svi_class, elbo, run_result = _svi()

    num_steps = check_int("num_steps", num_steps, 1)
    average_last_epoch = check_flag("average_last_epoch", average_last_epoch)
    progress_bar = check_flag("progress_bar", progress_bar)
    for attr in ("batch_size", "total_size", "state_dict", "__iter__"):
        if not hasattr(loader, attr):
            raise TypeError(f"fit needs an exactbatch DataLoader; got {type(loader).__name__}")
    check_exact_batches(loader, "fit")
    check_one_process(loader, "fit")
    if loader.total_size is None:
        raise ValueError(
            "fit needs the dataset's row count to check the model's plate, but the loader's "
            "total_size is None: pass total_size=N (or 'auto') to the DataLoader"
        )
    b = loader.batch_size
    batches = as_jax(loader)
    x0, y0 = first_batch(loader)
    # the first batch as the steps will see it: integer labels stay integers
    xb, yb = batches.host_pair(x0, y0, x0.shape[0])
    trace = trace_model(model, xb, yb, model_kwargs, loader)
    plates = check_plates(trace, loader.total_size, b, loader.l or 0)  # known: read
    check_terms(model, trace, xb, yb, model_kwargs, plates, loader.total_size)
    check_latents(trace, plates)
    check_order(loader, "fit")

    default = optim is None
    svi = svi_class(model, guide, default_optim() if default else optim, elbo())
    state = svi.init(rng_key, xb, yb, **model_kwargs)
    epoch = epoch_length(loader)
    run = _Run(svi, model_kwargs, default, num_steps, epoch, average_last_epoch, loader.total_size)
    with contextlib.ExitStack() as stack:
        feed = stack.enter_context(contextlib.closing(_epochs(batches, b, run.new_epoch)))
        bar = stack.enter_context(_bar(progress_bar, num_steps))
        state = run.steps(state, feed, bar)
    # A loader's next iter() after one left mid-epoch begins the next epoch; from its
    # own state it goes on where it stands, as the next fit's steps should.
    loader.load_state_dict(loader.state_dict())

    losses, part_means, average = run.results()
    verdict = _verdict(svi, guide, part_means, losses, run, xb, yb, model_kwargs)
    verdict = replace(
        verdict, returned=estimate(verdict, default, average_last_epoch and average is not None)
    )
    params = svi.get_params(state)  # LAST
    if verdict.returned == LAST_EPOCH:
        params = svi.constrain_fn(average)
    elif verdict.returned == TAIL:  # judged still: its average is nearer than any iterate
        params = svi.constrain_fn(run.tail_mean(part_means))
    elif verdict.returned == LAST_WINDOW:  # still travelling: behind the tail's average
        params = svi.constrain_fn(run.tail_mean(part_means, last=True))
    result = _result_class(run_result)(params, state, losses)
    result.convergence, result.step_size = verdict, run.lr0
    warn_if_moving(verdict)
    return result


class _Run:
    """The steps of one fit: the pilot (default schedule), then the others.

    Every step is one call of a jitted function that updates the state, writes its
    loss into a device array and adds the unconstrained parameters into the sums of
    the windows it falls in (the verdict's two, and the last epoch's when it is
    averaged); :meth:`results` reads them back in one ``device_get``."""

    def __init__(self, svi, model_kwargs, default, num_steps, epoch, average, rows=None):
        import jax
        import jax.numpy as jnp
        from jax.flatten_util import ravel_pytree

        self.jax, self.jnp, self.ravel = jax, jnp, ravel_pytree
        self.svi, self.kw, self.default = svi, model_kwargs, default
        self.num_steps, self.epoch = num_steps, epoch
        self.plan = Plan(num_steps, epoch, rows=rows) if default else None
        spans, self.width = parts(num_steps, epoch)
        # the sums: one per part of the verdict's windows, then the last epoch's (its start
        # moves with each new epoch when the epoch's length is unknown)
        avg_start = num_steps if not average else max(0, num_steps - epoch) if epoch else 0
        spans = [*spans, (avg_start, num_steps)]
        self.starts = np.array([a for a, _ in spans], dtype=np.int32)
        self.ends = np.array([b for _, b in spans], dtype=np.int32)
        self.spans = None  # the two on the device (see _spans)
        self.step_no = 0
        self.sums = self.losses = self.lr0 = self.unravel = None

    def new_epoch(self) -> None:
        if self.epoch is None and self.starts[-1] < self.num_steps:
            self.starts[-1] = self.step_no  # average the epoch now beginning
            self.spans = None

    def _core(self, state, sums, i, lr, cap, budget, starts, ends, xb, yb):
        jnp = self.jnp
        if self.default:
            state = with_schedule(state, lr, cap, budget)
        state, loss = self.svi.update(state, xb, yb, **self.kw)
        flat, _ = self.ravel(self.svi.optim.get_params(state.optim_state))
        inside = (starts <= i) & (i < ends)
        return state, sums + jnp.where(inside[:, None], flat[None, :], 0), loss

    def _jit(self, core, donate):
        """``core`` as one jitted step that also writes the loss into ``losses[i]``."""

        def step(state, sums, losses, i, *args):
            state, sums, loss = core(state, sums, i, *args)
            return state, sums, losses.at[i].set(loss)

        return self.jax.jit(step, donate_argnums=donate)

    def _spans(self):
        """The spans' starts and ends on the device, put once (again after a change)."""
        if self.spans is None:
            self.spans = self.jnp.asarray(self.starts), self.jnp.asarray(self.ends)
        return self.spans

    def _fresh(self, params):
        """Zero sums and losses (fresh buffers: they are donated). The sums are one
        array, a row of the raveled parameters per span: one buffer for the step to
        pass, not one per parameter and span, keeps the per-step dispatch cheap."""
        jnp = self.jnp
        flat, self.unravel = self.ravel(params)
        sums = jnp.zeros((len(self.starts), flat.size), dtype=flat.dtype)
        return sums, jnp.zeros(self.num_steps, dtype=jnp.result_type(float))

    def steps(self, state, feed, bar):
        """Run the fit's steps on ``feed``'s batches; the final state."""
        step = self._jit(self._core, (1, 2))
        every = max(1, self.num_steps // 100)  # the bar's loss: a sync every 1% of steps
        self.sums, self.losses = self._fresh(self.svi.optim.get_params(state.optim_state))
        if self.default:
            state = self._pilot(step, state, feed, bar)
        lr0 = self.lr0 or 0.0
        for i in range(self.step_no, self.num_steps):
            xb, yb = next(feed)
            lr = cap = budget = 0.0
            if self.default:
                if self.plan.restart(i):
                    state = restart_moments(state)
                lr, cap, budget = self.plan.step_size(lr0, i), self.plan.cap(i), self.plan.budget(i)
            state, self.sums, self.losses = step(
                state, self.sums, self.losses, i, np.float32(lr), np.float32(cap),
                np.float32(budget), *self._spans(), xb, yb,
            )  # fmt: skip
            self.step_no = i + 1
            bar.update(1)
            if bar.show and (i % every == 0 or i + 1 == self.num_steps):
                bar.set_postfix(loss=f"{float(self.losses[i]):.4g}", refresh=False)
        return state

    def _pilot(self, step, state, feed, bar):
        """Each candidate step size from ``state`` on the same batches and random draws
        (the same compiled step, called once per candidate); the kept one's state."""
        jax = self.jax
        runs = [(state, self.sums, self.losses)]
        runs += [(state, *self._fresh(self.svi.optim.get_params(state.optim_state)))
                 for _ in CANDIDATES[1:]]  # fmt: skip
        for i in range(self.plan.pilot):
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
        pilot = np.stack([jax.device_get(losses[: self.plan.pilot]) for _, _, losses in runs], 1)
        best = pick(pilot)
        self.lr0 = CANDIDATES[best]
        state, self.sums, self.losses = runs[best]
        return state

    def results(self):
        """The losses (NumPy), the mean unconstrained parameters of each part of the
        verdict's windows, and those of the last epoch (None when not averaged)."""
        jax = self.jax
        losses, sums = jax.device_get((self.losses, self.sums))
        counts = self.ends - np.minimum(self.starts, self.ends)
        means = [
            self.unravel(total / count) if count else None
            for total, count in zip(sums, counts, strict=True)
        ]
        return np.asarray(losses), means[:-1], means[-1]

    def tail_mean(self, part_means, last: bool = False):
        """The mean unconstrained parameters of the verdict's two windows (``last``: of
        its second window only)."""
        first = PARTS if last else 0
        counts = (self.ends - self.starts)[first : 2 * PARTS]
        weights = counts / counts.sum()
        return self.jax.tree_util.tree_map(
            lambda *v: sum(w * x for w, x in zip(weights, v, strict=True)),
            *part_means[first : 2 * PARTS],
        )


def _verdict(svi, guide, part_means, losses, run, xb, yb, model_kwargs):
    """The convergence verdict from the parts' mean parameters: the guide's posterior
    means and sds at each, from the same draws (one compiled, vectorised call); with the
    default schedule, the sds' error floored by the epoch's batches."""
    width = run.width
    if not width:
        return judge([], losses, 0)
    import jax
    import jax.numpy as jnp
    from numpyro.infer import Predictive

    def moments(params):
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
    return judge(parts, losses, width, run.epoch if run.default else None)


class _NoBar:
    show = False

    def update(self, n):
        pass

    def set_postfix(self, **kw):
        pass


@contextlib.contextmanager
def _bar(show: bool, total: int):
    """A tqdm bar over the steps when ``show``, else one that does nothing."""
    if not show:
        yield _NoBar()
        return
    tqdm = need("tqdm.auto", by="progress_bar=True", package="tqdm").tqdm
    bar = tqdm(total=total, desc="fit", unit="step")
    bar.show = True
    try:
        yield bar
    finally:
        bar.close()
