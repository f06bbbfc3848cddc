"""The fit helpers' defaults on a hierarchical model, against an independent reference.

Group intercepts with a global level: ``G`` groups (``--groups``, 20), the
group of each row a column of the loader's features (column 0, as a float:
the model casts it), 3 standard normal features after it::

    mu ~ Normal(0, 1)      tau ~ HalfNormal(1)      sigma ~ HalfNormal(1)
    a[g] ~ Normal(mu, tau), g = 1..G                 w ~ Normal(0, 1), 3 of them
    y ~ Normal(a[group] + x @ w, sigma)              (the data plate, N rows)

simulated with ``mu = 0.3``, ``tau = 0.5``, ``w = (1, -2, 0.5)``, ``sigma = 1``.
``a`` is a global latent (one per group, outside the data plate), so the
fits run as users write the model: ``exactbatch.numpyro.fit`` (AutoNormal)
and ``exactbatch.pymc.fit`` (ADVI), defaults.

**The reference**: the optimum of the same mean-field Gaussian family (over
``mu, log tau, a, w, log sigma``, the guides' unconstrained space) on the full
data, by L-BFGS on the ELBO in closed form (every expectation of a Gaussian
likelihood and of the log-normal ``tau``, ``sigma`` is exact: no Monte Carlo
noise). It is checked independently of its own algebra: NumPyro's
``Trace_ELBO`` with many particles on the full data, at the optimum and at a
perturbed point, must agree with the closed form within its Monte Carlo error
(printed).

Each fit: the largest distance of a posterior mean from the reference in the
reference's sds, the sd ratios, the verdict; silently wrong / false alarm as in
``fit_statistics.py --grid``::

    PYTHONPATH=src .venv/bin/python bench/fit_hierarchical.py --n 10000 --b 256 \\
        --steps 5000 --seeds 1 [--skip pymc]
"""

from __future__ import annotations

import argparse
import itertools
import time
import warnings

import numpy as np
from fit_statistics import _record_warnings, _warned

KEYS = ("a", "mu", "sigma", "tau", "w")  # the flat order: the guides' sorted names
TRUE_W = np.array([1.0, -2.0, 0.5])


def synthetic(n: int, groups: int, seed: int = 123):
    """Features ``[group, x1, x2, x3]`` (the group a float column) and labels."""
    rng = np.random.default_rng(seed)
    a = 0.3 + 0.5 * rng.standard_normal(groups)
    g = rng.integers(groups, size=n)
    x = rng.standard_normal((n, 3))
    y = a[g] + x @ TRUE_W + rng.standard_normal(n)
    return np.c_[g.astype(np.float64), x], y


