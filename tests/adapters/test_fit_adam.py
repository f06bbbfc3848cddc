"""The default schedule's Adam, in NumPyro (optax) and PyMC (pytensor): with no cap it
is Adam; in the tail each coordinate's step is capped at cap / sqrt(v_hat); its moments
restart where the tail begins, and the fit helpers restart them there and where the
schedule says (Plan.restarts: the pilot's end, the decay's pieces), only there."""

import math
import warnings

import numpy as np
import pytest

from exactbatch import DataLoader
from exactbatch.adapters.schedule import Plan

GRADS = np.array([[0.5, 300.0], [-1.0, -150.0], [0.25, 900.0], [2.0, -600.0]])


def _capped(grads, lr, cap, budget=math.inf):
    """Capped Adam in NumPy: the updates of each step."""
    m = v = np.zeros(grads.shape[1])
    out = []
    for t, g in enumerate(grads, 1):
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
        root = np.sqrt(v / (1 - 0.999**t)) + 1e-8
        spent = np.minimum(lr * root, cap)
        out.append(-(m / (1 - 0.9**t)) * np.minimum(spent, _level(spent, budget)) / root**2)
    return np.array(out)


def _level(spent, budget):
    """The water level c with sum(min(spent, c)) = budget, exactly (sorted, not bisected)."""
    if spent.sum() <= budget:
        return spent.max()
    low = np.sort(spent)
    for j in range(len(low)):  # j coordinates below the level, the rest at it
        c = (budget - low[:j].sum()) / (len(low) - j)
        if c <= low[j]:
            return c
    raise AssertionError("unreachable")


def test_the_cap_bounds_a_noisy_coordinates_step_and_leaves_the_others():
    capped, free = _capped(GRADS, 0.1, 3.0), _capped(GRADS, 0.1, math.inf)
    assert np.allclose(capped[:, 0], free[:, 0])  # sqrt(v) ~ 1: 3 / 1 > 0.1, no cap
    assert np.all(np.abs(capped[:, 1]) < np.abs(free[:, 1]) / 5)  # sqrt(v) ~ 300-600


def test_the_budget_cuts_the_coordinates_that_spend_most():
    """The sum of step * sqrt(v_hat) over the coordinates is at most the budget (a noise
    sd that every coefficient's jitter feeds is biased by about that sum): the noisy
    coordinate is cut down to the level, the quiet one (a log-sd's gradient is sqrt(N)
    times less noisy) keeps the step it needs to relax."""
    free, tight = _capped(GRADS, 0.1, 3.0), _capped(GRADS, 0.1, 3.0, budget=1.0)
    assert np.allclose(tight[:, 0], free[:, 0])
    assert np.all(np.abs(tight[:, 1]) < np.abs(free[:, 1]) / 2)
    assert np.allclose(_capped(GRADS, 0.1, 3.0, budget=1e6), free)


def test_fill_finds_the_level_in_numpyro_and_pymc():
    jnp = pytest.importorskip("jax.numpy")
    from exactbatch.adapters.numpyro_adam import fill

    rng = np.random.default_rng(0)
    spent = rng.exponential(size=30) ** 2
    for budget in (0.5, spent.sum() / 3, spent.sum() - 1e-3, spent.sum() * 2, math.inf):
        want = _level(spent, budget)
        assert float(fill(jnp.asarray(spent), budget)) == pytest.approx(want, rel=1e-5)
        pytest.importorskip("pytensor")
        from exactbatch.adapters.pymc_schedule import _fill

        got = _fill(spent, np.float64(budget)).eval()
        assert float(got) == pytest.approx(want, rel=1e-9), budget


def test_pymc_fill_is_exact_at_ties_and_edges_and_a_small_graph():
    """PyMC's level in closed form (a sort and a cumulative sum): exact where the level
    falls on a tie, on a single coordinate, at a budget of 0 or below (0, as bisection
    from 0 gives) and at the sum; and a graph of a few nodes, not the 40 unrolled
    halvings whose rewriting was most of a short fit's compile."""
    pytest.importorskip("pytensor")
    import pytensor
    import pytensor.tensor as pt

    from exactbatch.adapters.pymc_schedule import _fill

    cases = [
        (np.array([1.0, 2.0, 2.0, 2.0, 5.0]), 7.0),  # the level at the tie: 2
        (np.array([1.0, 2.0, 2.0, 2.0, 5.0]), 10.0),  # between the tie and 5
        (np.array([3.0]), 1.5),
        (np.array([0.5, 4.0, 0.0, 9.0]), 0.0),
        (np.array([0.5, 4.0, 0.0, 9.0]), 13.5),  # the sum: all fits
    ]
    for spent, budget in cases:
        got = float(_fill(spent, np.float64(budget)).eval())
        assert got == pytest.approx(_level(spent, budget), rel=1e-12, abs=1e-15), budget
        assert np.minimum(spent, got).sum() == pytest.approx(min(budget, spent.sum()))
    assert float(_fill(np.array([1.0, 2.0]), np.float64(-1.0)).eval()) == 0.0
    x, b = pt.dvector("spent"), pt.dscalar("budget")
    # (in pytensor.graph.traversal in newer PyTensor, which deprecates graph.basic's)
    graph = getattr(pytensor.graph, "traversal", None) or pytensor.graph.basic
    nodes = graph.io_toposort([x, b], [_fill(x, b)])
    assert len(nodes) < 40, len(nodes)  # 40 halvings: over 300


