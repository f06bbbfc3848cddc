"""A floor under the means' error (issue 40): saved verdicts judged again, before and after.

The verdict's error of the tail's average of a posterior mean comes from the scatter of
its 2 * PARTS parts; a wander slower than a part hides from it (measured: breast cancer,
8 columns, B = 32, 300 steps, NumPyro seed 3: 0.57 sd off, error 0.128, quiet). The
schedule's docstring says an average over a window of W steps is within about
``sqrt(epoch / W)`` posterior sds whatever the step (``epoch`` the batches of an epoch).
Each saved fit (``bench/fit_settle.py --save PREFIX``: files ``PREFIX_<case>_<lib>_
<seed>_settle<k>.pkl``) is judged by ``judge()`` with the means' error floored by
``c * sqrt(epoch / window)`` (``convergence.MEANS_FLOOR``; 0: the verdict before;
``--noise``: the noise of their change too, by sqrt(2) times that), for each ``c``; the
distance of what the fit returns (its parts' average: the tail's or the last window's,
as the verdict names) from the
full-data mean-field optimum (L-BFGS, as bench/fit_statistics.py) in posterior sds:

    PYTHONPATH=src .venv/bin/python bench/fit_means_floor.py --c 0.5 0.75 1 \
        /tmp/fit46/save/*settle1.pkl /tmp/floor47/v_d_*settle1.pkl \
        --logs /tmp/fit46/save.log /tmp/floor47/d.log

(``--logs``: the distances bench/fit_settle.py printed for these fits, which the floor
does not change - it changes no fit's ``moving``, so no fit's estimate - used where
given instead of the parts' average.)
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fit_settle  # noqa: E402
import fit_verdict_trace as fvt  # noqa: E402

FLOOR: dict = {}  # --noise: the floor of the judge() call under way


def patch() -> None:
    """--noise: floor the noise of the means' change (``convergence._change``'s first call
    per judge) by sqrt(2) x the means' floor (each window's mean, their difference)."""
    from exactbatch.adapters import convergence

    real = convergence._change

    def change(values):
        moved, noise, error = real(values)
        if FLOOR.pop("floor", 0.0):
            noise = np.fmax(noise, np.sqrt(2) * FLOOR["last"])
        return moved, noise, error

    convergence._change = change


def references(case: str):
    _, name, columns, *_ = fit_settle.CASES[case]
    x, y, kind, k, _batch = fit_settle.data(name, columns)
    refs = [fit_settle.fs.reference(x, y, kind, k, scramble) for scramble in (0, 1)]
    return (refs[0][0] + refs[1][0]) / 2, (refs[0][1] + refs[1][1]) / 2


def saved_fits(paths):
    """Each of bench/fit_verdict_trace.py's saved verdict inputs at ``paths`` (named
    ``..._CASE_LIB_SEED_settleN``): ``(case, lib, seed, settle), (m_ref, s_ref), inputs``,
    its case's reference means and sds computed once a case."""
    refs: dict = {}
    for path in paths:
        case, lib, seed, settle = re.search(
            r"_([a-e])_(numpyro|pymc)_(\d+)_settle(\d+)", path
        ).groups()
        if case not in refs:
            refs[case] = references(case)
        with open(path, "rb") as f:
            inputs = pickle.load(f)
        yield (case, lib, seed, settle), refs[case], inputs


def verdict(inputs, c: float, noise: bool):
    """The saved inputs judged with the means' floor at ``c`` (0: none, the verdict before)."""
    from exactbatch.adapters import convergence

    parts, losses, window, epoch, *draws = inputs
    convergence.MEANS_FLOOR = c
    floor = c * np.sqrt(epoch / window) if epoch else 0.0
    if noise:
        FLOOR.update(floor=floor, last=floor)
    return convergence.judge(parts, losses, window, epoch, *draws)


def logged(paths) -> dict:
    """The distance each fit returned, as bench/fit_settle.py printed it: {(case, lib,
    seed, settle): sd}. (The parts' own average is a rough stand-in: NumPyro's parts are
    the moments of the guide's draws under one key, a common Monte Carlo offset of about
    0.1 sd that the verdict's differences cancel but a distance keeps.)"""
    offs, case = {}, None
    for path in paths or ():
        for line in open(path):
            head = re.match(r"([a-e]): ", line)
            case = head.group(1) if head else case
            fit = re.match(r"\s+(numpyro|pymc)\s+seed (\d+) settle (\d+):\s+([\d.]+) sd", line)
            if fit:
                lib, seed, settle, off = fit.groups()
                offs[case, lib, seed, settle] = float(off)
    return offs


def words(v) -> str:
    if v.converged is False:
        return "NOT conv" if v.means_judged else "too short"
    return "quiet" if v.sds_judged else "sds unjudged"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--c", type=float, nargs="+", default=[0.5, 0.75, 1.0])
    ap.add_argument("--noise", action="store_true", help="floor the change's noise too")
    ap.add_argument("--logs", nargs="+", help="bench/fit_settle.py's output: its fits' distances")
    args = ap.parse_args()
    from exactbatch.adapters.convergence import PARTS, estimate

    patch()
    offs = logged(args.logs)
    counts = {c: {"silent": 0, "alarm": 0} for c in [0.0, *args.c]}
    head = "  ".join(f"c={c:<4g} error verdict      " for c in args.c)
    print(f"{'fit':22s} off(sd) error  verdict       {head}")
    for (case, lib, seed, settle), (m_ref, s_ref), inputs in saved_fits(args.files):
        means = np.stack([fvt._flat_part(p, lib)[0] for p in inputs[0]])
        rows = {c: verdict(inputs, c, args.noise and c > 0) for c in [0.0, *args.c]}
        cells = []
        for c, v in rows.items():
            returned = estimate(v, True)
            m = means[PARTS:].mean(0) if returned.startswith("the mean of the last") else (
                means.mean(0))  # fmt: skip
            off = offs.get((case, lib, seed, settle), float((np.abs(m - m_ref) / s_ref).max()))
            warned = v.converged is False or not v.sds_judged
            counts[c]["silent"] += off > 0.5 and not warned
            counts[c]["alarm"] += off <= 0.2 and warned
            mark = "!" if off > 0.5 and not warned else "?" if off <= 0.2 and warned else " "
            cells.append((off, f"{v.error:.3f} {words(v):12s}{mark}"))
        print(f"{case} {lib:7s} s{seed} (W {inputs[2]:4d}) {cells[0][0]:5.2f}  "
              + "  ".join(cell for _, cell in cells), flush=True)  # fmt: skip
    print("! quiet and > 0.5 sd off   ? warned and within 0.2 sd")
    for c, n in counts.items():
        print(f"c = {c:g}: {n['silent']} silently wrong, {n['alarm']} false alarms")


if __name__ == "__main__":
    main()
