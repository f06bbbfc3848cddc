"""Hold the grid's linear regression at a fixed Adam schedule, from the reference.

Where a fit's tail lands between seeds is two things: a bias (where the iterates sit on
average at that step) and a scatter (how far an average over the tail's W steps strays).
This runs the model of ``fit_statistics.py --grid`` (AutoNormal, Trace_ELBO with
``--particles`` draws a step) from the L-BFGS reference's optimum for ``--steps`` steps at
a fixed step, cap and budget (``exactbatch.adapters.numpyro_adam.adam``, as in the
default schedule's tail), in one ``lax.scan``, and prints, for each latent, the long-run
mean of its guide sd (over the reference's) and of its mean (in posterior sds), their
jitter, and the scatter of W-step averages:

    cd bench && PYTHONPATH=../src ../.venv/bin/python fit_hold.py --n 10000 --b 256 \\
        --lr 0.032 --cap 20 --budget 28.28 --steps 40000 --window 780 [--particles 4]

(the values of the default tail at N = 10k, B = 256, 2000 steps: ``Plan(2000, 39,
rows=10_000)``'s ``tail_step(0.3)``, ``cap`` and ``budget``).
"""

from __future__ import annotations

import argparse

import fit_statistics as fs
import numpy as np


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--b", type=int, default=256)
    ap.add_argument("--lr", type=float, default=0.032)
    ap.add_argument("--cap", type=float, default=float("inf"))
    ap.add_argument("--budget", type=float, default=float("inf"))
    ap.add_argument("--steps", type=int, default=40_000)
    ap.add_argument("--window", type=int, default=780)
    ap.add_argument("--particles", type=int, default=1)
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp
    from numpyro.infer import SVI, Trace_ELBO
    from numpyro.infer.autoguide import AutoNormal
    from numpyro.optim import optax_to_numpyro

    from exactbatch.adapters.numpyro_adam import adam

    n, b = args.n, args.b
    x, y = fs.synthetic(n, "linear")
    m_ref, s_ref = fs.reference(x, y, "linear", None, 0)
    model = fs.numpyro_model("linear", 3, None)
    loss = Trace_ELBO(num_particles=args.particles, vectorize_particles=True)
    svi = SVI(model, AutoNormal(model), optax_to_numpyro(adam(args.lr, args.cap, args.budget)),
              loss)  # fmt: skip
    xs, ys = jnp.asarray(x, jnp.float32), jnp.asarray(y[:, None], jnp.float32)
    at = {"b": 0, "sigma": 1, "w": slice(2, None)}  # the reference's order (b, sigma, w)
    both = (("loc", m_ref), ("scale", s_ref))
    start = {f"{k}_auto_{part}": jnp.asarray(v[i], jnp.float32)
             for k, i in at.items() for part, v in both}  # fmt: skip
    state = svi.init(jax.random.key(0), xs[:b], ys[:b], N=n, init_params=start)
    epoch = n // b
    rng = np.random.default_rng(1)
    order = [rng.permutation(n)[: epoch * b] for _ in range(args.steps // epoch + 1)]
    rows = jnp.asarray(np.concatenate(order)[: args.steps * b].reshape(args.steps, b))

    def step(st, i):
        st, _ = svi.update(st, xs[i], ys[i], N=n)
        p = svi.get_params(st)
        keys = ("b_auto_loc", "sigma_auto_loc", "w_auto_loc", "b_auto_scale",
                "sigma_auto_scale", "w_auto_scale")  # fmt: skip
        return st, jnp.concatenate([jnp.ravel(p[k]) for k in keys])

    _, trace = jax.jit(lambda st, r: jax.lax.scan(step, st, r))(state, rows)
    trace = np.asarray(trace)[min(1000, args.steps // 5) :]  # from the reference: a short burn
    w = args.window
    print(f"N={n} B={b} step {args.lr} cap {args.cap} budget {args.budget}, {args.steps} steps, "
          f"{args.particles} draw(s) a step; averages over {w} steps")  # fmt: skip
    for k, name in enumerate(fs._grid_names("linear")):
        r = np.log(trace[:, 5 + k] / s_ref[k])
        z = (trace[:, k] - m_ref[k]) / s_ref[k]
        rb = np.array([r[a : a + w].mean() for a in range(0, len(r) - w + 1, w)])
        zb = np.array([z[a : a + w].mean() for a in range(0, len(z) - w + 1, w)])
        print(f"  {name:9s} sd: long-run {np.exp(r.mean()):.3f}x, jitter (log) {r.std():.3f}, "
              f"{w}-step averages' scatter (log) {rb.std():.3f} ({len(rb)}) | mean: "
              f"long-run {z.mean():+.3f} sd, jitter {z.std():.2f}, "
              f"averages' scatter {zb.std():.3f}")  # fmt: skip


if __name__ == "__main__":
    main()
