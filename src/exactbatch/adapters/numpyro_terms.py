"""Every term of a NumPyro model's likelihood, checked on one batch before a fit.

A minibatch ELBO is right only when each term that reads the batch counts
``total_size / batch_size`` times and holds one value per row. NumPyro
scales a site by its enclosing ``plate(name, N, subsample_size=B)`` and
broadcasts whatever shapes it is given, so a wrong plate, a term outside
every plate, or labels of shape (B, 1) against a location of shape (B,)
(a (B, B) log-density: B·B terms) all fit without an error. Here:

* :func:`trace_model` traces the model once on a batch (plates subsample
  with a fixed key).
* :func:`check_plates` checks every subsample plate that encloses an
  observed site and covers the batch's rows: size ``total_size``,
  subsample size ``batch_size``.
* :func:`check_terms` finds the observed sites (``numpyro.factor`` too)
  whose log-density depends on the batch, from the model's jaxpr (a
  structural dependency, not a numeric test), and requires of each a
  subsample plate of the batch's rows around it, a log-density of exactly
  the plates' shape, and one value per row before the plate broadcasts it.

Each failure is a ``ValueError`` naming the site or plate, the shapes or
numbers, and the usual fix. Costs: two traces of the model on one batch
(one concrete, one abstract); nothing is compiled.

NumPyro and JAX are imported on first use, not by importing this module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from exactbatch.hints import Foreign

if TYPE_CHECKING:
    import jax

    from exactbatch.loader import DataLoader

__all__ = [
    "LABELS_HINT",
    "check_latents",
    "check_plates",
    "check_row_latents",
    "check_terms",
    "trace_model",
]

LABELS_HINT = (
    "the loader has no labels (l = 0): yb has 0 columns. If the likelihood needs labels, "
    "name their columns when making the source, e.g. parquet_source(path, labels='y'), or "
    "pass (x, y) arrays"
)

# A site of a NumPyro trace (its dict: "type", "name", "fn", "value", "args", "scale",
# "cond_indep_stack", ...), and a trace: the sites by name
Site = dict[str, Any]
Trace = Mapping[str, Site]
Model = Callable[..., object]  # a NumPyro model: model(xb, yb, **model_kwargs)


def _handlers() -> Foreign:
    from numpyro import handlers

    return handlers


def trace_model(
    model: Model,
    xb: np.ndarray,
    yb: np.ndarray,
    model_kwargs: dict[str, Any],
    loader: DataLoader,
) -> Trace:
    """The model's trace on one batch (plates subsample with a fixed key); a failure
    explained by a plate of the wrong subsample size, or by missing labels, says so."""
    handlers = _handlers()
    tracer = handlers.trace(handlers.seed(model, rng_seed=0))
    try:
        trace: Trace = tracer.get_trace(xb, yb, **model_kwargs)
        return trace
    except Exception as e:
        total = loader.total_size  # (known: fit checked it)
        for name, site in tracer.trace.items():  # the sites recorded before the failure
            if site["type"] == "plate" and total is not None and site["args"][0] == total:
                size, subsample = site["args"][:2]
                _check_plate(name, size, subsample, total, xb.shape[0], None)
        if loader.l == 0:
            raise ValueError(
                f"fit: tracing the model on the first batch failed, and {LABELS_HINT}"
            ) from e
        raise


def _check_plate(
    name: str,
    size: int,
    subsample: int | None,
    total_size: int,
    rows: int,
    observed: str | None,
    scale: float | None = None,
) -> bool:
    """Does plate ``name`` cover the batch's rows? ``ValueError`` if it does with the
    wrong size or subsample size."""
    subsample = size if subsample is None else subsample
    if size != total_size and subsample != rows:
        return False  # another plate (over labels, say): not the batch's rows
    if size != total_size:
        counts = size / subsample * (scale or 1.0)
        if scale is not None and abs(counts - total_size / rows) <= 1e-6 * counts:
            raise ValueError(
                f"fit: the model's plate {name!r} has size {size}, not the loader's "
                f"total_size {total_size}; observed site {observed!r} is scaled by hand "
                f"(handlers.scale: {scale:g}), so each row counts {counts:g} times, as it "
                f"should, but fit checks the dataset's size through the plate. Use "
                f"numpyro.plate({name!r}, loader.total_size, subsample_size=loader.batch_size) "
                f"and drop handlers.scale (with both, each row would count "
                f"({total_size}/{rows})^2 times)"
            )
        raise ValueError(
            f"fit: the model's plate {name!r} has size {size}, but the loader's "
            f"total_size is {total_size}: observed site {observed!r} would count "
            f"{counts:g} times per row instead of {total_size}/{rows}. Use "
            f"numpyro.plate({name!r}, loader.total_size, subsample_size=loader.batch_size)"
        )
    if subsample != rows:
        raise ValueError(
            f"fit: the model's plate {name!r} has subsample_size {subsample}, but the "
            f"loader's batches have {rows} rows: pass subsample_size=loader.batch_size ({rows})"
        )
    return True


def _observed(trace: Trace) -> list[Site]:
    return [s for s in trace.values() if s["type"] == "sample" and s.get("is_observed")]


def check_plates(trace: Trace, total_size: int, rows: int, l: int = 1) -> list[str]:  # noqa: E741
    """Check the subsample plates of a model's ``trace`` on a batch of ``rows`` rows
    against the dataset's ``total_size``; returns the names of the plates checked.

    A plate counts when it encloses an observed site and covers the batch's rows: its
    size is ``total_size`` or its subsample size is ``rows``. ``ValueError`` naming the
    plate and both numbers when its size is not ``total_size`` or its subsample size is
    not ``rows``; ``ValueError`` when no plate counts (the likelihood is not scaled).
    """
    plates = {name: site for name, site in trace.items() if site["type"] == "plate"}
    checked: list[str] = []
    for site in _observed(trace):
        for frame in site.get("cond_indep_stack", ()):
            plate = plates.get(frame.name)
            if plate is None or frame.name in checked:
                continue
            size, subsample = plate["args"][:2]
            scale = site.get("scale")
            if _check_plate(frame.name, size, subsample, total_size, rows, site["name"], scale):
                checked.append(frame.name)
    if not checked:
        _check_hand_scaled(trace, total_size, rows)
        hint = f"; {LABELS_HINT}" if l == 0 else ""
        raise ValueError(
            f"fit: no plate of size total_size={total_size} encloses an observed site, so the "
            f"likelihood is not scaled to the dataset: observe the batch inside "
            f"numpyro.plate('data', loader.total_size, subsample_size=loader.batch_size)"
            f"{hint}"
        )
    return checked


def _check_hand_scaled(trace: Trace, total_size: int, rows: int) -> None:
    """An observed site in no plate but scaled by hand to total_size / rows counts right:
    say so (it is refused because fit checks N and each term's shape through the plate)."""
    want = total_size / rows
    for site in _observed(trace):
        scale = site.get("scale")
        if scale is not None and abs(float(scale) - want) <= 1e-6 * want:
            raise ValueError(
                f"fit: observed site {site['name']!r} is in no plate of size total_size="
                f"{total_size}, but is scaled by hand (handlers.scale: {float(scale):g} = "
                f"{total_size}/{rows}), so the batch counts as the dataset, as it should; "
                f"fit checks the dataset's size and one term per row through the plate. "
                f"Observe one term per row inside numpyro.plate('data', loader.total_size, "
                f"subsample_size=loader.batch_size) and drop handlers.scale (with both, each "
                f"row would count ({total_size}/{rows})^2 times)"
            )


def _reading_batch(
    model: Model, xb: np.ndarray, yb: np.ndarray, model_kwargs: dict[str, Any]
) -> set[str]:
    """The observed sites whose log-density depends on ``xb`` or ``yb``: a forward walk
    of the model's jaxpr from its two inputs (an equation with a dependent input makes
    all its outputs dependent; nested jaxprs count as one equation, which can only add)."""
    import jax
    from jax.extend.core import Var

    handlers = _handlers()
    names: list[str] = []

    def log_densities(xb: jax.Array, yb: jax.Array) -> list[jax.Array]:
        trace = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(xb, yb, **model_kwargs)
        sites = _observed(trace)
        names[:] = [s["name"] for s in sites]
        return [s["fn"].log_prob(s["value"]) for s in sites]

    jaxpr = jax.make_jaxpr(log_densities)(xb, yb).jaxpr
    dependent = set(jaxpr.invars)
    for eqn in jaxpr.eqns:
        if any(isinstance(v, Var) and v in dependent for v in eqn.invars):
            dependent.update(eqn.outvars)
    return {
        name
        for name, v in zip(names, jaxpr.outvars, strict=True)
        if isinstance(v, Var) and v in dependent
    }


def _unbroadcast(fn: Foreign) -> Foreign:
    """The site's distribution as the model wrote it, before its plates expanded it."""
    from numpyro.distributions import ExpandedDistribution

    while isinstance(fn, ExpandedDistribution):
        fn = fn.base_dist
    return fn


_SHAPE_FIX = (
    "The loader's labels come as (batch_size, l): observe one label as obs=yb[:, 0] (or make "
    "the source with labels= of one column); several columns per row as one event "
    "(.to_event(1)) or in a plate of their own"
)


def check_terms(
    model: Model,
    trace: Trace,
    xb: np.ndarray,
    yb: np.ndarray,
    model_kwargs: dict[str, Any],
    plates: list[str],
    total_size: int,
) -> None:
    """Check every observed site of ``trace`` whose log-density depends on the batch.

    ``plates`` are the subsample plates of the batch's rows (from :func:`check_plates`).
    Each such site must lie in one of them (else it is not scaled to ``total_size``);
    its log-density must have exactly the shape its plates make (size at each plate's
    dim, 1 elsewhere: no term counted twice); and, before the plates broadcast it, one
    value per row (a term the same for every row would count batch_size times).
    ``ValueError`` naming the site, the shapes and the fix otherwise.
    """
    rows = xb.shape[0]
    reading = _reading_batch(model, xb, yb, model_kwargs)
    for site in _observed(trace):
        name = site["name"]
        if name not in reading:
            continue  # a term of the parameters alone (a pseudo-observation): not scaled
        frames = site.get("cond_indep_stack", ())
        batch = [f for f in frames if f.name in plates]
        if not batch:
            raise ValueError(
                f"fit: observed site {name!r} depends on the batch, but no plate of size "
                f"total_size={total_size} encloses it, so its log-density counts "
                f"{rows} rows, not the dataset's {total_size}: observe it inside "
                f"numpyro.plate('data', loader.total_size, subsample_size=loader.batch_size)"
                f" (the plate of the other sites)"
            )
        _check_scale(site, batch, total_size, rows)
        width = max(-f.dim for f in frames)
        want = [1] * width
        for f in frames:
            want[f.dim] = f.size
        got = tuple(site["fn"].log_prob(site["value"]).shape)
        extra, core = got[: max(0, len(got) - width)], got[max(0, len(got) - width) :]
        if any(s != 1 for s in extra) or (1,) * (width - len(core)) + core != tuple(want):
            value = tuple(getattr(site["value"], "shape", ()))
            raise ValueError(
                f"fit: observed site {name!r} has a log-density of shape {got}, but the "
                f"plates around it ({', '.join(repr(f.name) for f in frames)}) make "
                f"{tuple(want)}: its value of shape {value} broadcasts against the "
                f"distribution's batch shape {tuple(site['fn'].batch_shape)}, so "
                f"{_terms(got)} terms count as if they were {_terms(want)}. {_SHAPE_FIX}"
            )
        own = tuple(_unbroadcast(site["fn"]).log_prob(site["value"]).shape)
        dim = next(f.dim for f in batch)
        if rows > 1 and (len(own) < -dim or own[dim] != rows):
            raise ValueError(
                f"fit: observed site {name!r} depends on the batch but its log-density, of "
                f"shape {own}, has no value per row (dim {dim} of plate "
                f"{batch[0].name!r}): the plate repeats it for each of the {rows} rows, so "
                f"it counts {rows} x {total_size}/{rows} times. Give it one term per row: no "
                f"sum or mean over the batch (numpyro.factor(name, per_row_terms))"
            )


def _check_scale(site: Site, batch: list[Foreign], total_size: int, rows: int) -> None:
    """An observed site in the batch's plate counts total_size / rows times per row: a
    ``handlers.scale`` around the subsample plate multiplies the plate's own scaling."""
    scale = site.get("scale")
    want = total_size / rows
    if scale is None or abs(float(scale) - want) <= 1e-6 * want:
        return
    extra = float(scale) / want
    raise ValueError(
        f"fit: observed site {site['name']!r} counts {float(scale):g} times per row, not "
        f"total_size/batch_size = {total_size}/{rows} = {want:g}: the subsample plate "
        f"{batch[0].name!r} already scales it by {want:g}, and a handlers.scale around it "
        f"multiplies that by {extra:g} (handlers.scale(N/B) counts the data "
        f"({total_size}/{rows})^2 times). Drop handlers.scale: the plate's scaling is the "
        f"whole of it (fit fits the posterior, not a tempered one)"
    )


def check_latents(trace: Trace, plates: list[str], total_size: int) -> None:
    """Refuse a latent site inside the batch's plate, or any subsample plate of the
    dataset's ``total_size`` rows (a latent per row).

    The plate draws its own subsample indices, not the batch's row ids, so the
    guide's parameter of row r would be fitted to whichever rows the step drew."""
    rows = set(plates)
    for name, site in trace.items():
        if site["type"] == "plate":
            size, subsample = site["args"][:2]
            if size == total_size and subsample is not None and subsample < size:
                rows.add(name)
    for site in trace.values():
        if site["type"] != "sample" or site.get("is_observed"):
            continue
        inside = [f.name for f in site.get("cond_indep_stack", ()) if f.name in rows]
        if inside:
            raise ValueError(
                f"fit: latent site {site['name']!r} lies inside the data plate "
                f"{inside[0]!r}: a latent per row (a local latent). fit does not support "
                f"it: the plate subsamples indices of its own, not the batch's rows, so "
                f"each row's latent would be fitted to other rows' data (measured: tens of "
                f"posterior sds off, with no sign of it). Integrate it out of the "
                f"likelihood, or run numpyro's SVI yourself with the batch's row ids as "
                f"the plate's indices in model and guide: with "
                f"numpyro.handlers.substitute(data={{{inside[0]!r}: row_ids}}) around "
                f"numpyro.plate({inside[0]!r}, N, subsample_size=B) and around the guide's "
                f"call, row_ids from a loader made with with_rows=True"
            )


def check_row_latents(
    model: Model,
    trace: Trace,
    xb: np.ndarray,
    yb: np.ndarray,
    model_kwargs: dict[str, Any],
) -> None:
    """Refuse a latent whose shape follows the batch's row count (a latent per row
    outside any plate: ``expand([xb.shape[0]])``, or a location of ``xb @ w``).

    Such a latent is one parameter vector of the guide, its k-th entry paired with the
    batch's k-th row, a different row each step. Found by tracing the model's shapes
    (abstractly: nothing is computed) on the batch with its first row once more; a
    model that cannot take that batch is not judged here."""
    import jax
    import jax.numpy as jnp

    handlers = _handlers()

    def latents(xb: jax.Array, yb: jax.Array) -> dict[str, jax.Array]:
        traced: Trace = handlers.trace(handlers.seed(model, rng_seed=0)).get_trace(
            xb, yb, **model_kwargs
        )
        return {n: s["value"] for n, s in traced.items() if _latent(s)}

    try:
        grown = jax.eval_shape(latents, *(jnp.concatenate([a, a[:1]]) for a in (xb, yb)))
    except Exception:  # a model of a fixed batch size: not judged here
        return
    for name, site in trace.items():
        if not _latent(site) or name not in grown:
            continue
        before, after = tuple(jnp.shape(site["value"])), tuple(grown[name].shape)
        if before != after:
            raise ValueError(
                f"fit: latent site {name!r} has shape {before} on a batch of {xb.shape[0]} "
                f"rows and {after} on {xb.shape[0] + 1}: a latent per row. The guide "
                f"holds one vector for it, its k-th entry fitted to the k-th row of "
                f"whichever batch a step draws, so each entry is fitted to other rows' data "
                f"and fit does not support it. Integrate it out of the likelihood, or fit "
                f"it by hand as a latent in the data plate, the batch's row ids its "
                f"indices in model and guide (numpyro.handlers.substitute(data={{'data': "
                f"row_ids}}) around the plate and the guide's call; row_ids from a loader "
                f"made with with_rows=True)"
            )


def _latent(site: Site) -> bool:
    return bool(site["type"] == "sample" and not site.get("is_observed"))


def _terms(shape: Iterable[int]) -> int:
    out = 1
    for s in shape:
        out *= int(s)
    return out
