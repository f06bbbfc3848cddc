"""exactbatch.numpyro.fit's own cost per step, against a hand-written jitted loop.

Both run the same SVI step (``svi.update`` under ``jax.jit``, Adam 0.01, an
AutoNormal guide) on the same loader's batches through ``as_jax``: a Bayesian
linear regression of ``--d`` features, ``--rows`` rows in batches of
``--batch``. The hand-written loop is what a user would write:

    for xb, yb in as_jax(loader):
        state, loss = step(state, xb, yb); losses.append(loss)

with its losses read back by one ``jax.device_get`` at the end. ``fit`` adds
its checks, the verdict's window sums and its loss array inside the step,
the rollover of epochs, and its verdict at the end.

Per-step time is the slope between a short and a long run of each (so the
fixed costs - compiling, the checks before the first step, the verdict -
cancel), the runs of the two interleaved, best of ``--repeats``; the fixed
costs are printed too. Target: fit's per step at most 1.2x the loop's.
``fit`` is run with ``optim=optax.adam(0.01)`` (as the loop), and with the
default schedule (``optim=None``: a pilot of four step sizes side by side
for 5% of the steps), whose per-step cost is printed apart.

Also printed: what the old ending cost, ``jnp.stack`` of one device scalar
per step (one concatenate compiled with an input per step), at the long
run's step count.

    PYTHONPATH=src .venv/bin/python bench/bench_fit.py [--rows 20000] [--batch 256]
        [--d 8] [--steps 500 5000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--d", type=int, default=8)
    ap.add_argument("--steps", type=int, nargs=2, default=[500, 5000])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    import optax
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal

    from exactbatch import ConvergenceWarning, DataLoader
    from exactbatch.jax import as_jax
    from exactbatch.numpyro import fit

    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.rows, args.d)).astype(np.float32)
    y = (x @ rng.standard_normal(args.d) + rng.standard_normal(args.rows)).astype(np.float32)
    n = args.rows

    def model(xb, yb, N):  # noqa: N803
        w = numpyro.sample("w", dist.Normal(0, 1).expand([xb.shape[1]]).to_event(1))
        b = numpyro.sample("b", dist.Normal(0, 1))
        sigma = numpyro.sample("sigma", dist.HalfNormal(1))
        with numpyro.plate("data", N, subsample_size=xb.shape[0]):
            numpyro.sample("obs", dist.Normal(b + xb @ w, sigma), obs=yb[:, 0])

    def loader():
        return DataLoader((x, y), args.batch, seed=0, drop_last=True, dtype=np.float32)

    def by_hand(steps: int) -> float:
        t = time.perf_counter()
        ld = loader()
        svi = SVI(model, AutoNormal(model), optax.adam(0.01), Trace_ELBO())
        xb, yb = next(iter(ld))
        state = svi.init(jax.random.key(0), jnp.asarray(xb), jnp.asarray(yb), N=n)
        step = jax.jit(lambda s, xb, yb: svi.update(s, xb, yb, N=n))
        batches, losses = as_jax(ld), []
        while len(losses) < steps:
            for xb, yb in batches:
                state, loss = step(state, xb, yb)
                losses.append(loss)
                if len(losses) == steps:
                    break
        np.asarray(jax.device_get(losses))
        return time.perf_counter() - t

    def helper(steps: int, optim) -> float:
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            fit(model, AutoNormal(model), loader(), steps, optim=optim,
                rng_key=jax.random.key(0), N=n)  # fmt: skip
        return time.perf_counter() - t

    runs = {
        "hand-written loop": by_hand,
        "fit, optim=adam(0.01)": lambda s: helper(s, optax.adam(0.01)),
        "fit, optim=None": lambda s: helper(s, None),
    }
    short, long = args.steps
    for fn in runs.values():
        fn(short)  # warm the caches (imports, the first compile)
    times = {name: {short: [], long: []} for name in runs}
    for _ in range(args.repeats):
        for steps in (short, long):
            for name, fn in runs.items():
                times[name][steps].append(fn(steps))
    print(f"{args.rows} rows, d={args.d}, batches of {args.batch}, steps {short} and {long}")
    slopes = {}
    for name in runs:
        best = {s: min(times[name][s]) for s in (short, long)}
        slopes[name] = (best[long] - best[short]) / (long - short)
        fixed = best[short] - slopes[name] * short
        print(
            f"  {name:24s} {slopes[name] * 1e6:8.1f} us/step   fixed {fixed:6.2f} s   "
            f"({long} steps: {best[long]:.2f} s)"
        )
    base = slopes["hand-written loop"]
    for name in list(runs)[1:]:
        print(f"  {name}: {slopes[name] / base:.2f}x the hand-written loop per step")

    scalars = [jnp.float32(i) for i in range(long)]
    t = time.perf_counter()
    np.asarray(jnp.stack(scalars))
    print(f"  the old ending, jnp.stack of {long} device scalars: {time.perf_counter() - t:.2f} s")


if __name__ == "__main__":
    main()