def test_numpyro_adam_is_optax_adam_without_cap_and_capped_with_one():
    jnp = pytest.importorskip("jax.numpy")
    optax = pytest.importorskip("optax")
    from exactbatch.adapters.numpyro_adam import adam

    cases = [(math.inf, math.inf, None), (3.0, math.inf, _capped(GRADS, 0.1, 3.0)),
             (3.0, 1.0, _capped(GRADS, 0.1, 3.0, 1.0))]  # fmt: skip
    for cap, budget, want in cases:
        opt, ref = adam(0.1, cap, budget), optax.adam(0.1)
        state, ref_state = opt.init(jnp.zeros(2)), ref.init(jnp.zeros(2))
        for t, g in enumerate(GRADS):
            g = jnp.asarray(g, dtype=jnp.float32)
            step, state = opt.update(g, state)
            if want is None:
                expected, ref_state = ref.update(g, ref_state)
            else:
                expected = want[t]
            assert np.allclose(step, expected, rtol=1e-4), (cap, t, step, expected)


def test_numpyro_restart_zeroes_the_moments_and_keeps_the_rest():
    jax = pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    pytest.importorskip("optax")
    import numpyro.distributions as dist
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    from exactbatch.adapters.numpyro_adam import default_optim, restart_moments, with_schedule

    def model():
        numpyro.sample("z", dist.Normal(3.0, 1.0))

    svi = SVI(model, AutoNormal(model), default_optim(), Trace_ELBO())
    state = svi.init(jax.random.key(0))
    for _ in range(5):
        state, _ = svi.update(state)
    state = with_schedule(state, np.float32(0.05), np.float32(2.0), np.float32(7.0))
    fresh = restart_moments(state)
    inner = fresh.optim_state[1][1].inner_state
    assert int(inner.count) == 0
    assert all(not np.any(leaf) for leaf in jax.tree_util.tree_leaves((inner.mu, inner.nu)))
    assert np.any(jax.tree_util.tree_leaves(state.optim_state[1][1].inner_state.nu)[0])
    old, new = svi.get_params(state), svi.get_params(fresh)
    assert all(np.array_equal(old[k], new[k]) for k in old)
    hyper = fresh.optim_state[1][1].hyperparams
    assert float(hyper["learning_rate"]) == pytest.approx(0.05) and float(hyper["cap"]) == 2
    assert float(hyper["budget"]) == 7


def _regression(n=400, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, 2)).astype(np.float32)
    y = (x @ np.array([1.0, -0.5]) + 0.2 * rng.standard_normal(n)).astype(np.float32)
    return x, y


@pytest.mark.fit
def test_numpyro_fit_restarts_the_moments_where_the_plan_says(monkeypatch):
    """fit's default schedule restarts Adam's moments at the pilot's end (a state whose
    count is the pilot's steps), at the decay's pieces and at the tail's first step, each
    once, and caps the tail from there."""
    jax = pytest.importorskip("jax")
    numpyro = pytest.importorskip("numpyro")
    pytest.importorskip("optax")
    import numpyro.distributions as dist
    from numpyro.infer.autoguide import AutoNormal

    import exactbatch.adapters.numpyro_run as adapter
    from exactbatch.numpyro import fit

    x, y = _regression()
    loader = DataLoader((x, y), 20, seed=0)
    seen, restart = [], adapter.restart_moments

    def spy(state):
        seen.append(int(state.optim_state[1][1].inner_state.count))
        return restart(state)

    monkeypatch.setattr(adapter, "restart_moments", spy)

    def model(xb, yb):
        w = numpyro.sample("w", dist.Normal(0, 1).expand([2]).to_event(1))
        with numpyro.plate("data", 400, subsample_size=xb.shape[0]):
            numpyro.sample("obs", dist.Normal(xb @ w, 0.2), obs=yb[:, 0])

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        r = fit(model, AutoNormal(model), loader, 300, rng_key=jax.random.key(0))
    plan = Plan(300, 20, rows=400)
    # the moments' count at each restart: the steps since the one before (the pilot's)
    assert len(plan.restarts) == 3 and plan.restarts[0] == plan.pilot
    assert seen == [b - a for a, b in zip([0, *plan.restarts[:-1]], plan.restarts, strict=True)]
    assert int(r.state.optim_state[1][1].inner_state.count) == 300 - plan.tail
    hyper = r.state.optim_state[1][1].hyperparams
    assert float(hyper["cap"]) == pytest.approx(plan.cap(299))
    assert float(hyper["budget"]) == pytest.approx(plan.budget(299))


