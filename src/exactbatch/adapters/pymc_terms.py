"""Every term of a PyMC model's log-density that reads the batch, checked before a fit.

A minibatch model is right only when each term that reads the placeholders
counts ``total_size / batch_size`` times and holds one value per row. PyMC
scales an observed variable by its ``total_size`` (by ``total_size /
value.shape[0]``), never a ``pm.Potential`` and never a latent variable, so
an unscaled term fits without an error. Here:

* :func:`reading` finds the terms whose graph reads given placeholders:
  observed variables, latent variables and potentials.
* :func:`check_terms` requires of each such term of a loader: an observed
  variable with ``total_size=loader.total_size`` whose value has the
  batch's rows on its first axis and whose log-density has one value per
  row; no potential and no latent variable (neither can be scaled). When
  ``total_size == batch_size`` (the whole data in every batch) nothing
  needs scaling and only the shapes are checked.

Each failure is a ``ValueError`` naming the variable, the numbers or shapes,
and the fix. Costs: a walk of the model's graph, and one function of the
terms' shapes compiled without C code.

PyMC is imported on first use, not by importing this module.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from exactbatch.hints import Foreign

if TYPE_CHECKING:
    from exactbatch.loader import DataLoader

__all__ = ["check_terms", "reading", "total_size_of"]


def reading(model: Foreign, placeholders: Iterable[Foreign]) -> list[tuple[str, Foreign]]:
    """``(kind, variable)`` for every term of ``model`` whose graph reads any of
    ``placeholders``: kind ``"observed"``, ``"latent"`` or ``"potential"``."""
    from pytensor.graph.traversal import ancestors

    feeds = {id(p) for p in placeholders if p is not None}
    terms = [
        *(("observed", rv) for rv in model.observed_RVs),
        *(("latent", rv) for rv in model.free_RVs),
        *(("potential", p) for p in model.potentials),
    ]
    found: list[tuple[str, Foreign]] = []
    for kind, var in terms:
        value = model.rvs_to_values.get(var)
        roots = [var] if value is None else [var, value]
        if any(id(v) in feeds for v in ancestors(roots)):
            found.append((kind, var))
    return found


def _constant(v: Foreign) -> int | None:
    data = getattr(v, "data", None)  # a pytensor Constant; NoneConst has data None
    return None if data is None or np.ndim(data) else int(data)


def total_size_of(rv: Foreign) -> int | None:
    """The ``total_size`` an observed variable was given, or None."""
    from pymc.variational.minibatch_rv import MinibatchRandomVariable

    if rv.owner is not None and isinstance(rv.owner.op, MinibatchRandomVariable):
        return _constant(rv.owner.inputs[1])
    return None


def check_terms(model: Foreign, loader: DataLoader, placeholders: Iterable[Foreign]) -> None:
    """Refuse a term that reads ``placeholders`` (one loader's) unless it is an observed
    variable scaled by ``total_size=loader.total_size`` with the batch's rows on its
    first axis and one log-density value per row. ``ValueError`` naming it otherwise."""
    big_n, b = loader.total_size, loader.batch_size
    if big_n is None:
        return
    observed: list[Foreign] = []
    for kind, var in reading(model, placeholders):
        name = var.name
        if kind == "observed":
            total = total_size_of(var)
            if total is None and big_n != b:
                raise ValueError(
                    f"fit: observed variable {name!r} reads the streamed batches but has no "
                    f"total_size: its log-likelihood counts batch_size={b} rows, not the "
                    f"dataset's {big_n}. Pass total_size=loader.total_size ({big_n})"
                )
            if total is not None and total != big_n:
                raise ValueError(
                    f"fit: observed variable {name!r} has total_size={total}, but the "
                    f"loader's total_size is {big_n}: the likelihood would count "
                    f"{total}/{b} times instead of {big_n}/{b}. Pass "
                    f"total_size=loader.total_size"
                )
            observed.append(var)
        elif kind == "latent" and big_n != b and _first_axis(model, var) == b:
            raise ValueError(
                _local_latent(var.name, b, "and it reads the batch: one value per row")
            )
        elif big_n != b:
            what = "pm.Potential" if kind == "potential" else "latent variable"
            raise ValueError(
                f"fit: {what} {name!r} reads the streamed batches, but PyMC scales no "
                f"{'potential' if kind == 'potential' else 'latent term'} by total_size: "
                f"it would count batch_size={b} rows, not the dataset's {big_n}. Write it "
                f"as an observed variable with total_size=loader.total_size, e.g. "
                f"pm.CustomDist({name!r}, ..., logp=..., observed=y, "
                f"total_size=loader.total_size)"
            )
    _check_shapes(model, observed, b)
    if big_n != b:  # (over the whole data in every batch, a row's latent is its own)
        _check_row_latents(model, observed, b)


def _check_shapes(model: Foreign, observed: list[Foreign], rows: int) -> None:
    """Each observed value must hold the batch's rows on its first axis (PyMC scales by
    total_size / value.shape[0]) and its log-density one value per row."""
    if not observed:
        return
    from pytensor.compile.function import function

    values = [model.rvs_to_values[rv] for rv in observed]
    logps = model.logp(vars=observed, sum=False, jacobian=False)
    shapes = function(
        model.value_vars,
        [v.shape for v in values] + [lp.shape for lp in logps],
        on_unused_input="ignore",
        mode="FAST_COMPILE",
    )
    point = model.initial_point()
    computed: Foreign = shapes(*(point[v.name] for v in model.value_vars))
    got = [tuple(int(s) for s in shape) for shape in computed]
    for rv, value, logp in zip(observed, got[: len(observed)], got[len(observed) :], strict=True):
        if value[:1] != (rows,) or logp[:1] != (rows,) or value[: len(logp)] != logp:
            raise ValueError(
                f"fit: observed variable {rv.name!r} has a value of shape {value} and a "
                f"log-density of shape {logp}, but total_size scales by total_size / "
                f"(the value's first dimension): both must begin with the batch's "
                f"{rows} rows, one log-density value per row (observe the placeholder as "
                f"exactbatch.pymc.data made it, with labels of shape (batch_size,) for one "
                f"label per row)"
            )


def _check_row_latents(model: Foreign, observed: list[Foreign], rows: int) -> None:
    """Refuse a latent variable of one value per row of the batch (a local latent,
    ``e = pm.Normal("e", 0, 1, shape=batch_size)`` added to each row's mean): the batch's
    rows change each step while ``e`` stays, so each ``e[i]`` would be fitted to a new row
    every step - silently wrong. Found by its effect, not its shape (a vector of
    coefficients may have batch_size entries): moving ``e[i]`` alone moves row ``i``'s
    log-density alone, for each ``i`` tried, where a coefficient moves every row's."""
    if not observed or rows < 2:
        return
    from pytensor.compile.function import function

    point = model.initial_point()
    suspects = [v for v in model.value_vars if np.shape(point[v.name])[:1] == (rows,)]
    if not suspects:
        return
    logps = model.logp(vars=observed, sum=False, jacobian=False)
    per_row = function(model.value_vars, logps, on_unused_input="ignore", mode="FAST_COMPILE")
    args = [np.array(point[v.name]) for v in model.value_vars]
    before = per_row(*args)

    def rows_moved(at: int, i: int) -> list[int]:
        """The rows whose log-density moves when value ``at``'s i-th entry does."""
        moved = list(args)
        moved[at] = args[at].copy()
        moved[at].reshape(rows, -1)[i] += 0.5
        changed = np.zeros(rows, dtype=bool)
        for a, c in zip(per_row(*moved), before, strict=True):
            changed |= (np.asarray(a) != np.asarray(c)).reshape(rows, -1).any(axis=1)
        return [int(r) for r in np.flatnonzero(changed)]

    names = [v.name for v in model.value_vars]
    for v in suspects:
        at = names.index(v.name)
        if all(rows_moved(at, i) == [i] for i in (0, rows - 1)):
            name = model.values_to_rvs[v].name
            raise ValueError(
                _local_latent(name, rows, "and its i-th value moves row i's log-density alone")
            )


def _first_axis(model: Foreign, rv: Foreign) -> int | None:
    """The length of a latent variable's first axis at the model's initial point."""
    value = model.rvs_to_values.get(rv)
    shape = np.shape(model.initial_point()[value.name]) if value is not None else ()
    return shape[0] if shape else None


def _local_latent(name: str, rows: int, why: str) -> str:
    """The refusal of a latent variable of one value per row of the batch."""
    return (
        f"fit: latent variable {name!r} holds one value per row of the batch (its first "
        f"axis is batch_size={rows}, {why}): a local latent. A minibatch fit changes the "
        f"batch's rows every step while {name!r} stays, so each of its values would be "
        f"fitted to a different row each step. PyMC's minibatch ADVI has no local "
        f"latents: integrate it out of the likelihood (a Normal effect added to a Normal "
        f"mean widens the noise: sigma = sqrt(sigma**2 + tau**2)), or fit the whole data "
        f"with pm.fit"
    )
