"""The tail's settle span (``schedule.SETTLE``) before and after, on the same fits.

Each fit runs once per ``--settle`` value with the same data, batches and seeds:
``SETTLE = 0`` is the schedule before (the tail - Adam's restart, its step, the cap,
the budget, the guide's draws - begins exactly where the verdict's first window does),
the default is the schedule now (the tail begins ``SETTLE`` parts of a window before
it). Every fit is scored as in ``bench/fit_statistics.py``: the largest distance of a
posterior mean from the full-data mean-field optimum (L-BFGS) in its posterior sds,
the sds' ratios, the verdict's drift and shift, and whether it warned. The cases:

    a  NumPyro, breast cancer, B = 32, 10,000 steps, seeds 0-2 (two false alarms)
    b  PyMC, breast cancer, B = 32, 2000 steps, seed 3 (the shift rule's silent miss)
    c  the calibration fits of tests/adapters/test_fit_calibration.py (logistic, 500
       rows, 3 features, B = 50, 600 steps), both libraries, seeds 0-4
    d  breast cancer, first 8 columns, B = 32, 300 steps, seeds 0-3, both libraries
       (issue 40's "short fits freeze")
    e  PyMC, breast cancer, B = 32, 10,000 steps, seeds 0-2 (case a's other library)

    PYTHONPATH=src .venv/bin/python bench/fit_settle.py [--cases a b c d e] [--settle 0 1]
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fit_statistics as fs  # noqa: E402

# case: (libraries, data, columns, steps, seeds)
CASES = {
    "a": (("numpyro",), "breast_cancer", None, 10_000, (0, 1, 2)),
    "b": (("pymc",), "breast_cancer", None, 2000, (3,)),
    "c": (("numpyro", "pymc"), "calibration", None, 600, (0, 1, 2, 3, 4)),
    "d": (("numpyro", "pymc"), "breast_cancer", 8, 300, (0, 1, 2, 3)),
    "e": (("pymc",), "breast_cancer", None, 10_000, (0, 1, 2)),
}


def calibration_data():
    """tests/adapters/test_fit_calibration.py's data: 500 rows, 3 standardised features."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((500, 3))
    eta = x @ np.array([1.0, -1.0, 0.5]) + 0.3
    y = (rng.random(500) < 1 / (1 + np.exp(-eta))).astype(np.float64)
    return (x - x.mean(0)) / x.std(0), y, "logistic", None, 50


def data(name: str, columns: int | None):
    if name == "calibration":
        return calibration_data()
    x, y, kind, k = fs.load(name)
    return x[:, :columns], y, kind, k, fs.DATA[name][1]


SEEN: dict = {}  # the verdict's inputs of the last fit (its parts)


def spy_on_the_verdict() -> None:
    """Keep the parts each fit's verdict judges (as bench/fit_verdict_trace.py does)."""
    from exactbatch.adapters import convergence, pymc_schedule
    from exactbatch.adapters import numpyro_run as enp

    def spy(parts, *args):
        SEEN["parts"], SEEN["inputs"] = parts, (parts, *args)
        return convergence.judge(parts, *args)

    enp.judge = pymc_schedule.judge = spy


def trajectory(lib, m_ref, s_ref) -> str:
    """The part means, in reference sds off the reference, of the latent whose two
    windows' means differ most."""
    import fit_verdict_trace as fvt

    if not SEEN.get("parts"):
        return ""
    means = np.stack([fvt._flat_part(p, lib)[0] for p in SEEN.pop("parts")])
    off = (means - m_ref) / s_ref
    half = len(off) // 2
    j = int(np.argmax(np.abs(off[half:].mean(0) - off[:half].mean(0))))
    return f"\n      parts of latent {j} (b first): " + " ".join(f"{v:+.2f}" for v in off[:, j])


def one(lib, x, y, kind, k, batch, steps, seed, settle, m_ref, s_ref, save=None):
    from exactbatch.adapters import schedule

    schedule.SETTLE = settle
    run = fs.fit_numpyro if lib == "numpyro" else fs.fit_pymc
    t = time.perf_counter()
    m, s, v, warned, _ = run(x, y, kind, k, batch, steps, seed)
    if save and SEEN.get("inputs"):  # the verdict's inputs, for fit_verdict_trace --judge
        with open(f"{save}_{lib}_{seed}_settle{settle}.pkl", "wb") as f:
            pickle.dump(tuple(SEEN.pop("inputs")), f)
    dist, ratio = np.abs(m - m_ref) / s_ref, s / s_ref
    good = dist.max() <= 0.2 and ratio.min() >= 0.8 and ratio.max() <= 1.25
    wrong = dist.max() > 0.5 or ratio.min() < 1 / 1.5 or ratio.max() > 1.5
    mark = ("false alarm" if good and warned else "SILENT" if wrong and not warned
            else "")  # fmt: skip
    shift = (f"{v.shift:+.3f} ({v.shift_where}: {v.shift_moved:.3f}, noise "
             f"{v.shift_noise:.3f})" if v.shift is not None else "-")  # fmt: skip
    print(f"  {lib:8s} seed {seed} settle {settle}: {dist.max():5.2f} sd, sds "
          f"{ratio.min():.2f}-{ratio.max():.2f}x, drift {v.drift:+.3f}, shift {shift}, "
          f"error {v.error:.3f}, sd error {v.sd_error:.3f}, "
          f"{'WARNED' if warned else 'quiet'} {mark}  {time.perf_counter() - t:.0f} s"
          f"{trajectory(lib, m_ref, s_ref)}", flush=True)  # fmt: skip
    return mark


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=list("abcd"), choices=list(CASES))
    ap.add_argument("--settle", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--libs", nargs="+", default=["numpyro", "pymc"])
    ap.add_argument("--seeds", type=int, nargs="+", help="instead of each case's seeds")
    ap.add_argument("--save", help="save each fit's verdict inputs to SAVE_<case>_<lib>_...pkl")
    args = ap.parse_args()
    import jax

    spy_on_the_verdict()
    # the fits of one case share shapes: compile each program once (the fits run as without)
    jax.config.update("jax_compilation_cache_dir", tempfile.mkdtemp(prefix="fit_settle_"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    for case in args.cases:
        libs, name, columns, steps, seeds = CASES[case]
        x, y, kind, k, batch = data(name, columns)
        refs = [fs.reference(x, y, kind, k, scramble) for scramble in (0, 1)]
        m_ref, s_ref = (refs[0][0] + refs[1][0]) / 2, (refs[0][1] + refs[1][1]) / 2
        print(f"\n{case}: {name}, {x.shape[1]} features, N = {len(y)}, B = {batch}, "
              f"{steps} steps", flush=True)  # fmt: skip
        counts: dict = {}
        for lib in (lib for lib in libs if lib in args.libs):
            for seed in args.seeds or seeds:
                for settle in args.settle:
                    save = args.save and f"{args.save}_{case}"
                    mark = one(lib, x, y, kind, k, batch, steps, seed, settle, m_ref, s_ref, save)
                    counts.setdefault(settle, []).append(mark)
        for settle, marks in counts.items():
            print(f"  settle {settle}: {len(marks)} fits, {marks.count('false alarm')} false "
                  f"alarms, {marks.count('SILENT')} silently wrong", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