def test_pymc_adam_is_capped_adam_and_resets(tmp_path):
    pytest.importorskip("pymc")
    import pytensor

    from exactbatch.adapters.pymc_schedule import Adam

    param = pytensor.shared(np.zeros(2))
    grad = pytensor.shared(np.zeros(2))
    opt = Adam(0.1)
    step = pytensor.function([], [], updates=opt([grad], [param]))
    for cap, budget in ((math.inf, math.inf), (3.0, math.inf), (3.0, 1.0)):
        opt.reset()
        param.set_value(np.zeros(2))
        opt.cap.set_value(np.asarray(cap, dtype=opt.cap.dtype))
        opt.budget.set_value(np.asarray(budget, dtype=opt.budget.dtype))
        for t, g in enumerate(GRADS):
            before = param.get_value().copy()
            grad.set_value(g)
            step()
            expected = _capped(GRADS, 0.1, cap, budget)[t]
            assert np.allclose(param.get_value() - before, expected, rtol=1e-6), (cap, t)
    assert any(np.any(v) for v in opt.save())
    opt.reset()
    assert not any(np.any(v) for v in opt.save())


def test_pymc_adam_takes_no_step_on_a_gradient_not_finite():
    """A gradient with an inf or a NaN (a likelihood of -inf: a step too large for the
    data, say a column of x100 under a logit) leaves the parameters and the moments as
    they were: they stayed finite, where they became NaN and pm.fit stopped on PyMC's
    parameter check (unstandardised logistic, 3 of 3 seeds); finite steps go on."""
    pytest.importorskip("pymc")
    import pytensor

    from exactbatch.adapters.pymc_schedule import Adam

    params = [pytensor.shared(np.zeros(2)), pytensor.shared(np.zeros(1))]
    grads = [pytensor.shared(np.zeros(2)), pytensor.shared(np.zeros(1))]
    opt = Adam(0.1)
    step = pytensor.function([], [], updates=opt(grads, params))
    grads[0].set_value(GRADS[0])
    grads[1].set_value(np.ones(1))
    step()
    want = [p.get_value().copy() for p in params], opt.save()
    for bad in (np.inf, -np.inf, np.nan):
        grads[1].set_value(np.array([bad]))
        step()
        assert all(np.array_equal(p.get_value(), w) for p, w in zip(params, want[0], strict=True))
        assert all(np.array_equal(a, b) for a, b in zip(opt.save(), want[1], strict=True))
    grads[1].set_value(np.ones(1))
    step()
    assert all(np.isfinite(p.get_value()).all() for p in params)
    assert not np.array_equal(params[0].get_value(), want[0][0])


@pytest.mark.fit
def test_pymc_fit_restarts_the_moments_where_the_plan_says(monkeypatch):
    pm = pytest.importorskip("pymc")

    from exactbatch.adapters import pymc_schedule
    from exactbatch.pymc import data, fit

    x, y = _regression()
    loader = DataLoader((x, y), 20, seed=0)
    with pm.Model() as model:
        xd, yd = data(loader)
        w = pm.Normal("w", 0, 1, shape=2)
        pm.Normal("obs", xd @ w, 0.2, observed=yd, total_size=400)
    seen, reset = [], pymc_schedule.Adam.reset
    runs = []
    init = pymc_schedule.Run.__init__

    def keep(self, *args, **kw):
        init(self, *args, **kw)
        runs.append(self)

    def spy(self):
        seen.append((runs[0].calls, float(self.cap.get_value())))
        reset(self)

    monkeypatch.setattr(pymc_schedule.Run, "__init__", keep)
    monkeypatch.setattr(pymc_schedule.Adam, "reset", spy)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit(loader, 300, model=model, random_seed=0)
    plan = runs[0].plan
    # the pilot's three restarts (each candidate from the start), then the plan's: the
    # pilot's end (the kept candidate's moments, loaded, are reset), the decay's, the tail's
    assert plan.restarts[0] == plan.pilot == 24 and plan.restarts[-1] == plan.tail
    assert [calls for calls, _ in seen] == [6, 12, 18, *plan.restarts]
    assert all(cap == math.inf for _, cap in seen)  # the cap is set after the reset
    # in the loss's units: PyMC divides it by N / B (scale_cost_to_minibatch)
    cap, budget = plan.cap(plan.tail) * 20 / 400, plan.budget(plan.tail) * 20 / 400
    assert float(runs[0].optimizer.cap.get_value()) == pytest.approx(cap)
    assert float(runs[0].optimizer.budget.get_value()) == pytest.approx(budget)


