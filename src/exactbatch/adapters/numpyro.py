"""Minibatch stochastic variational inference in NumPyro, fed by a DataLoader.

NumPyro scales a minibatch likelihood through ``numpyro.plate(name, N,
subsample_size=B)``: a site observed inside it counts N / B times. The fit
is right only when N is the dataset's row count and every batch has B rows;
a wrong N silently mis-scales the ELBO (the posterior comes out too narrow
or too wide). ``fit(model, guide, loader, num_steps, optim=..., rng_key=...)``
runs ``numpyro.infer.SVI`` with ``Trace_ELBO`` over the loader's batches and
checks both numbers first.

Guarantees and refusals:

* Before the first step the model is traced once on the loader's next
  batch. Every plate that encloses an observed site and covers the batch's
  rows (its size is ``loader.total_size`` or its subsample size is the
  batch's rows) must have size ``loader.total_size`` and subsample size
  ``batch_size``: else a ``ValueError`` naming the plate and both numbers.
  A model with no such plate is refused too (its likelihood is not scaled).
* Every batch has exactly ``batch_size`` rows, or the loader is refused with
  a ``ValueError`` naming ``drop_last`` (as :mod:`exactbatch.adapters.pymc`).
* Exactly ``num_steps`` batches are taken, step i the loader's i-th from
  where it stands; epochs roll over inside, so a fit is never cut short.
  ``loader.state_dict()`` afterwards resumes right after them.

Costs: batches come through :func:`exactbatch.jax.as_jax` (put on the
device two batches ahead, float32 unless 64-bit JAX is on); the step is
``svi.update`` under ``jax.jit``, compiled once (one batch shape).

NumPyro and JAX are imported on first use, not by importing this module.
"""

from __future__ import annotations

import numpy as np

from exactbatch.adapters.jax import as_jax
from exactbatch.adapters.minibatch import (
    LastEpochAverage,
    check_batch_rows,
    check_exact_batches,
    check_one_process,
    epoch_length,
    first_batch,
)
from exactbatch.adapters.numpyro_terms import check_plates, check_terms, trace_model
from exactbatch.checks import check_flag, check_int

__all__ = ["fit"]


def _svi():
    """NumPyro's ``SVI``, ``Trace_ELBO`` and ``SVIRunResult``, imported on first use."""
    try:
        from numpyro.infer import SVI, Trace_ELBO
        from numpyro.infer.svi import SVIRunResult
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "exactbatch.numpyro needs NumPyro: pip install 'exactbatch[numpyro]'"
        ) from e
    return SVI, Trace_ELBO, SVIRunResult


def fit(
    model,
    guide,
    loader,
    num_steps: int,
    *,
    optim,
    rng_key,
    average_last_epoch: bool = True,
    **model_kwargs,
):
    """Fit ``guide`` to ``model`` by SVI (``Trace_ELBO``), one new batch of ``loader`` per step.

    Each step calls ``model(xb, yb, **model_kwargs)`` and ``guide(xb, yb,
    **model_kwargs)`` with the batch as ``jax.Array`` s of shapes
    (batch_size, d) and (batch_size, l) (labels stay 2-D: ``yb[:, 0]`` for
    one label). The model observes the batch inside
    ``numpyro.plate("data", loader.total_size, subsample_size=loader.batch_size)``.

    ``num_steps`` optimisation steps take exactly ``num_steps`` batches, step
    i the loader's i-th from where it stands, epochs rolling over inside.
    ``optim`` is a NumPyro optimiser (``numpyro.optim.Adam(0.01)``) or an
    optax one (``optax.adam(0.01)``); ``rng_key`` a ``jax.random.key``.

    ``average_last_epoch=True`` (the default): the params returned are the
    mean of the iterates over the fit's last epoch (the last
    ``min(num_steps, len(loader))`` steps; for a stream of unknown size,
    those since its last epoch began), averaged in the optimiser's
    unconstrained space. A constant-step optimiser's last iterate jitters
    around the optimum with the minibatch noise, by many posterior sds on
    large data; the average is near it. ``False``: the last iterate.

    Returns NumPyro's ``SVIRunResult(params, state, losses)``: ``params`` a
    dict of constrained parameter values (averaged as above), ``state`` the
    final ``SVIState`` (``svi.update`` may continue from it), ``losses`` a
    NumPy array of the ``num_steps`` losses (each the negative ELBO estimate
    of its step, scaled to the whole dataset).

    Refuses, before any step: a loader that may hand out a partial batch
    (``ValueError`` naming ``drop_last``); a loader of unknown total_size; a
    model whose subsample plate's size is not ``loader.total_size`` or whose
    subsample size is not ``batch_size`` (``ValueError`` naming both
    numbers); a loader without labels (l = 0) when the model fails on its
    batch or observes nothing in a plate (the message points at ``labels=``).
    """
    svi_class, elbo, run_result = _svi()
    import jax

    num_steps = check_int("num_steps", num_steps, 1)
    average_last_epoch = check_flag("average_last_epoch", average_last_epoch)
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
    xb, yb = (np.asarray(a, dtype=batches.dtype) for a in first_batch(loader))
    trace = trace_model(model, xb, yb, model_kwargs, loader)
    plates = check_plates(trace, loader.total_size, b, loader.l)
    check_terms(model, trace, xb, yb, model_kwargs, plates, loader.total_size)

    svi = svi_class(model, guide, optim, elbo())
    state = svi.init(rng_key, xb, yb, **model_kwargs)

    @jax.jit
    def step(state, xb, yb):
        return svi.update(state, xb, yb, **model_kwargs)

    average = LastEpochAverage(num_steps, epoch_length(loader)) if average_last_epoch else None
    losses = []
    it = iter(batches)
    try:
        for i in range(num_steps):
            batch = next(it, None)
            if batch is None:  # the epoch is over: the next one begins
                it = iter(batches)
                batch = next(it, None)
                if batch is None:
                    raise ValueError("the loader's epoch handed out no batch: nothing to feed")
                if average is not None:
                    average.new_epoch()
            xb, yb = batch
            check_batch_rows(xb.shape[0], b)
            state, loss = step(state, xb, yb)
            losses.append(loss)
            if average is not None and average.wants(i):
                leaves, tree = jax.tree_util.tree_flatten(svi.optim.get_params(state.optim_state))
                average.add(i, leaves)
    finally:
        it.close()  # batches put ahead go back to the loader: exactly num_steps are taken
        # A loader's next iter() after one left mid-epoch begins the next epoch; from its
        # own state it goes on where it stands, as the next fit's steps should.
        loader.load_state_dict(loader.state_dict())
    params = svi.get_params(state)
    mean = average.mean() if average is not None else None
    if mean is not None:
        params = svi.constrain_fn(jax.tree_util.tree_unflatten(tree, mean))
    return run_result(params, state, np.asarray(jax.numpy.stack(losses)))
