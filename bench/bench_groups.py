"""Small batches read a group at a time: the loader with and without groups against a
bare gather, epochs interleaved in one process.

For each batch size, each round times one shuffled epoch of each case in turn
(so that the machine's drift, up to 2x between processes here, hits every
case alike) and the best of ``--rounds`` counts:

* ``bare``: ``np.take`` of x and y per batch (``mode="clip"``), handed an order
  drawn beforehand (``baselines.bare_gather``);
* ``loader``: ``for xb, yb in DataLoader(x, y, b, shuffle=True)`` as shipped
  (batches under 512 KiB read up to 16 at a time);
* ``one by one``: the same loader with groups of one (``exactbatch.loader.epoch_iterator``'s
  ``_GROUP_BATCHES`` set to 1 before it is made), as before groups;
* ``joined groups``: the loader with its groups claimed batch by batch and their
  rows joined (its epochs' ``span`` unset), as before a group of consecutive
  batches of the whole order was claimed in one loop and read as one slice;
* ``next_into``: ``while loader.next_into(bx, by)`` as shipped (batches under
  512 KiB claimed up to 16 at a time, each read into the caller's buffers);
  ``next_into, one by one``: with groups of one, a claim and its lock a batch
  as before (the loader's group sizes set to 1);
* ``prefetch``: the shipped loader with ``prefetch=2`` (a thread reads
  groups of up to 64 batches and 4 MiB, 2 ahead); ``prefetch, small groups``:
  with the groups of ``iter()`` without prefetch (16 batches, 512 KiB), as
  the prefetch thread read before; ``prefetch, one by one``: with groups of
  one, as it read before it read groups.

A second table (``--stream``) does the same for a stream: the same rows in an
``.ndf`` file (a temporary one, read warm from the page cache) through
``ndf_blocks``, shuffled, its rows/s ratios to the stream's loop without
prefetch (which claims up to 16 batches and 512 KiB at a time and hands them
out without the lock): ``loop, one by one`` (a claim under the lock a batch,
as before), ``next_into`` and ``next_into, one by one`` (as above),
``prefetch`` (the thread hands over groups of up to 64 batches and 4 MiB)
and ``prefetch, one by one`` (groups of one, as before).

    .venv/bin/python bench/bench_groups.py [--rows 4000000] [--batch 64 256 1024 4096]
    .venv/bin/python bench/bench_groups.py --stream --rows 2000000 --batch 64 1024
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from baselines import bare_gather  # bench/ is this script's folder

import exactbatch
import exactbatch.loader.epoch_iterator as groups_module


def _epoch(loader) -> None:
    for _ in loader:
        pass


def _into_epoch(loader):
    """One epoch of ``loader`` through ``next_into``, into buffers made once."""
    bx, by = np.empty((loader.batch_size, loader.d)), np.empty((loader.batch_size, loader.l))

    def epoch() -> None:
        loader.reset()
        while loader.next_into(bx, by):
            pass

    return epoch


def _epochs(make, loaders: dict) -> dict:
    """``{name: one epoch}``: of each of ``loaders`` (its ``for`` loop), and through
    ``next_into`` of loaders ``make()`` makes, as shipped and with groups of one."""
    ones = make()
    ones._groups = (1, 1)  # next_into claims batch by batch, as before its groups
    return {"next_into": _into_epoch(make()), "next_into, one by one": _into_epoch(ones)} | {
        k: lambda loader=loader: _epoch(loader) for k, loader in loaders.items()
    }


def _cases(x, y, b: int, perm) -> dict:
    """``{name: one epoch}`` for batch size ``b``."""

    def made(prefetch: int = 0, **groups):
        """A loader made with the module's group sizes set to ``groups`` meanwhile."""
        saved = {k: getattr(groups_module, k) for k in groups}
        vars(groups_module).update(groups)
        try:
            return exactbatch.DataLoader((x, y), b, shuffle=True, seed=0, prefetch=prefetch)
        finally:
            vars(groups_module).update(saved)

    ones = {"_GROUP_BATCHES": 1, "_AHEAD_GROUP_BATCHES": 1}
    small = {
        "_AHEAD_GROUP_BATCHES": groups_module._GROUP_BATCHES,
        "_AHEAD_GROUP_BYTES": groups_module._GROUP_BYTES,
    }
    joined = made()
    open_epoch = joined._feed.open_epoch

    def unspanned(*args, **kw):
        epoch = open_epoch(*args, **kw)
        epoch.span = None  # the claim and read of a group as before the one-slice path
        return epoch

    joined._feed.open_epoch = unspanned
    loaders = {
        "loader": made(),
        "joined groups": joined,
        "one by one": made(**ones),
        "prefetch": made(2),
        "prefetch, small groups": made(2, **small),
        "prefetch, one by one": made(2, **ones),
    }
    gather = bare_gather(x, y, b)
    return {"bare": lambda: gather(perm)} | _epochs(made, loaders)