def numpyro_model(groups: int):
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def model(xb, yb, N):  # noqa: N803
        mu = numpyro.sample("mu", dist.Normal(0, 1))
        tau = numpyro.sample("tau", dist.HalfNormal(1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(1))
        w = numpyro.sample("w", dist.Normal(0, 1).expand([3]).to_event(1))
        with numpyro.plate("groups", groups):
            a = numpyro.sample("a", dist.Normal(mu, tau))
        g = xb[:, 0].astype(jnp.int32)
        with numpyro.plate("data", N, subsample_size=xb.shape[0]):
            numpyro.sample("obs", dist.Normal(a[g] + xb[:, 1:] @ w, sigma), obs=yb[:, 0])

    return model


def pymc_model(groups: int, loader):
    import pymc as pm
    import pytensor.tensor as pt

    from exactbatch.pymc import data

    with pm.Model() as model:
        x, y = data(loader)
        mu = pm.Normal("mu", 0, 1)
        tau = pm.HalfNormal("tau", 1)
        sigma = pm.HalfNormal("sigma", 1)
        w = pm.Normal("w", 0, 1, shape=3)
        a = pm.Normal("a", mu, tau, shape=groups)
        eta = a[pt.cast(x[:, 0], "int64")] + x[:, 1:] @ w
        pm.Normal("obs", eta, sigma, observed=y, total_size=loader.total_size)
    return model


def _split(v, groups: int):
    """(a, mu, log sigma, log tau, w) from a flat vector in the order of KEYS."""
    return v[:groups], v[groups], v[groups + 1], v[groups + 2], v[groups + 3 :]


def neg_elbo(theta, x, y, groups: int):
    """The full-data negative ELBO of the mean-field Gaussian ``theta = (locs, log
    scales)`` over (a, mu, log sigma, log tau, w), in closed form (jax.numpy)."""
    import jax.numpy as jnp

    p = groups + 6
    loc, log_s = theta[:p], theta[p:]
    s = jnp.exp(log_s)
    (ma, mm, mu_s, mu_t, mw), (sa, sm, ss, st, sw) = _split(loc, groups), _split(s, groups)
    g = x[:, 0].astype(jnp.int32)
    mean = ma[g] + x[:, 1:] @ mw
    var = sa[g] ** 2 + (x[:, 1:] ** 2) @ (sw**2)
    resid = ((y - mean) ** 2 + var).sum()
    ll = -0.5 * len(y) * np.log(2 * np.pi) - len(y) * mu_s
    ll = ll - 0.5 * jnp.exp(-2 * mu_s + 2 * ss**2) * resid
    half_normal = 0.5 * np.log(2 / np.pi)  # HalfNormal(1) on exp(u), with its Jacobian

    def log_half_normal(m, sd):
        return half_normal - 0.5 * jnp.exp(2 * m + 2 * sd**2) + m

    normal = -0.5 * np.log(2 * np.pi)
    prior = 4 * normal - 0.5 * (mm**2 + sm**2) - 0.5 * ((mw**2 + sw**2).sum())
    prior = prior + log_half_normal(mu_s, ss) + log_half_normal(mu_t, st)
    spread = (ma - mm) ** 2 + sa**2 + sm**2  # E (a_g - mu)^2
    prior = prior + (groups * (normal - mu_t) - 0.5 * jnp.exp(-2 * mu_t + 2 * st**2) * spread.sum())
    entropy = (0.5 * np.log(2 * np.pi * np.e) + log_s).sum()
    return -(ll + prior + entropy)


def reference(x, y, groups: int):
    """Posterior means and sds (flat, in the order of KEYS; sigma and tau on the log
    scale) of the full-data mean-field optimum, by L-BFGS; and the optimum's theta."""
    import jax
    import jax.numpy as jnp
    from scipy import optimize

    jax.config.update("jax_enable_x64", True)
    xj, yj = jnp.asarray(x), jnp.asarray(y)
    value_grad = jax.jit(jax.value_and_grad(lambda t: neg_elbo(t, xj, yj, groups)))

    def fg(v):
        value, grad = value_grad(jnp.asarray(v))
        return float(value), np.asarray(grad, dtype=np.float64)

    p = groups + 6
    start = np.r_[np.zeros(p), np.full(p, np.log(0.1))]
    res = optimize.minimize(fg, start, jac=True, method="L-BFGS-B",
                            options={"maxiter": 20000, "gtol": 1e-9, "ftol": 1e-16})  # fmt: skip
    jax.config.update("jax_enable_x64", False)
    return res.x[:p], np.exp(res.x[p:]), res.x


def check_reference(x, y, groups: int, theta, particles: int = 4000) -> list[tuple]:
    """The closed form against NumPyro's Trace_ELBO (``particles`` draws of the guide,
    full data), at the optimum and at a point 0.5 away in every unconstrained
    coordinate: (closed form, Monte Carlo, its standard error) for each."""
    import jax
    import jax.numpy as jnp
    import numpyro.distributions as dist
    from numpyro.infer.util import log_density

    p = groups + 6
    model = numpyro_model(groups)
    xj, yj = jnp.asarray(x, dtype=jnp.float32), jnp.asarray(y[:, None], dtype=jnp.float32)
    out = []
    for shift in (0.0, 0.5):
        t = theta + shift
        loc, scale = t[:p], np.exp(t[p:])
        z = dist.Normal(loc, scale).sample(jax.random.key(1), (particles,))

        def one(v):
            a, m, ls, lt, w = _split(v, groups)
            values = {"a": a, "mu": m, "sigma": jnp.exp(ls), "tau": jnp.exp(lt), "w": w}
            logp, _ = log_density(lambda xb, yb: model(xb, yb, len(y)), (xj, yj), {}, values)
            return logp + ls + lt  # the Jacobians of exp on sigma and tau

        logps = jax.lax.map(one, jnp.asarray(z, dtype=jnp.float32), batch_size=100)
        ent = float((0.5 * np.log(2 * np.pi * np.e) + np.log(scale)).sum())
        mc = float(np.mean(logps)) + ent
        se = float(np.std(logps) / np.sqrt(particles))
        closed = -float(neg_elbo(jnp.asarray(t), jnp.asarray(x), jnp.asarray(y), groups))
        out.append((closed, mc, se))
    return out


def fit_numpyro(x, y, groups, batch, steps, seed):
    import jax
    from numpyro.infer.autoguide import AutoNormal

    from exactbatch import DataLoader
    from exactbatch.numpyro import fit

    model = numpyro_model(groups)
    loader = DataLoader((x, y), batch, seed=seed, drop_last=True)
    with warnings.catch_warnings(record=True) as caught:
        _record_warnings()
        r = fit(model, AutoNormal(model), loader, steps, rng_key=jax.random.key(seed), N=len(y))
    means, sds = [], []
    for key in KEYS:
        loc, scale = r.params[f"{key}_auto_loc"], r.params[f"{key}_auto_scale"]
        means.append(np.ravel(loc))
        sds.append(np.ravel(scale))
    return np.concatenate(means), np.concatenate(sds), r.convergence, _warned(caught), r.step_size


def fit_pymc(x, y, groups, batch, steps, seed):
    from exactbatch import DataLoader
    from exactbatch.pymc import fit

    loader = DataLoader((x, y), batch, seed=seed, drop_last=True)
    model = pymc_model(groups, loader)
    with warnings.catch_warnings(record=True) as caught:
        _record_warnings()
        approx = fit(loader, steps, model=model, random_seed=seed)
    mean, sd = approx.mean.eval(), approx.std.eval()
    found = {}
    for name, where, _, _ in approx.groups[0].ordering.values():
        found[name.removesuffix("_log__")] = (mean[where], sd[where])
    means = np.concatenate([np.ravel(found[k][0]) for k in KEYS])
    sds = np.concatenate([np.ravel(found[k][1]) for k in KEYS])
    return means, sds, approx.convergence, _warned(caught), approx.step_size


def labels(groups: int) -> list[str]:
    return [*(f"a[{g}]" for g in range(groups)), "mu", "log sigma", "log tau", "w[0]",
            "w[1]", "w[2]"]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, nargs="+", default=[10_000])
    ap.add_argument("--b", type=int, nargs="+", default=[256])
    ap.add_argument("--steps", type=int, nargs="+", default=[5000])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=0, help="seeds first-seed.. (default 0)")
    ap.add_argument("--bias", type=float, default=None,
                    help="the tail's budget schedule.BIAS (default: the library's)")  # fmt: skip
    ap.add_argument("--groups", type=int, default=20)
    ap.add_argument("--skip", nargs="*", default=[], choices=["numpyro", "pymc", "check"])
    args = ap.parse_args()
    if args.bias is not None:
        from exactbatch.adapters import schedule

        schedule.BIAS = args.bias
    silent = alarms = total = 0
    names = labels(args.groups)
    sigma = names.index("log sigma")  # its signed offset printed: the tail's bias shows there
    for n in args.n:
        x, y = synthetic(n, args.groups)
        t = time.perf_counter()
        m_ref, s_ref, theta = reference(x, y, args.groups)
        print(f"N={n}, {args.groups} groups: reference in {time.perf_counter() - t:.0f} s; "
              f"tau {np.exp(m_ref[args.groups + 2]):.3f}, sigma "
              f"{np.exp(m_ref[args.groups + 1]):.3f}", flush=True)  # fmt: skip
        if "check" not in args.skip:
            found = check_reference(x, y, args.groups, theta)
            for (closed, mc, se), where in zip(found, ("optimum", "+ 0.5"), strict=True):
                print(
                    f"  ELBO at the {where}: closed form {closed:.2f}, Trace_ELBO "
                    f"{mc:.2f} +- {se:.2f} ({(closed - mc) / se:+.1f} se)",
                    flush=True,
                )
        for batch, steps, seed in itertools.product(
            args.b, args.steps, range(args.first_seed, args.first_seed + args.seeds)
        ):
            for lib, run in (("numpyro", fit_numpyro), ("pymc", fit_pymc)):
                if lib in args.skip:
                    continue
                t = time.perf_counter()
                m, s, verdict, warned, lr = run(x, y, args.groups, batch, steps, seed)
                dist = np.abs(m - m_ref) / s_ref
                ratio = s / s_ref
                off = dist.max()
                wrong = off > 0.5 or ratio.min() < 1 / 1.5 or ratio.max() > 1.5
                good = off <= 0.2 and ratio.min() >= 0.8 and ratio.max() <= 1.25
                mark = "SILENT" if wrong and not warned else "ALARM" if good and warned else ""
                silent += mark == "SILENT"
                alarms += mark == "ALARM"
                total += 1
                print(f"  {lib:8s} N={n:<7d} B={batch:<4d} {steps:>6d} steps seed {seed}: "
                      f"{off:5.2f} sd ({names[int(np.argmax(dist))]}), log sigma "
                      f"{(m - m_ref)[sigma] / s_ref[sigma]:+.3f} sd, sds "
                      f"{ratio.min():.2f}-{ratio.max():.2f}x ({names[int(np.argmin(ratio))]}, "
                      f"{names[int(np.argmax(ratio))]}), step {lr}, drift {verdict.drift:.3f} "
                      f"error {verdict.error:.3f} sd error {verdict.sd_error:.3f}"
                      f"{' WARNED' if warned else ''} {mark} "
                      f"{time.perf_counter() - t:.0f} s", flush=True)  # fmt: skip
    print(f"hierarchical: {total} fits, {silent} silently wrong, {alarms} false alarms")


if __name__ == "__main__":
    main()
