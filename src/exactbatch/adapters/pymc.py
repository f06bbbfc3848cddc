"""Minibatch variational inference in PyMC, fed by a DataLoader.

A minibatch model observes fixed-shape ``pm.Data`` placeholders and rescales
its likelihood by ``total_size=N``, so it depends on three numbers: the
batch size, N and their ratio. ``data(loader)`` makes the placeholders from
the loader (the batch's shape, labels 1-D when there is one per row), and
``fit(loader, n)`` runs ``pm.fit`` for ``n`` steps, putting exactly one new
batch into the placeholders per step: step i sees batch i, epochs roll over
by themselves, and exactly ``n`` batches are taken from the loader. A model
may hold the placeholders of several loaders (one ``data`` call each, say a
likelihood per data set): each loader's batches go into its own
placeholders, and ``fit([loader1, loader2], n)`` feeds them all, one batch
of each per step.

Guarantees and refusals:

* Every batch has exactly ``batch_size`` rows, or ``fit`` (and ``data``)
  refuse the loader with a ``ValueError`` naming ``drop_last``: a partial
  batch would be scaled by N / rows as if it were a full one's worth of data.
* Every term of the model that reads the placeholders is checked before the
  first step (:mod:`exactbatch.adapters.pymc_terms`): it must be an observed
  variable with ``total_size=loader.total_size``, the batch's rows on its
  first axis and one log-density value per row. A missing or wrong
  ``total_size``, a ``pm.Potential`` or a latent variable over the
  placeholders (PyMC scales neither) is a ``ValueError`` naming it.
* ``fit`` never feeds a loader's rows into placeholders made for another
  loader: a ``ValueError`` naming the loader when the model has no
  placeholders for it (only other loaders'), when ``x=``/``y=`` name another
  loader's placeholders, and when an observed variable reads the
  placeholders of a loader ``fit`` was not given (they would hold one batch
  for the whole fit). ``data`` refuses a second set of placeholders for the
  same loader in one model.

* ``optim=None`` runs the default schedule (a pilot that picks Adam's step,
  a linear decay, a flat tail; :mod:`exactbatch.adapters.pymc_schedule`),
  and every fit ends with the convergence verdict of
  :mod:`exactbatch.adapters.convergence` (``approx.convergence``; above a
  bound, ``exactbatch.ConvergenceWarning``, saying which estimate the
  approximation holds).
* A loader of several shards (or an elastic one) is refused: the fit runs
  in one process.
* A loader whose mixing window is smaller than the data has its next
  batches examined before the first step
  (:mod:`exactbatch.adapters.order_check`): ``exactbatch.MixingWarning``
  when they are not well mixed.

Costs: one copy of each batch into the placeholders (``set_value``); the
loader's own reads and memory are unchanged. ``data`` reads the first batch
to give the placeholders real values, then rewinds the loader to where it
stood (``load_state_dict(state_dict())``), so ``fit`` starts at that batch.

PyMC is imported on first use, not by importing this module.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType
from typing import Any, cast

import numpy as np

from exactbatch.adapters.convergence import warn_if_moving
from exactbatch.adapters.minibatch import (
    check_batch_rows,
    check_exact_batches,
    check_one_process,
    epoch_length,
    first_batch,
)
from exactbatch.adapters.order_check import check_order
from exactbatch.adapters.pymc_schedule import Run
from exactbatch.adapters.pymc_terms import check_terms, reading
from exactbatch.checks import check_flag, check_int
from exactbatch.extras import need
from exactbatch.hints import Foreign
from exactbatch.loader import DataLoader

__all__ = ["data", "fit"]

START_SD = 0.1  # the default schedule's starting sds of ADVI (see _inference)

# A loader's placeholders: (x's, y's or None), pm.Data variables
Pair = tuple[Foreign, Foreign | None]

# model -> {loader: (x placeholder, y placeholder or None)}, as made by data(); weak on
# both sides, so that neither a model nor a loader is kept alive by it
_PLACEHOLDERS: weakref.WeakKeyDictionary[Foreign, weakref.WeakKeyDictionary[DataLoader, Pair]]
_PLACEHOLDERS = weakref.WeakKeyDictionary()


def _pm() -> ModuleType:
    return need("pymc", by="exactbatch.pymc", package="PyMC", extra="pymc")


def _labels(yb: np.ndarray, ndim: int) -> np.ndarray:
    return yb[:, 0] if ndim == 1 else yb


def data(
    loader: DataLoader, x_name: str = "x", y_name: str = "y", *, model: Any = None
) -> tuple[Any, Any]:
    """Make ``pm.Data`` placeholders for the loader's batches; call inside ``pm.Model()``.

    Returns ``(x_data, y_data)``: ``x_data`` of shape (batch_size, d), and
    ``y_data`` of shape (batch_size,) when the loader has one label per row,
    (batch_size, l) for several, or None when it has none. They hold the
    loader's next batch (the one :func:`fit` will feed first); the loader is
    left where it stood (its state names the reload that put it back, as a
    state taken after any load does; the batch read is not counted).
    Observe them with ``total_size=loader.total_size``::

        with pm.Model() as model:
            x, y = exactbatch.pymc.data(loader)
            ...
            pm.Bernoulli("obs", logit_p=..., observed=y, total_size=loader.total_size)
        approx = exactbatch.pymc.fit(loader, 10_000, model=model)

    The loader must hand out full batches only (``ValueError`` naming
    ``drop_last`` otherwise); see :func:`fit`. One call per loader and
    model: a second one for the same loader is a ``ValueError``.
    """
    pm = _pm()
    check_exact_batches(loader, "data")
    model = pm.modelcontext(model)
    made = _PLACEHOLDERS.setdefault(model, weakref.WeakKeyDictionary())
    if loader in made:
        raise ValueError(
            f"data: this model already has placeholders ({_names(made[loader])}) for the "
            f"loader {loader!r}; fit feeds one set per loader: call data once per loader"
        )
    xb, yb = first_batch(loader)
    x_data = pm.Data(x_name, xb, model=model)
    y_data = None
    if yb.shape[1]:
        y_data = pm.Data(y_name, yb[:, 0] if yb.shape[1] == 1 else yb, model=model)
    made[loader] = (x_data, y_data)
    return x_data, y_data


def _names(pair: Pair) -> str:
    return ", ".join(repr(p.name) for p in pair if p is not None)


def _placeholder(model: Foreign, v: Foreign, name: str) -> Foreign:
    if isinstance(v, str):
        v = model[v]
    if not (hasattr(v, "set_value") and hasattr(v, "get_value")):
        raise TypeError(
            f"{name} must be a pm.Data placeholder (a shared variable) or its name; "
            f"got {type(v).__name__}"
        )
    return v


def _placeholders(model: Foreign, loader: DataLoader, x: Foreign, y: Foreign) -> Pair:
    """The placeholders ``loader`` feeds: ``x``/``y``, else those data(loader) made."""
    made: Mapping[DataLoader, Pair] = _PLACEHOLDERS.get(model, {})
    if x is None and y is None:
        if loader in made:
            return made[loader]
        if made:
            others = "; ".join(_names(pair) for pair in made.values())
            raise ValueError(
                f"fit: the model has no placeholders for the loader {loader!r}; data() made "
                f"its placeholders ({others}) for other loaders only. Make this loader's "
                f"with exactbatch.pymc.data(loader) inside the model, or pass x= and y="
            )
        raise ValueError(
            "fit found no placeholders to feed in this model: make them with "
            "exactbatch.pymc.data(loader) inside the model, or pass x= and y= "
            "(pm.Data variables or their names)"
        )
    if x is None:
        raise ValueError("fit got y= but not x=: pass the features' placeholder as x=")
    x = _placeholder(model, x, "x")
    y = None if y is None else _placeholder(model, y, "y")
    for other, pair in made.items():
        if other is not loader and {id(x), id(y)} & {id(p) for p in pair if p is not None}:
            raise ValueError(
                f"fit: x=/y= name placeholders ({_names(pair)}) that data() made for another "
                f"loader ({other!r}), not for {loader!r}: its rows would go into them"
            )
    if x.ndim != 2:
        raise ValueError(f"x must be a 2-D placeholder (batch_size, d); got {x.ndim}-D")
    if y is not None and y.ndim not in (1, 2):
        raise ValueError(f"y must be a 1-D or 2-D placeholder; got {y.ndim}-D")
    return x, y


_KINDS = {"observed": "observed variable", "latent": "latent variable", "potential": "pm.Potential"}


def _check_all_fed(model: Foreign, loaders: list[DataLoader]) -> None:
    """Refuse placeholders of a loader not given to fit that an observed variable reads."""
    fed = {id(ld) for ld in loaders}
    for other, pair in _PLACEHOLDERS.get(model, {}).items():
        if id(other) in fed:
            continue
        readers = reading(model, pair)
        if readers:
            kind, var = readers[0]
            raise ValueError(
                f"fit: {_KINDS[kind]} {var.name!r} reads the placeholders "
                f"({_names(pair)}) of the loader {other!r}, which fit was not given: they "
                f"would hold one batch for the whole fit. Pass every loader the "
                f"likelihood reads: fit([loader1, loader2], n)"
            )


class _Feed:
    """Puts the loader's next batch into the placeholders; a pm.fit callback.

    Called after each optimisation step, it loads the batch for the next
    one; after the last step it loads nothing, so ``n`` steps take exactly
    ``n`` batches. An epoch's end rolls over to the next epoch.
    """

    def __init__(self, loader: DataLoader, x: Foreign, y: Foreign | None, steps: int) -> None:
        self.loader, self.x, self.y, self.steps = loader, x, y, steps
        if loader.d is None:  # a stream not read yet: learn its widths
            first_batch(loader)
        b, d, l = loader.batch_size, loader.d, loader.l  # noqa: E741
        assert d is not None and l is not None  # (known once a batch was read)
        # the loader's own dtypes (next_into writes only into its own)
        self.bx = np.empty((b, d), dtype=loader.dtype)
        self.by = np.empty((b, l), dtype=loader.label_dtype or loader.dtype)
        # a loader with_rows writes its ids too (the fit has no use for them)
        self.buffers: tuple[np.ndarray, ...] = (self.bx, self.by)
        if getattr(loader, "with_rows", False):
            self.buffers += (np.empty(b, dtype=np.int64),)
        if loader.l and y is None:
            raise ValueError(
                f"the loader has {loader.l} label(s) per row but fit got no y placeholder: "
                f"pass y= (or make the placeholders with exactbatch.pymc.data(loader))"
            )
        if y is not None and not loader.l:
            raise ValueError("fit got a y placeholder but the loader has no labels (l = 0)")
        if y is not None and y.ndim == 1 and loader.l != 1:
            raise ValueError(
                f"y is a 1-D placeholder but the loader has {loader.l} labels per row: "
                f"make it 2-D (batch_size, {loader.l})"
            )
        self.batches = 0  # taken from the loader
        self.calls = 0  # steps done
        self.on_epoch: list[Callable[[], None]] = []  # called when a new epoch begins

    def load(self) -> None:
        loader, b = self.loader, self.loader.batch_size
        rows = loader.next_into(*self.buffers)
        if rows == 0:  # the epoch is over: the next one begins
            loader.reset()
            rows = loader.next_into(*self.buffers)
            if rows == 0:
                raise ValueError("the loader's epoch handed out no batch: nothing to feed")
            for hook in self.on_epoch:
                hook()
        check_batch_rows(rows, b)
        self.batches += 1
        self.x.set_value(np.asarray(self.bx, dtype=self.x.dtype))
        if self.y is not None:
            self.y.set_value(np.asarray(_labels(self.by, self.y.ndim), dtype=self.y.dtype))

    def __call__(self, approx: Foreign, losses: np.ndarray | None, i: int) -> None:
        self.calls += 1
        if self.calls < self.steps:
            self.load()


def _check_labels(model: Foreign, feed: _Feed) -> None:
    """Refuse a loader without labels whose batches no likelihood reads."""
    if feed.loader.l == 0 and not any(k == "observed" for k, _ in reading(model, (feed.x,))):
        raise ValueError(
            "fit: the loader has no labels (l = 0) and no observed variable reads its "
            "batches, so no likelihood sees the data (observed=None makes a latent "
            "variable). If the likelihood needs labels, name their columns when making "
            "the source, e.g. parquet_source(path, labels='y'), or pass (x, y) arrays"
        )


def fit(
    loader: DataLoader | list[DataLoader] | tuple[DataLoader, ...],
    n: int,
    method: Any = "advi",
    *,
    model: Any = None,
    x: Any = None,
    y: Any = None,
    random_seed: Any = None,
    progressbar: bool = False,
    optim: Any = None,
    callbacks: Sequence[Callable[..., Any]] | None = None,
    average_last_epoch: bool = False,
    **fit_kwargs: Any,
) -> Any:
    """Fit ``model`` by minibatch VI (``pm.fit``), one new batch of ``loader`` per step.

    Runs ``n`` optimisation steps; step i sees the loader's i-th batch from
    where it stands (a fresh loader: epoch 0's first batch; a restored one:
    the first batch not yet handed out), the next epoch beginning whenever
    one ends. Exactly ``n`` batches are taken (fewer if a callback stops the
    fit early: one per step done), so ``loader.state_dict()`` afterwards
    resumes right after them.

    ``loader`` may also be a list of loaders, for a model whose likelihoods
    read the placeholders of several (one :func:`data` call each): every
    step then gets one new batch of each, into that loader's own
    placeholders, and exactly ``n`` batches are taken from each.

    ``x`` and ``y`` are the placeholders to feed (``pm.Data`` variables or
    their names; one loader only); by default those :func:`data` made for
    the loader in ``model``. ``method``, ``random_seed``, ``progressbar`` and
    ``**fit_kwargs`` (``obj_n_mc``, ``score``, ...) go to ``pm.fit``;
    ``callbacks`` run after each step, before the next batch is loaded, so
    they see the batch that step used.

    ``optim=None`` (the default): Adam on the schedule of
    :mod:`exactbatch.adapters.schedule` (:mod:`~exactbatch.adapters.pymc_schedule`),
    which needs no tuning: a pilot runs the candidate step sizes (0.3, 0.1,
    0.03, 0.01) one after another, each for 2% of the steps from the same
    start, and keeps the largest stable one; the step then decays linearly
    to the tail's step (bounded by the data's N and the batch; see the
    module) at 55% of the steps (a part before the verdict's windows) and stays
    there, with ADVI's ``obj_n_mc`` (the
    guide's draws a step: yours, else 1) at least 4 in that tail. A named
    ``method`` is made into PyMC's Inference object first (with the seed);
    ADVI then starts with sds of 0.1 unless ``start_sigma=`` is given. Any
    other ``optim`` (``pm.adam(learning_rate=1e-3)``; or ``obj_optimizer=``,
    as ``pm.fit`` names it) is used as given, with no pilot.

    Returns PyMC's approximation, with two more attributes: ``convergence``
    (an :class:`exactbatch.adapters.convergence.Convergence`: how far the
    posterior means and sds moved between the fit's last two windows, in
    posterior sds, beyond ``z`` times their noise, and the standard errors of
    the tail's average; above a bound the fit raises
    ``exactbatch.ConvergenceWarning`` with the figures and what it returned)
    and ``step_size`` (the pilot's choice, or None). Its parameters
    (``approx.convergence.returned`` names which): with the default
    schedule, the mean of the iterates of the verdict's two windows (the
    last two fifths of the steps) when the verdict finds no drift, else the
    mean of the last window's iterates (the last fifth of the steps: a
    travelling fit is behind the tail's average, and the tail's step leaves
    each iterate jittering by posterior sds); with an optimiser of
    your own, or a fit too short to judge, the last iterate.
    ``average_last_epoch=True``: the mean of the
    iterates of the last epoch instead - the last ``min(n, len(loader))``
    steps (of the first loader; for a stream of unknown size, those since
    its last epoch began), in the optimiser's own (unconstrained) space, for
    a constant step of your own. Callbacks see the iterates, not the means.

    Refuses a loader whose batches are not all exactly ``batch_size`` rows
    (``drop_last=False`` with a partial last batch, or a stream of unknown
    size without ``drop_last=True``): ``ValueError`` naming ``drop_last``.
    ``ValueError`` naming the variable when a term that reads the
    placeholders is not scaled by ``total_size=loader.total_size`` (an
    observed variable without it or with another N, a ``pm.Potential``, a
    latent variable) or has not the batch's rows on its first axis.
    ``ValueError`` naming the loader when the model has no placeholders for
    it, when ``x=``/``y=`` are another loader's, or when an observed
    variable reads the placeholders of a loader not given to ``fit``.
    """
    pm = _pm()
    n = check_int("n", n, 1)  # optimisation steps
    progressbar = check_flag("progressbar", progressbar)
    average_last_epoch = check_flag("average_last_epoch", average_last_epoch)
    loaders = list(loader) if isinstance(loader, (list, tuple)) else [loader]
    if not loaders:
        raise ValueError("fit got an empty list of loaders")
    if len({id(ld) for ld in loaders}) != len(loaders):
        raise ValueError("fit got the same loader twice: each step would take two batches")
    if len(loaders) > 1 and (x is not None or y is not None):
        raise ValueError(
            "fit got x=/y= with several loaders: make each loader's placeholders with "
            "exactbatch.pymc.data(loader) instead"
        )
    for ld in loaders:
        check_exact_batches(ld, "fit")
        check_one_process(ld, "fit")
    model = pm.modelcontext(model)
    feeds = []
    for ld in loaders:
        xp, yp = _placeholders(model, ld, x, y)
        feeds.append(_Feed(ld, xp, yp, int(n)))
    _check_all_fed(model, loaders)
    for feed in feeds:
        _check_labels(model, feed)
        check_terms(model, feed.loader, (feed.x, feed.y))
    for ld in loaders:
        check_order(ld, "fit")
    if optim is not None and "obj_optimizer" in fit_kwargs:
        raise TypeError("fit got optim= and obj_optimizer=: pass one of them")
    optim = fit_kwargs.pop("obj_optimizer", optim)
    run = Run(
        n, epoch_length(loaders[0]), optim is None, average_last_epoch, feeds[0].loader.total_size
    )
    feeds[0].on_epoch.append(run.new_epoch)
    if run.default:
        method = _inference(pm, method, model, random_seed, fit_kwargs)
        run.remember(method.approx)
        if isinstance(method, pm.KLqp):  # ADVI: more draws of the guide a step in the tail
            run.share_draws(fit_kwargs)
        scaled = getattr(method.approx, "scale_cost_to_minibatch", False)
        if scaled and all(f.loader.total_size for f in feeds):  # the loss over N / B
            run.cost = min(f.loader.batch_size / cast(int, f.loader.total_size) for f in feeds)
    for feed in feeds:
        feed.load()  # batch 0, for step 0
    approx = pm.fit(
        n,
        method=method,
        model=model,
        random_seed=random_seed,
        progressbar=progressbar,
        callbacks=[*(callbacks or ()), run, *feeds],
        obj_optimizer=run.optimizer if run.default else optim,
        **fit_kwargs,
    )
    verdict = run.finish(approx)  # the params set to the estimate it names (returned)
    if hasattr(approx, "params"):
        approx.convergence, approx.step_size = verdict, run.lr0
    warn_if_moving(verdict)
    return approx


def _inference(
    pm: ModuleType,
    method: Foreign,
    model: Foreign,
    random_seed: Foreign,
    fit_kwargs: dict[str, Any],
) -> Foreign:
    """``method`` as an Inference object, made as ``pm.fit`` makes it from a name (so
    that the pilot can note the approximation's start before the first step)."""
    if not isinstance(method, str):
        return method
    choices = {"advi": pm.ADVI, "fullrank_advi": pm.FullRankADVI, "svgd": pm.SVGD,
               "asvgd": pm.ASVGD}  # fmt: skip
    if method.lower() not in choices:
        raise ValueError(f"fit: method must be one of {sorted(choices)}; got {method!r}")
    kwargs = dict(fit_kwargs.pop("inf_kwargs", None) or {})
    for key in ("start", "start_sigma"):
        if fit_kwargs.get(key) is not None:
            kwargs[key] = fit_kwargs.pop(key)
    if random_seed is not None:
        kwargs["random_seed"] = random_seed
    inference = choices[method.lower()](model=model, **kwargs)
    if method.lower() == "advi" and "start_sigma" not in kwargs:
        # sds of 0.1 to start, as NumPyro's AutoNormal: PyMC's log(2) is far from the
        # posterior sds of standardised data, and the sds travel slowest of all
        rho = inference.approx.params[1]
        rho.set_value(np.full_like(rho.get_value(), np.log(np.expm1(START_SD))))
    return inference
