"""as_jax: what the device batches cost, and whether the moves overlap the step.

(0) What a put costs alone: a pair (x, y) of a 4096 x 16 float32 batch, 64-byte
    aligned, put on the default device by ``jax.device_put`` and by as_jax's
    ``Putter`` (XLA's batched put), microseconds a pair, best of 3 x 2000.
(a) Overhead: rows/s of an epoch of ``as_jax(loader, prefetch=2)`` (each
    batch put on the default device, waited for at the end) against the
    loader's own rows/s, same data, epochs of the two alternated in one run.
    Loaders of float64 (cast to float32 on the host, since JAX holds float32
    unless x64 is on) and of float32 (no cast: what docs/usage/jax.md
    recommends), with the loader's prefetch 0 and 2. Target: >= 0.9x.
    Printed: the best of each, their ratio, and the median over the rounds
    of each round's ratio (the two epochs of a round run back to back, so
    the machine's drift cancels in it).
(b) Overlap: a jitted step (a chain of matrix products on the batch,
    carrying a state so that steps run in order) calibrated to take about
    as long as a batch's load. Printed: the load-only epoch, the step-only
    epoch (the step over 32 distinct batches already on the device, in
    turn, so that it reads batches that are not in its cache, as it does in
    the epoch), and the epoch with both; ratio to max(load, step). Target:
    <= 1.15x. Run twice: as JAX runs on a CPU, where the step's threads and
    the loading share every core; then, where the OS allows it (Linux), with
    XLA's threads pinned to the last core and the host's threads to the
    others, which stands in for an accelerator: the step gets a processor of
    its own, as on a GPU.

Best of ``--repeats`` epochs each, after a warm-up epoch.

    PYTHONPATH=src .venv/bin/python bench/bench_jax.py [--rows 1000000] [--batch 4096]
        [--d 16 128]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

_BEFORE_JAX = set(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else set()


def timed(fns, repeats: int) -> list[list[float]]:
    """The times of each of ``fns``, run in turn ``repeats`` times after a warm-up."""
    for fn in fns:
        fn()  # compile, fill the caches
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, ts in zip(fns, times, strict=True):
            t = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t)
    return times


def best(fns, repeats: int) -> list[float]:
    """The best time of each of ``fns``, run in turn ``repeats`` times after a warm-up."""
    return [min(ts) for ts in timed(fns, repeats)]


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
    put_costs()
    print("(a) overhead: rows/s of an epoch (as_jax puts float32 batches on the device)\n")
    print(
        "| d | loader dtype | loader prefetch | loader rows/s | as_jax rows/s | as_jax / loader "
        "| median of the rounds' ratios |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    rng = np.random.default_rng(0)
    for d in a.d:
        x, y = rng.standard_normal((a.rows, d)), rng.standard_normal((a.rows, 1))
        for dtype in (np.float64, np.float32):
            for depth in (0, 2):
                loader = DataLoader((x, y), a.batch, seed=0, prefetch=depth, dtype=dtype)
                batches = as_jax(loader, prefetch=2)
                loads, jaxes = timed(
                    [lambda ld=loader: epoch(ld), lambda bs=batches: epoch(bs)], a.repeats
                )
                t_loader, t_jax = min(loads), min(jaxes)
                paired = np.median([tl / tj for tl, tj in zip(loads, jaxes, strict=True)])
                print(
                    f"| {d} | {np.dtype(dtype).name} | {depth} | "
                    f"{a.rows / t_loader / 1e6:.2f}M | {a.rows / t_jax / 1e6:.2f}M | "
                    f"{t_loader / t_jax:.2f}x | {paired:.2f}x |"
                )
    loader = DataLoader((x, y), a.batch, seed=0, dtype=np.float32)
    overlap(a, x, as_jax(loader, prefetch=2), "threads as JAX starts them")
    if pin_xla():
        overlap(a, x, as_jax(loader, prefetch=2), "XLA pinned to a core of its own")


def put_costs() -> None:
    """(0): a pair's put by jax.device_put and by the Putter, in a tight loop."""
    import jax

    from exactbatch.adapters.jax_put import Putter
    from exactbatch.arrays import batch_pair

    x, y = batch_pair(4096, 16, 1, np.float32)
    x[:], y[:] = 1.0, 2.0
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    fast, slow = Putter(None, one), Putter(None, one, fast=False)
    print("(0) one put of a pair (x, y), 4096 x 16 float32, us\n")
    for name, put in (("jax.device_put", slow), ("Putter (batched put)", fast)):
        put((x, y))  # the Putter checks its plan on the first pair
        best_us = min(_loop_us(put, (x, y)) for _ in range(3))
        print(f"- {name}: {best_us:.1f}")
    print()


def _loop_us(put, pair, n: int = 2000) -> float:
    t = time.perf_counter()
    for _ in range(n):
        out = put(pair)
    out[0].block_until_ready()
    return (time.perf_counter() - t) / n * 1e6


def epoch(batches) -> None:
    batch = None
    for batch in batches:  # noqa: B007 - the last batch is waited for
        pass
    if hasattr(batch[0], "block_until_ready"):
        batch[0].block_until_ready()


def pin_xla() -> bool:
    """Pin the threads JAX started (XLA's) to the last CPU, the others to the rest."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cpus) < 2 or not _BEFORE_JAX:
        print("\n(b) with XLA pinned: skipped (needs Linux and 2+ CPUs)")
        return False
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), set(cpus[:-1]) if tid in _BEFORE_JAX else {cpus[-1]})
    return True


def overlap(a, x, batches, how: str) -> None:
    """(b): a step as long as a load, the two overlapped by JAX's asynchronous dispatch."""
    import jax
    import jax.numpy as jnp

    d = x.shape[1]
    nb = len(batches)

    def make_step(k, m):
        """k products of the batch by a d x d matrix, the first by d x m (m <= d)."""
        w1, w = jnp.eye(d, m) * 0.5, jnp.eye(m) * 0.5

        @jax.jit
        def step(state, xb):
            h = jnp.tanh(xb @ w1)
            for _ in range(k - 1):
                h = jnp.tanh(h @ w)
            return state + h.sum()

        return step

    on_device = [
        jax.device_put(np.ascontiguousarray(x[i * a.batch : (i + 1) * a.batch], np.float32))
        for i in range(32)
    ]

    def step_only(step):
        s = 0.0
        for i in range(nb):
            s = step(s, on_device[i % len(on_device)])
        s.block_until_ready()

    (t_load,) = best([lambda: epoch(batches)], a.repeats)
    k, m = 1, d
    for _ in range(6):  # scale k (or m, under one product) until step and load match
        trial = make_step(k, m)
        (t_step,) = best([lambda s=trial: step_only(s)], 3)
        if 0.9 < t_step / t_load < 1.1:
            break
        scaled = k * m * t_load / t_step
        k, m = max(1, round(scaled / d)), d
        if k == 1:
            m = int(min(d, max(8, round(scaled / 8) * 8)))
    step = make_step(k, m)

    def both():
        s = 0.0
        for xb, _ in batches:
            s = step(s, xb)
        s.block_until_ready()

    t_load, t_step, t_both = best(
        [lambda: epoch(batches), lambda: step_only(step), both], a.repeats
    )
    top = max(t_load, t_step)
    print(f"\n(b) overlap, d={d}, {how}: a step of {k} products of the batch (width {m})\n")
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
