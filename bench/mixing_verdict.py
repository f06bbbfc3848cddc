"""How often ``exactbatch mixing`` calls a full shuffle NOT well mixed, and how much its
headline moves from seed to seed: figures for docs/cli.md.

    .venv/bin/python bench/mixing_verdict.py [cases...] [--seeds S] [--json out.json]

Each case runs :func:`exactbatch.tools.mixing.mixing` (what the command runs)
with loader seeds 0..S-1 over one file, and prints how many seeds it called
NOT well mixed and the spread of the headline (the share of batches less
representative than 95% of random batches) across seeds, with the 90% range
the tool prints for a full shuffle (its median over the seeds):

    iid-tiny   96 rows of i.i.d. data (3 normal columns, a 0/1 label), 6 batches of
               16, a buffer that holds the data: a full shuffle (S = 100)
    wine       scikit-learn's wine data (178 rows, 13 columns and the class), 11
               batches of 16, a full shuffle: where the old verdict failed (S = 100)
    diabetes   scikit-learn's diabetes data (442 rows), 13 batches of 32, a full
               shuffle (S = 100)
    iid-20k    20,000 rows of i.i.d. data, 200 batches of 100, a full shuffle (S = 100)
    events     docs/cli.md's time-sorted events (200,000 rows), shuffled once on
               disk, streamed in 10,000-row chunks through a 20,000-row buffer, 782
               batches of 256: the docs' recipe (S = 20)
    sorted     the same events in time order, the same setting: every seed should
               say NOT well mixed (S = 20)

Only ``well_mixed`` and the headline share are read, which the verdict before
calibration also reported: run this script against an older checkout
(``PYTHONPATH=OLD/src``) for the figures before. About 4 minutes in all on a
2-core machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from exactbatch import save_ndf
from exactbatch.tools.mixing import mixing


def iid(n: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3)), (rng.random(n) < 0.3).astype(np.float64)


def sklearn_data(name: str):
    from sklearn import datasets

    x, y = getattr(datasets, f"load_{name}")(return_X_y=True)
    perm = np.random.default_rng(0).permutation(len(y))
    return x[perm].astype(np.float64), y[perm].astype(np.float64)


def events(shuffled: bool):
    """docs/cli.md's events, as `exactbatch convert ... --labels clicked` writes them."""
    rng = np.random.default_rng(0)
    n = 200_000
    hours = np.sort(rng.uniform(0, 24 * 60, n))
    trend = hours / hours[-1]
    temperature = 10 + 8 * trend + 3 * np.sin(2 * np.pi * hours / 24) + rng.normal(0, 1, n)
    load = 1 + trend + rng.gamma(2.0, 0.1, n)
    clicked = (rng.random(n) < 0.2 + 0.5 * trend).astype(np.float64)
    x = np.column_stack([hours, temperature, load])
    if shuffled:
        perm = np.random.default_rng(1).permutation(n)
        x, clicked = x[perm], clicked[perm]
    return x, clicked


# name: (data, settings, seeds)
CASES = {
    "iid-tiny": (lambda: iid(96, 7), {"batch_size": 16, "buffer_size": 96}, 100),
    "wine": (lambda: sklearn_data("wine"), {"batch_size": 16, "buffer_size": 178}, 100),
    "diabetes": (lambda: sklearn_data("diabetes"), {"batch_size": 32, "buffer_size": 442}, 100),
    "iid-20k": (lambda: iid(20_000, 0), {"batch_size": 100, "buffer_size": 20_000}, 100),
    "events": (
        lambda: events(True),
        {"batch_size": 256, "buffer_size": 20_000, "chunk_rows": 10_000},
        20,
    ),
    "sorted": (
        lambda: events(False),
        {"batch_size": 256, "buffer_size": 20_000, "chunk_rows": 10_000},
        20,
    ),
}


def run_case(name: str, folder: Path, seeds: int | None) -> dict:
    make, settings, default_seeds = CASES[name]
    seeds = seeds or default_seeds
    path = folder / f"{name}.ndf"
    save_ndf(path, make())
    t0 = time.perf_counter()
    shares, alarms, bands = [], 0, []
    for s in range(seeds):
        r = mixing(path, seed=s, bar=False, **settings)
        alarms += not r["well_mixed"]
        shares.append(r["ks"]["share_worse_than_random_p95"])
        if "share_full_shuffle" in r["ks"]:  # printed since the calibration
            band = r["ks"]["share_full_shuffle"]
            bands.append((band["p05"], band["p95"]))
    shares = np.array(shares)
    out = {
        "case": name,
        "seeds": seeds,
        "not_well_mixed": alarms,
        "share": {
            "min": float(shares.min()),
            "median": float(np.median(shares)),
            "max": float(shares.max()),
            "sd": float(shares.std()),
        },
        "seconds_per_run": (time.perf_counter() - t0) / seeds,
    }
    if bands:
        out["printed_range"] = [float(v) for v in np.median(np.array(bands), axis=0)]
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", help=f"any of {list(CASES)} (default: all)")
    parser.add_argument("--seeds", type=int, help="seeds per case (default: the case's)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    todo = args.cases or list(CASES)
    unknown = set(todo) - set(CASES)
    if unknown:
        parser.error(f"unknown case(s) {sorted(unknown)}; choose from {list(CASES)}")
    results = []
    print(
        f"{'case':<10}{'NOT well mixed':>16}{'headline: min':>15}{'median':>8}{'max':>8}"
        f"{'sd':>7}{'printed 90% range':>20}{'s/run':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for name in todo:
            r = run_case(name, Path(tmp), args.seeds)
            results.append(r)
            sh = r["share"]
            rng = r.get("printed_range")
            printed = f"{rng[0]:.1%} to {rng[1]:.1%}" if rng else "-"
            print(
                f"{name:<10}{r['not_well_mixed']:>9} of {r['seeds']:<4}{sh['min']:>15.1%}"
                f"{sh['median']:>8.1%}{sh['max']:>8.1%}{sh['sd']:>7.1%}{printed:>20}"
                f"{r['seconds_per_run']:>7.2f}",
                flush=True,
            )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
