"""A mean's shift against the batches' slow wander (issue 40): saved verdicts judged again.

The verdict calls a posterior mean shifted when its change between the two windows is
beyond ``t`` times its noise - the parts' scatter about a line, as if the parts were
independent - and matters. Two long breast-cancer fits (NumPyro, B = 32, 10,000 steps,
seeds 1 and 2: 0.08 and 0.10 sd off) warned of a shift: the batches' wander outlasts a
part. Each saved fit (``bench/fit_settle.py --save PREFIX``) is judged by ``judge()``
three ways:

* ``before``: a move matters above ``THRESHOLD`` (``convergence.HELD`` = 1);
* ``ar1``: the same, each mean's noise widened for the parts' correlation - an AR(1) of
  lag-1 correlation ``phi`` between parts, ``phi`` solved from the median over the means
  of their detrended parts' lag-1 ratio (that ratio is -0.25 for independent parts), the
  standard error of a difference of two windows' means under it over the one the
  detrended scatter gives (``--cap``: the largest ``phi``);
* ``after``: the rule built - a move matters when the half of it that the tail's average
  holds is above ``THRESHOLD`` (``HELD`` = 0.5).

It prints, per fit, the correlation, the largest shift margin of each, and the verdict,
with the distance of what the fit returns from the full-data mean-field optimum (as
bench/fit_means_floor.py: ``--logs`` gives the distance each fit printed, used where the
rule returns the estimate the fit returned; otherwise the parts' own average):

    PYTHONPATH=src .venv/bin/python bench/fit_shift_wander.py \\
        /tmp/fit46/save/*.pkl /tmp/floor47/v_d_*settle1.pkl \\
        --logs /tmp/fit46/save.log /tmp/floor47/d.log

``--synthetic``: still fits of 31 latents whose parts follow an AR(1) of correlation
0-0.9 between parts, the windows' means 0.035-0.07 sd apart in sd, 300 seeds each: the
share that shifted before and after (no files needed).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fit_means_floor as fmf  # noqa: E402
import fit_verdict_trace as fvt  # noqa: E402

WIDEN: dict = {}  # ar1: the factor of the judge() call under way


def ar1_factor(values: np.ndarray, cap: float) -> tuple[float, float]:
    """(phi, the noise's factor) for the parts ``values`` (2 * PARTS rows, a column a mean)."""
    from exactbatch.adapters.convergence import PARTS

    n = 2 * PARTS
    k = np.arange(n)
    x = np.c_[np.ones(n), k - (n - 1) / 2]
    m = np.eye(n) - x @ np.linalg.pinv(x)  # the residuals about a line
    lag = np.eye(n, k=-1)
    c = np.r_[-np.ones(PARTS), np.ones(PARTS)] / PARTS  # the windows' difference

    def corr(phi):
        return phi ** np.abs(k[:, None] - k[None, :])

    def ratio(phi):  # the expected detrended lag-1 ratio
        r = corr(phi)
        return np.trace(m.T @ lag @ m @ r) / np.trace(m @ r)

    def factor(phi):  # Var(difference) / E[detrended variance], over independence's 0.5
        r = corr(phi)
        return float(np.sqrt(c @ r @ c / (np.trace(m @ r) / (n - 2)) / 0.5))

    e = m @ values
    seen = (e**2).sum(0) > 0
    rho = float(np.median((e[1:] * e[:-1]).sum(0)[seen] / (e**2).sum(0)[seen]))
    grid = np.linspace(0.0, cap, 200)
    ratios = np.array([ratio(p) for p in grid])
    phi = 0.0 if rho <= ratios[0] else float(np.interp(rho, ratios, grid))
    return phi, factor(phi)


def patch() -> None:
    from exactbatch.adapters import convergence

    real = convergence._change

    def change(values):
        moved, noise, error = real(values)
        factor = WIDEN.pop("factor", None)  # the means' call: the first of each judge()
        return moved, noise if factor is None else noise * factor, error

    convergence._change = change


def judged(inputs, rule: str, cap: float):
    from exactbatch.adapters import convergence

    convergence.HELD = 0.5 if rule == "after" else 1.0
    if rule == "ar1":
        WIDEN["factor"] = inputs["factor"]
    return convergence.judge(*inputs["raw"])


def synthetic(seeds: int = 300, latents: int = 31) -> None:
    """The shift's false alarms on still fits whose parts wander (an AR(1) between parts)."""
    from exactbatch.adapters import convergence
    from exactbatch.adapters.convergence import PARTS

    k = np.arange(2 * PARTS)
    c = np.r_[-np.ones(PARTS), np.ones(PARTS)] / PARTS
    print("correlation  apart(sd)  before  after")
    for phi in (0.0, 0.3, 0.5, 0.7, 0.9):
        for apart in (0.035, 0.05, 0.07):
            sd = apart / np.sqrt(c @ phi ** np.abs(k[:, None] - k[None, :]) @ c)
            shares = []
            for held in (1.0, 0.5):
                convergence.HELD = held
                rng, shifted = np.random.default_rng(1), 0
                for _ in range(seeds):
                    x = np.empty((2 * PARTS, latents))
                    x[0] = rng.standard_normal(latents) * sd
                    for j in range(1, 2 * PARTS):
                        x[j] = phi * x[j - 1] + np.sqrt(1 - phi**2) * sd * rng.standard_normal(
                            latents
                        )
                    parts = [{"w": (x[j], np.ones(latents))} for j in range(2 * PARTS)]
                    shifted += convergence.judge(parts, np.zeros(100), 50).shifted
                shares.append(shifted / seeds)
            print(f"{phi:11.1f}  {apart:9.3f}  {shares[0]:6.1%}  {shares[1]:5.1%}", flush=True)
    convergence.HELD = 0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*")
    ap.add_argument("--synthetic", action="store_true", help="AR(1) still fits instead")
    ap.add_argument("--logs", nargs="+")
    ap.add_argument("--cap", type=float, default=0.9, help="the largest phi (ar1)")
    args = ap.parse_args()
    from exactbatch.adapters.convergence import PARTS, estimate

    if args.synthetic:
        synthetic()
        return
    patch()
    offs = fmf.logged(args.logs)
    rules = ("before", "ar1", "after")
    counts = {r: {"silent": 0, "alarm": 0, "warned": 0} for r in rules}
    print(f"{'fit':24s} tail/last(sd)  phi  x     " + "  ".join(f"{r:24s}" for r in rules))
    for (case, lib, seed, settle), (m_ref, s_ref), raw in fmf.saved_fits(args.files):
        flats = [fvt._flat_part(p, lib) for p in raw[0]]
        means = np.stack([m for m, _ in flats])
        scaled = means / np.stack([s for _, s in flats])[PARTS:].mean(0)
        phi, factor = ar1_factor(scaled, args.cap)
        inputs = {"raw": raw, "factor": factor}
        tail = float((np.abs(means.mean(0) - m_ref) / s_ref).max())
        last = float((np.abs(means[PARTS:].mean(0) - m_ref) / s_ref).max())
        first = estimate(judged(inputs, "before", args.cap), True)
        cells = []
        for rule in rules:
            v = judged(inputs, rule, args.cap)
            returned = estimate(v, True)
            off = last if returned.startswith("the mean of the last") else tail
            if returned == first:  # the estimate the fit returned: its printed distance
                off = offs.get((case, lib, seed, settle), off)
            warned = v.converged is False or not v.sds_judged
            silent, alarm = off > 0.5 and not warned, off <= 0.2 and warned
            counts[rule]["silent"] += silent
            counts[rule]["alarm"] += alarm
            counts[rule]["warned"] += warned
            mark = "!" if silent else "?" if alarm else " "
            said = "warned" if warned else "quiet"
            cells.append(f"{off:4.2f} {v.shift:+.3f} {said:6s}{mark}        ")
        print(f"{case} {lib:7s} s{seed} settle{settle}  {tail:4.2f}/{last:4.2f}   {phi:4.2f} "
              f"{factor:4.2f}  " + "  ".join(cells), flush=True)  # fmt: skip
    print("off, shift margin, verdict; ! quiet and > 0.5 sd off   ? warned and within 0.2 sd")
    for rule, n in counts.items():
        print(f"{rule}: {n['warned']} warned, {n['silent']} silently wrong, "
              f"{n['alarm']} false alarms")  # fmt: skip


if __name__ == "__main__":
    main()