def test_pymc_adam_fresh_tiny_gradients_several_parameters_and_float32():
    """A fresh Adam's first steps (no reset before: its step count starts at 0), a
    coordinate whose gradients are far below epsilon (its root is sqrt(v_hat) + 1e-8),
    the state of every parameter (the count, then each one's two moments) saved and
    reset, and a float32 model (floatX float32: every update stays float32)."""
    pytest.importorskip("pymc")
    import pytensor

    from exactbatch.adapters.pymc_schedule import Adam

    grads_now = np.column_stack([GRADS[:, 0], GRADS[:, 1] * 1e-11])  # the second: ~1e-9
    params = [pytensor.shared(np.zeros(1)), pytensor.shared(np.zeros(1))]
    grads = [pytensor.shared(np.zeros(1)), pytensor.shared(np.zeros(1))]
    opt = Adam(0.1)
    step = pytensor.function([], [], updates=opt(grads, params))
    want = _capped(grads_now, 0.1, math.inf)
    for t, g in enumerate(grads_now):
        before = [p.get_value().copy() for p in params]
        for shared, value in zip(grads, g, strict=True):
            shared.set_value(np.array([value]))
        step()
        moved = [float(p.get_value()[0] - b[0]) for p, b in zip(params, before, strict=True)]
        assert np.allclose(moved, want[t], rtol=1e-6, atol=0), t
    saved = opt.save()
    assert len(saved) == 5 and float(saved[0]) == len(GRADS)  # count, (m, v) per parameter
    assert all(np.any(v) for v in saved)
    opt.reset()
    assert len(opt.save()) == 5 and not any(np.any(v) for v in opt.save())
    with pytensor.config.change_flags(floatX="float32"):
        param = pytensor.shared(np.zeros(2, dtype=np.float32))
        grad = pytensor.shared(np.asarray(GRADS[0], dtype=np.float32))
        opt = Adam(0.1)
        step = pytensor.function([], [], updates=opt([grad], [param]))
        step()
        assert param.get_value().dtype == np.float32
        assert np.allclose(param.get_value(), _capped(GRADS[:1], 0.1, math.inf)[0], rtol=1e-5)
        assert all(v.dtype == np.float32 for v in opt.save())


def test_numpyro_adam_counts_in_int32_and_adds_epsilon_to_each_root():
    """Its step count is an int32 (exact however long the fit), and a coordinate whose
    gradients are far below epsilon moves as capped Adam in NumPy says (its root is
    sqrt(v_hat) + 1e-8, not less)."""
    jnp = pytest.importorskip("jax.numpy")
    pytest.importorskip("optax")
    from exactbatch.adapters.numpyro_adam import adam

    grads = np.column_stack([GRADS[:, 0], GRADS[:, 1] * 1e-11])
    opt = adam(0.1, math.inf)
    state = opt.init(jnp.zeros(2))
    assert state.count.dtype == jnp.int32 and state.count.shape == ()
    want = _capped(grads, 0.1, math.inf)
    for t, g in enumerate(grads):
        step, state = opt.update(jnp.asarray(g), state)
        assert np.allclose(step, want[t], rtol=1e-4, atol=0), t
    assert state.count.dtype == jnp.int32 and int(state.count) == len(GRADS)


def test_numpyro_default_optim_without_optax_says_what_to_install(monkeypatch):
    import sys

    from exactbatch.adapters.numpyro_adam import default_optim

    monkeypatch.setitem(sys.modules, "optax", None)  # (import optax: ImportError)
    want = (
        "exactbatch.numpyro.fit's default schedule (optim=None) needs optax: "
        "pip install 'exactbatch[numpyro]'"
    )
    with pytest.raises(ImportError) as e:
        default_optim()
    assert str(e.value) == want
