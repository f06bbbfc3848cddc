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
