"""The default schedule's Adam for ``exactbatch.numpyro.fit``: an optax optimiser whose
step size and per-coordinate cap live in its state, so that each step can set them, and
whose moments can be restarted where the schedule's tail begins.

Adam (Kingma and Ba) moves every coordinate by about the step each step, in the
coordinate's own units, whatever its scale; :func:`adam` caps a coordinate's step at
``cap / sqrt(v)`` (``v`` its bias-corrected second moment: its gradient's noise, which
grows with the coordinate's curvature), so that its jitter about the optimum, in its
own posterior sds, stays what the schedule intends for a standardised one (see
:mod:`exactbatch.adapters.schedule`, :meth:`~exactbatch.adapters.schedule.Plan.cap`).
And ``sum(step * sqrt(v))`` over the coordinates stays within a ``budget``: the
jitter's bias on a latent the others feed (a noise sd, through the residuals) grows
with that sum (:meth:`~exactbatch.adapters.schedule.Plan.budget`); the coordinates
that spend most are cut down to a common level (:func:`fill`), the others - a guide's
log-sds, whose gradient noise is ``sqrt(N)`` times smaller - keep the step they need
to relax.
``cap = budget = inf``: Adam as ``optax.adam``.

optax and JAX are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from exactbatch.adapters.schedule import CANDIDATES
from exactbatch.extras import need
from exactbatch.hints import Foreign, PyTree

if TYPE_CHECKING:
    import jax

__all__ = ["adam", "default_optim", "fill", "restart_moments", "with_schedule"]

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8  # optax.adam's defaults


class AdamState(NamedTuple):
    """The step count and the first and second moments (pytrees like the params)."""

    # an int32 jax.Array (held as a pytree: as jax.Array it would clash with tuple.count)
    count: PyTree
    mu: PyTree
    nu: PyTree


def adam(learning_rate: Any, cap: Any, budget: Any = float("inf")) -> Any:
    """Adam whose step of each coordinate is at most ``cap / sqrt(v_hat)``, and at most
    ``c / sqrt(v_hat)`` with ``c`` the level at which the sum of each one's step times its
    ``sqrt(v_hat)`` is ``budget`` (an optax ``GradientTransformation``; updates are to be
    added to the params)."""
    import jax
    import jax.numpy as jnp
    import optax

    tree_map, leaves = jax.tree_util.tree_map, jax.tree_util.tree_leaves

    def init(params: PyTree) -> AdamState:
        zeros = tree_map(jnp.zeros_like, params)
        return AdamState(jnp.zeros([], jnp.int32), zeros, tree_map(jnp.zeros_like, params))

    def update(grads: PyTree, state: AdamState, params: PyTree = None) -> tuple[PyTree, AdamState]:
        del params
        mu = tree_map(lambda g, m: BETA1 * m + (1 - BETA1) * g, grads, state.mu)
        nu = tree_map(lambda g, v: BETA2 * v + (1 - BETA2) * g * g, grads, state.nu)
        count = state.count + 1
        c1 = 1 - BETA1 ** count.astype(jnp.float32)
        c2 = 1 - BETA2 ** count.astype(jnp.float32)

        roots = tree_map(lambda v: jnp.sqrt(v / c2) + EPS, nu)
        spent = tree_map(lambda r: jnp.minimum(learning_rate * r, cap), roots)  # step * root
        level = fill(jnp.concatenate([jnp.ravel(a) for a in leaves(spent)]), budget)
        updates = tree_map(lambda m, a, r: -(m / c1) * jnp.minimum(a, level) / r / r, mu, spent,
                           roots)  # fmt: skip
        return updates, AdamState(count, mu, nu)

    return optax.GradientTransformation(init, update)


def fill(spent: jax.Array, budget: jax.Array | float) -> jax.Array:
    """The level ``c`` at which ``sum(min(spent, c))`` is ``budget`` (the largest of
    ``spent`` when it all fits): the coordinates that spend most are cut down to it, the
    others keep their step. Bisection, 40 halvings (jax.numpy)."""
    import jax
    import jax.numpy as jnp

    def halve(_: int, bounds: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
        lo, hi = bounds
        mid = (lo + hi) / 2
        over = jnp.minimum(spent, mid).sum() > budget
        return jnp.where(over, lo, mid), jnp.where(over, mid, hi)

    top = spent.max()
    lo, _ = jax.lax.fori_loop(0, 40, halve, (jnp.zeros_like(top), top))
    level: jax.Array = jnp.where(spent.sum() <= budget, top, lo)
    return level


def default_optim() -> Any:
    """:func:`adam` with its step size and cap in its state (no cap to begin with)."""
    by = "exactbatch.numpyro.fit's default schedule (optim=None)"
    optax = need("optax", by=by, package="optax", extra="numpyro")
    inf = float("inf")
    return optax.inject_hyperparams(adam)(learning_rate=CANDIDATES[0], cap=inf, budget=inf)


def with_schedule(state: Foreign, lr: jax.Array, cap: jax.Array, budget: jax.Array) -> Foreign:
    """``state`` (an SVIState of :func:`default_optim`) with its step size set to ``lr``,
    its cap to ``cap`` and its budget to ``budget``. NumPyro keeps an optax optimiser's
    state as ``(step, (params, optax_state))``."""
    step, (params, opt) = state.optim_state
    hyper = dict(opt.hyperparams)
    for key, value in (("learning_rate", lr), ("cap", cap), ("budget", budget)):
        hyper[key] = value.astype(hyper[key].dtype)
    return state._replace(optim_state=(step, (params, opt._replace(hyperparams=hyper))))


def restart_moments(state: Foreign) -> Foreign:
    """``state`` with Adam's moments and step count at zero, its parameters, step size
    and cap kept: where the tail begins Adam starts afresh - its second moment no longer
    remembers the first, far larger gradients, which held a guide's sd back to a creep
    (see :mod:`exactbatch.adapters.schedule`)."""
    import jax

    step, (params, opt) = state.optim_state
    inner = jax.tree_util.tree_map(lambda a: a * 0, opt.inner_state)
    return state._replace(optim_state=(step, (params, opt._replace(inner_state=inner))))
