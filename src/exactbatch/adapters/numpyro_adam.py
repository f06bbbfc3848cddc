"""The default schedule's Adam for ``exactbatch.numpyro.fit``: an optax optimiser whose
step size and per-coordinate cap live in its state, so that each step can set them, and
whose moments can be restarted where the schedule's tail begins.

Adam (Kingma and Ba) moves every coordinate by about the step each step, in the
coordinate's own units, whatever its scale; :func:`adam` caps a coordinate's step at
``cap / sqrt(v)`` (``v`` its bias-corrected second moment: its gradient's noise, which
grows with the coordinate's curvature), so that its jitter about the optimum, in its
own posterior sds, stays what the schedule intends for a standardised one (see
:mod:`exactbatch.adapters.schedule`, :meth:`~exactbatch.adapters.schedule.Plan.cap`).
``cap = inf``: Adam as ``optax.adam``.

optax and JAX are imported on first use.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from exactbatch.adapters.schedule import CANDIDATES
from exactbatch.extras import need

__all__ = ["adam", "default_optim", "restart_moments", "with_schedule"]

BETA1, BETA2, EPS = 0.9, 0.999, 1e-8  # optax.adam's defaults


class AdamState(NamedTuple):
    """The step count and the first and second moments (pytrees like the params)."""

    count: Any
    mu: Any
    nu: Any


def adam(learning_rate: Any, cap: Any) -> Any:
    """Adam whose step of each coordinate is at most ``cap / sqrt(v_hat)`` (an optax
    ``GradientTransformation``; updates are to be added to the params)."""
    import jax
    import jax.numpy as jnp
    import optax

    tree_map = jax.tree_util.tree_map

    def init(params):
        zeros = tree_map(jnp.zeros_like, params)
        return AdamState(jnp.zeros([], jnp.int32), zeros, tree_map(jnp.zeros_like, params))

    def update(grads, state, params=None):
        del params
        mu = tree_map(lambda g, m: BETA1 * m + (1 - BETA1) * g, grads, state.mu)
        nu = tree_map(lambda g, v: BETA2 * v + (1 - BETA2) * g * g, grads, state.nu)
        count = state.count + 1
        c1 = 1 - BETA1 ** count.astype(jnp.float32)
        c2 = 1 - BETA2 ** count.astype(jnp.float32)

        def step(m, v):
            root = jnp.sqrt(v / c2) + EPS
            return -(m / c1) * jnp.minimum(learning_rate, cap / root) / root

        return tree_map(step, mu, nu), AdamState(count, mu, nu)

    return optax.GradientTransformation(init, update)


def default_optim() -> Any:
    """:func:`adam` with its step size and cap in its state (no cap to begin with)."""
    by = "exactbatch.numpyro.fit's default schedule (optim=None)"
    optax = need("optax", by=by, package="optax", extra="numpyro")
    return optax.inject_hyperparams(adam)(learning_rate=CANDIDATES[0], cap=float("inf"))


def with_schedule(state, lr, cap):
    """``state`` (an SVIState of :func:`default_optim`) with its step size set to ``lr``
    and its cap to ``cap``. NumPyro keeps an optax optimiser's state as ``(step,
    (params, optax_state))``."""
    step, (params, opt) = state.optim_state
    hyper = dict(opt.hyperparams)
    hyper["learning_rate"] = lr.astype(hyper["learning_rate"].dtype)
    hyper["cap"] = cap.astype(hyper["cap"].dtype)
    return state._replace(optim_state=(step, (params, opt._replace(hyperparams=hyper))))


def restart_moments(state):
    """``state`` with Adam's moments and step count at zero, its parameters, step size
    and cap kept: where the tail begins Adam starts afresh - its second moment no longer
    remembers the first, far larger gradients, which held a guide's sd back to a creep
    (see :mod:`exactbatch.adapters.schedule`)."""
    import jax

    step, (params, opt) = state.optim_state
    inner = jax.tree_util.tree_map(lambda a: a * 0, opt.inner_state)
    return state._replace(optim_state=(step, (params, opt._replace(inner_state=inner))))