def _stream_cases(f, b: int) -> dict:
    """``{name: one epoch}`` of the stream ``ndf_blocks(f)`` at batch size ``b``."""
    loaders = {
        "loop": exactbatch.DataLoader(exactbatch.ndf_blocks(f), b, seed=0),
        "prefetch": exactbatch.DataLoader(exactbatch.ndf_blocks(f), b, seed=0, prefetch=2),
        "prefetch, one by one": exactbatch.DataLoader(
            exactbatch.ndf_blocks(f), b, seed=0, prefetch=2
        ),
    }
    loaders["prefetch, one by one"]._groups = (1, 1)
    loaders["loop, one by one"] = exactbatch.DataLoader(exactbatch.ndf_blocks(f), b, seed=0)
    loaders["loop, one by one"]._groups = (1, 64)  # a claim and its lock a batch
    return _epochs(lambda: exactbatch.DataLoader(exactbatch.ndf_blocks(f), b, seed=0), loaders)


def _best(cases: dict, n: int, rounds: int) -> dict:
    """Each case's best rows/s over ``rounds`` rounds, the cases interleaved."""
    for f in cases.values():  # warm up: the loaders' orders, the caches
        f()
    best = dict.fromkeys(cases, 0.0)
    for _ in range(rounds):
        for k, f in cases.items():
            t = time.perf_counter()
            f()
            best[k] = max(best[k], n / (time.perf_counter() - t))
    return best


def _streams(x, y, batches, rounds: int) -> None:
    names = ["loop, one by one", "next_into", "next_into, one by one", "prefetch",
             "prefetch, one by one"]  # fmt: skip
    print("\n| batch | stream loop, M rows/s | " + " | ".join(f"{k} / loop" for k in names) + " |")
    print("|---:|---:|" + "---:|" * len(names))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.ndf")
        exactbatch.save_ndf(path, (x, y))
        with exactbatch.open_ndf(path) as f:
            for b in batches:
                best = _best(_stream_cases(f, b), len(x), rounds)
                loop = best["loop"]
                ratios = " | ".join(f"{best[k] / loop:.2f}x" for k in names)
                print(f"| {b} | {loop / 1e6:.1f} | {ratios} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 256, 1024, 4096])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--stream", action="store_true", help="the stream's table instead")
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    n = a.rows
    x, y = rng.random((n, 16)), rng.random((n, 1))
    print(f"backend {exactbatch.backend()}; n = {n:,} rows of 16 + 1 float64; best of {a.rounds}")
    if a.stream:
        _streams(x, y, a.batch, a.rounds)
        return
    perm = rng.permutation(n)
    names = ["loader", "joined groups", "one by one", "next_into", "next_into, one by one",
             "prefetch", "prefetch, small groups", "prefetch, one by one"]  # fmt: skip
    heads = " | ".join(f"{k} / bare" for k in names)
    print(f"\n| batch | bare, M rows/s | {heads} | loader / joined groups |")
    print("|---:|---:|" + "---:|" * (len(names) + 1))
    for b in a.batch:
        best = _best(_cases(x, y, b, perm), n, a.rounds)
        bare = best["bare"]
        ratios = " | ".join(f"{best[k] / bare:.2f}x" for k in names)
        gain = best["loader"] / best["joined groups"]
        print(f"| {b} | {bare / 1e6:.1f} | {ratios} | {gain:.2f}x |")


if __name__ == "__main__":
    main()
