"""One fit of bench/fit_statistics.py with the verdict's inputs saved, to judge again.

Runs ``fit_numpyro`` or ``fit_pymc`` of fit_statistics.py on one grid cell or data set,
saving (pickle) what the verdict judged - the parts' posterior means and sds, the
losses, the window, the epoch - with the reference, the last iterate and what the fit
returned, so that a change of the verdict alone can be measured on the same fits
(``--judge FILE ...``: each saved fit judged again by today's verdict, with the distance
of each estimate - the last iterate, the tail's average, the last window's, the last
part's - from the reference; a file may also hold bare ``(parts, losses, window, epoch
[, draws])`` tuples pickled one after another, the verdict's inputs alone, judged again
at ``draws`` or the tail's 4):

    PYTHONPATH=src .venv/bin/python bench/fit_verdict_trace.py --lib pymc --n 10000 \
        --b 256 --steps 5000 --seed 0 --scale 1 10 100 --out /tmp/cell.pkl
    PYTHONPATH=src .venv/bin/python bench/fit_verdict_trace.py --judge /tmp/*.pkl
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pickle
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fit_statistics as fs  # noqa: E402

KEYS = ("b", "sigma", "w")


def _flat_part(part, lib):
    """A part's {name: (mean, sd)} as flat arrays in fit_statistics' order (b, sigma, w),
    the noise sd on the log scale as the reference holds it: PyMC's ``sigma_log__``;
    NumPyro's draws of ``sigma`` itself, a log-normal whose log's moments follow."""
    part = {k.replace("_log__", ""): v for k, v in part.items()}
    if lib == "numpyro" and "sigma" in part:
        m, s = (np.asarray(v, dtype=np.float64) for v in part["sigma"])
        var = np.log1p((s / m) ** 2)
        part["sigma"] = (np.log(m) - var / 2, np.sqrt(var))
    keys = [k for k in KEYS if k in part]
    return (np.concatenate([np.ravel(part[k][0]) for k in keys]),
            np.concatenate([np.ravel(part[k][1]) for k in keys]))  # fmt: skip


def run(args):
    from exactbatch.adapters import convergence, pymc_schedule
    from exactbatch.adapters import numpyro_run as enp

    saved = {}
    real_judge = convergence.judge

    def spy(parts, losses, window, epoch=None, draws=1):
        if parts:
            saved.update(parts=parts, losses=np.asarray(losses), window=window, epoch=epoch,
                         draws=draws)  # fmt: skip
        return real_judge(parts, losses, window, epoch, draws)

    enp.judge = pymc_schedule.judge = spy
    if args.data:
        x, y, kind, k = fs.load(args.data)
        batch = args.b or fs.DATA[args.data][1]
        refs = [fs.reference(x, y, kind, k, s) for s in (0, 1)]
        m_ref, s_ref = (refs[0][0] + refs[1][0]) / 2, (refs[0][1] + refs[1][1]) / 2
    else:
        kind, k, batch = args.kind, None, args.b
        x, y = fs.synthetic(args.n, kind, scale=args.scale)
        m_ref, s_ref = fs.reference(x, y, kind, None, 0)
    last = {}
    if args.lib == "pymc":
        real_finish = pymc_schedule.Run.finish

        def finish(self, approx):
            last.update(mean=approx.mean.eval(), sd=approx.std.eval())
            return real_finish(self, approx)

        pymc_schedule.Run.finish = finish
        m, s, verdict, warned, lr = fs.fit_pymc(x, y, kind, k, batch, args.steps, args.seed)
    else:
        real_steps, real_verdict = enp.Run.steps, enp.verdict

        def steps(self, state, feed, bar):
            state = real_steps(self, state, feed, bar)
            last["state"] = state
            return state

        def verdict(svi, *a):
            last["svi"] = svi
            return real_verdict(svi, *a)

        enp.Run.steps, enp.verdict = steps, verdict
        m, s, verdict, warned, lr = fs.fit_numpyro(x, y, kind, k, batch, args.steps, args.seed)
        params = last.pop("svi").get_params(last.pop("state"))
        keys = [key[: -len("_auto_loc")] for key in params if key.endswith("_auto_loc")]
        found = fs.flat(
            {key: np.asarray(params[f"{key}_auto_loc"]) for key in keys},
            {key: np.asarray(params[f"{key}_auto_scale"]) for key in keys},
        )
        last.update(mean=found[0], sd=found[1])
    saved.update(lib=args.lib, kind=kind, batch=batch, steps=args.steps, seed=args.seed,
                 m_ref=m_ref, s_ref=s_ref, returned=(m, s), verdict=verdict, warned=warned,
                 lr=lr, last=last, label=args.label or f"{args.lib} {args.data or kind} "
                 f"N={len(y)} B={batch} {args.steps} steps seed {args.seed}"
                 f"{' scale ' + str(args.scale) if args.scale else ''}")  # fmt: skip
    with open(args.out, "wb") as f:
        pickle.dump(saved, f)
    print(saved["label"], verdict, "WARNED" if warned else "quiet", flush=True)


def rejudge(paths):
    from exactbatch.adapters.convergence import judge
    from exactbatch.adapters.schedule import TAIL_DRAWS

    for path in paths:
        with open(path, "rb") as f:
            saved = []
            while True:
                try:
                    saved.append(pickle.load(f))
                except EOFError:
                    break
        for k, s in enumerate(saved):
            if isinstance(s, tuple):  # the verdict's inputs alone
                parts_, losses, window, epoch, *draws = s
                v = judge(parts_, losses, window, epoch, *(draws or [TAIL_DRAWS]))
                print(f"{path} #{k}: {v}\n  {_shift_line(v)}", flush=True)
            else:
                _rejudge_one(s)


def _rejudge_one(s):
    from exactbatch.adapters.convergence import PARTS, judge

    m_ref, s_ref = s["m_ref"], s["s_ref"]
    flats = [_flat_part(p, s["lib"]) for p in s["parts"]]
    means = np.stack([m for m, _ in flats])
    sds = np.stack([v for _, v in flats])

    def off(m, sd, m_ref=m_ref, s_ref=s_ref):
        d, r = np.abs(m - m_ref) / s_ref, sd / s_ref
        return f"{d.max():.2f} sd, sds {r.min():.2f}-{r.max():.2f}x"

    last = s["last"]
    if last and s["lib"] == "pymc":  # ADVI's flat order: w, b, sigma (the model's)
        front = means.shape[1] - np.size(s["parts"][-1]["w"][0])
        last = {k: np.r_[v[-front:], v[:-front]] for k, v in last.items()}
    v = judge(s["parts"], s["losses"], s["window"], s["epoch"], s.get("draws", 1))
    m, sd = s["returned"]
    print(f"{s['label']}: returned {off(m, sd)}; tail {off(means.mean(0), sds.mean(0))}, "
          f"last window {off(means[PARTS:].mean(0), sds[PARTS:].mean(0))}, last part "
          f"{off(means[-1], sds[-1])}"
          + (f", last iterate {off(last['mean'], last['sd'])}" if last else "")
          + f"\n  then: {s['verdict']}\n  now:  {v}\n  {_shift_line(v)}", flush=True)  # fmt: skip


def _shift_line(v):
    """The means' shift (convergence.shift) and the verdict without it (the drift alone)."""
    if v.shift is None:
        return "shift: not judged"
    alone = "converged" if dataclasses.replace(v, shift=None).converged else "NOT converged"
    return (f"shift {v.shift:+.3f} ({v.shift_where}: moved {v.shift_moved:.3f}, noise "
            f"{v.shift_noise:.3f}, t {v.t:.2f}); without it: {alone}")  # fmt: skip


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--judge", nargs="+", help="saved fits to judge again")
    ap.add_argument("--lib", default="numpyro", choices=["numpyro", "pymc"])
    ap.add_argument("--data", choices=list(fs.DATA))
    ap.add_argument("--kind", default="linear", choices=["linear", "logistic"])
    ap.add_argument("--n", type=int, default=10_000)
    ap.add_argument("--b", type=int)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--scale", type=float, nargs=3)
    ap.add_argument("--label")
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.judge:
        rejudge(args.judge)
    else:
        run(args)


if __name__ == "__main__":
    main()
