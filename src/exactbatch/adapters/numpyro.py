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
the candidates side by side (``vmap``) for 5% of the steps, and the tail's
(from 55% of the steps) another, its loss averaging 8 draws of the guide a step
(``Trace_ELBO(num_particles=8)``: a guide sd's tail average scatters a third as much
between fits; see :mod:`exactbatch.adapters.schedule`). The verdict
draws 256 samples of the guide twice.

NumPyro, JAX and optax are imported on first use, not by importing this module.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Generator, Iterator
from typing import Any

from exactbatch.adapters.convergence import warn_if_moving
from exactbatch.adapters.jax import Handed, JaxLoader, as_jax
from exactbatch.adapters.minibatch import (
    check_batch_rows,
    check_exact_batches,
    check_one_process,
    epoch_length,
    first_batch,
)
from exactbatch.adapters.numpyro_adam import default_optim
from exactbatch.adapters.numpyro_run import Bar, Run
from exactbatch.adapters.numpyro_terms import (
    check_latents,
    check_plates,
    check_row_latents,
    check_terms,
    trace_model,
)
from exactbatch.adapters.order_check import check_order
from exactbatch.checks import check_flag, check_int
from exactbatch.extras import need
from exactbatch.hints import Foreign
from exactbatch.loader import DataLoader

__all__ = ["fit"]


def _svi() -> tuple[Foreign, Foreign, Foreign]:
    """NumPyro's ``SVI``, ``Trace_ELBO`` and ``SVIRunResult``, imported on first use."""
    infer = need("numpyro.infer", by="exactbatch.numpyro", package="NumPyro", extra="numpyro")
    return infer.SVI, infer.Trace_ELBO, infer.svi.SVIRunResult


def _epochs(
    batches: JaxLoader, rows: int, on_new_epoch: Callable[[], None]
) -> Generator[tuple[Handed, Handed], None, None]:
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
def _result_class(run_result: type) -> type:
    """``SVIRunResult`` with a ``convergence`` attribute (still a 3-tuple)."""

    # (a class made from NumPyro's on first use, NumPyro loading lazily: mypy takes no
    # variable for a base class)
    class Result(run_result):  # type: ignore[misc]
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
    the data's N and the batch; see the module) at 55% of the steps, a part
    before the verdict's windows, and stays there, each of the tail's steps
    averaging 8 draws of the guide. Any other
    ``optim`` - a NumPyro optimiser
    (``numpyro.optim.Adam(0.01)``) or an optax one - is used as given, with
    no pilot.

    The params returned (``result.convergence.returned`` names which): with
    the default schedule, the mean of the iterates of the tail's last two
    windows (the verdict's: the last two fifths of the steps) when it finds no
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
    returned: run more steps. Where a guide sd's error cannot fall within its
    bound at this length (too few epochs averaged), the warning says the sds
    were not judged (``convergence.sds_judged`` False) and how many steps
    would judge them; the means are judged all the same.

    Refuses, before any step: a loader that may hand out a partial batch
    (``ValueError`` naming ``drop_last``); a loader of several shards or an
    elastic one; a loader of unknown total_size; a model whose subsample
    plate's size is not ``loader.total_size`` or whose subsample size is not
    ``batch_size`` (``ValueError`` naming both numbers); an observed site
    that depends on the batch outside that plate, or whose log-density has
    not exactly the plates' shape ((B, 1) labels against a (B,) location), or
    holds no value per row (``ValueError`` naming the site and the shapes);
    a latent per row - a latent site in a subsample plate of ``total_size``, or
    whose shape follows the batch's row count (``ValueError`` naming it);
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
    check_latents(trace, plates, loader.total_size)
    check_row_latents(model, trace, xb, yb, model_kwargs)
    check_order(loader, "fit")

    default = optim is None
    svi = svi_class(model, guide, default_optim() if default else optim, elbo())
    state = svi.init(rng_key, xb, yb, **model_kwargs)
    epoch = epoch_length(loader)
    run = Run(svi, model_kwargs, default, num_steps, epoch, average_last_epoch, loader.total_size)
    with contextlib.ExitStack() as stack:
        feed = stack.enter_context(contextlib.closing(_epochs(batches, b, run.new_epoch)))
        bar = stack.enter_context(_bar(progress_bar, num_steps))
        state = run.steps(state, feed, bar)
    # A loader's next iter() after one left mid-epoch begins the next epoch; from its
    # own state it goes on where it stands, as the next fit's steps should.
    loader.load_state_dict(loader.state_dict())

    params, verdict, losses = run.finish(guide, state, xb, yb)
    result = _result_class(run_result)(params, state, losses)
    result.convergence, result.step_size = verdict, run.lr0
    warn_if_moving(verdict)
    return result


class _NoBar:
    show = False

    def update(self, n: int) -> None:
        pass

    def set_postfix(self, **kw: object) -> None:
        pass


@contextlib.contextmanager
def _bar(show: bool, total: int) -> Iterator[Bar]:
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
