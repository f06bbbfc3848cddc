"""as_jax: what the device batches cost, and whether the moves overlap the step.

(a) Overhead: rows/s of an epoch of ``as_jax(loader, prefetch=2)`` (each
    batch cast to float32 and put on the default device, waited for at the
    end) against the loader's own rows/s, same data, same run. Target: >= 0.9x.
(b) Overlap: a jitted step (a chain of matrix products on the batch,
    carrying a state so that steps run in order) calibrated to take about
    as long as a batch's load. Printed: the load-only epoch, the step-only
    time (the step run len(loader) times on one batch already on the
    device), and the epoch with both; ratio to max(load, step). Target:
    <= 1.15x. On a CPU the step's threads and the load share the cores.

Best of ``--repeats`` epochs each, after a warm-up epoch.

    PYTHONPATH=src .venv/bin/python bench/bench_jax.py [--rows 1000000] [--batch 4096]
        [--d 16 128]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np


def best(fn, repeats: int) -> float:
    fn()  # warm-up: compile, fill the caches
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--d", type=int, nargs="+", default=[16, 128])
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()

    import jax

    from exactbatch import DataLoader
    from exactbatch.jax import as_jax

    print(
        f"jax {jax.__version__} on {jax.devices()[0].platform}, {os.cpu_count()} CPUs; "
        f"n={a.rows:,}, batch={a.batch}\n"
    )
    print("(a) overhead: rows/s of an epoch (as_jax: float64 -> float32, put on the device)\n")
    print("| d | loader prefetch | loader rows/s | as_jax rows/s | as_jax / loader |")
    print("|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for d in a.d:
        x, y = rng.standard_normal((a.rows, d)), rng.standard_normal((a.rows, 1))
        for depth in (0, 2):
            loader = DataLoader((x, y), a.batch, seed=0, prefetch=depth)
            t_loader = best(lambda ld=loader: epoch(ld), a.repeats)
            t_jax = best(lambda ld=loader: epoch(as_jax(ld, prefetch=2)), a.repeats)
            print(
                f"| {d} | {depth} | {a.rows / t_loader / 1e6:.2f}M | "
                f"{a.rows / t_jax / 1e6:.2f}M | {t_loader / t_jax:.2f}x |"
            )
    overlap(a, x, y, as_jax(DataLoader((x, y), a.batch, seed=0), prefetch=2))


def epoch(batches) -> None:
    batch = None
    for batch in batches:  # noqa: B007 - the last batch is waited for
        pass
    if hasattr(batch[0], "block_until_ready"):
        batch[0].block_until_ready()


def overlap(a, x, y, batches) -> None:
    """(b): a step as long as a load, the two overlapped by JAX's asynchronous dispatch."""
    import jax
    import jax.numpy as jnp

    d = x.shape[1]
    w = jnp.eye(d) * 0.5
    nb = len(batches)

    def make_step(k):
        @jax.jit
        def step(state, xb):
            h = xb
            for _ in range(k):
                h = jnp.tanh(h @ w)
            return state + h.sum()

        return step

    xb0 = jax.device_put(x[: a.batch].astype(np.float32))

    def step_only(step):
        s = 0.0
        for _ in range(nb):
            s = step(s, xb0)
        s.block_until_ready()

    t_load = best(lambda: epoch(batches), a.repeats)
    k = 1
    while True:  # double k until the steps of an epoch take as long as its loads
        step = make_step(k)
        t_step = best(lambda s=step: step_only(s), 3)
        if t_step >= t_load or k >= 4096:
            break
        k *= 2

    def both():
        s = 0.0
        for xb, _ in batches:
            s = step(s, xb)
        s.block_until_ready()

    t_step, t_both = best(lambda: step_only(step), a.repeats), best(both, a.repeats)
    top = max(t_load, t_step)
    print(f"\n(b) overlap, d={d}: a step of {k} products of the batch\n")
    print("| epoch | seconds | / max(load, step) |")
    print("|---|---:|---:|")
    for name, secs in (
        ("load only (as_jax)", t_load),
        ("step only", t_step),
        ("sum", t_load + t_step),
        ("as_jax + step", t_both),
    ):
        print(f"| {name} | {secs:.3f} | {secs / top:.2f}x |")


if __name__ == "__main__":
    main()
