"""mutmut's mutants applied by hand, for a few functions of a target whose mutmut run
does not fit the time (its stats pass runs every test file of the target, fits included).

A pytest plugin: in one pytest session, for each mutant named in the file ``$MUTS`` (one
name a line, as in mutmut's ``*.meta`` files), it sets ``MUTANT_UNDER_TEST`` (which
mutmut's trampolines read at each call) and runs the selected tests until one fails;
one JSON line a mutant into ``$VERDICTS`` (killed or survived, and the test that killed
it). A control run with no mutant comes first: it must survive, or the selection fails
without a mutant. The mutants come from a stopped ``mutmut run`` in build/mutants/TARGET
(its mutants/src), after ``tests/mutants.py``'s ``prepare(TARGET)``:

    MUTS=names.txt VERDICTS=verdicts.jsonl CI=true \\
    PYTHONPATH=build/mutants/samplers/mutants/src:tests \\
    python -m pytest -p mutants_by_hand -p no:cacheprovider -n 0 tests/adapters/test_pymc.py -k ...

    python tests/mutants_by_hand.py verdicts.jsonl ...   # killed / total per function

A later file's verdict on a mutant (a recheck of the survivors) replaces an earlier one's.

With ``STATS`` set to a mutmut run's ``mutants/mutmut-stats.json``, each mutant runs only
the selected tests that called its function in that run's stats pass, quickest first, as
mutmut would (a mutant whose function no selected test called: "no tests"); without it,
every selected test. One session, no fork a mutant: JAX's and PyTensor's caches stay
warm, which is most of a fit helper's test time (the ``samplers`` target, 2026-12-07).
A mutant's tests run a module at a time, and its consecutive tests of one module share
that module's fixtures (a Dask or Ray cluster started once a mutant, not once a test);
every fixture ends with the mutant. With ``EXACTBATCH_DASK_THREADS=1``,
tests/adapters/test_dask.py's cluster is threads of this process (the ``cluster``
target: a second to start, not ten under load).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter

CONTROL = "__control__"


def pytest_runtestloop(session):  # a pytest hook: replaces the session's run
    from _pytest.runner import runtestprotocol

    with open(os.environ["MUTS"]) as f:
        names = [line.strip() for line in f if line.strip()]
    stats = None
    if os.environ.get("STATS"):
        with open(os.environ["STATS"]) as f:
            stats = json.load(f)
    with open(os.environ["VERDICTS"], "a") as out:
        for name in [CONTROL, *names]:
            os.environ["MUTANT_UNDER_TEST"] = "" if name == CONTROL else name
            start, verdict, by = time.time(), "survived", None
            items = session.items if name == CONTROL else _items_for(session.items, name, stats)
            if not items:
                verdict = "no tests"
            for k, item in enumerate(items):
                # the next test of this mutant's, so that a module's fixtures (a Dask or
                # Ray cluster) serve its consecutive tests; every fixture ends with the
                # mutant's last test (a cluster's worker processes hold the mutant they
                # started with)
                after = items[k + 1] if k + 1 < len(items) else None
                try:
                    reports = runtestprotocol(item, nextitem=after, log=False)
                except Exception as e:  # a mutant that breaks the test's own machinery
                    verdict, by = "killed", f"{type(e).__name__} in {item.nodeid}"
                else:
                    if not any(r.failed for r in reports):
                        continue
                    verdict, by = "killed", item.nodeid
                if after is not None:  # (its fixtures end with it too)
                    session._setupstate.teardown_exact(None)
                break
            seconds = round(time.time() - start, 1)
            out.write(json.dumps({"name": name, "verdict": verdict, "by": by, "s": seconds}))
            out.write("\n")
            out.flush()
    return True


def _items_for(items: list, name: str, stats: dict | None) -> list:
    """The selected tests to run for mutant ``name``: with mutmut's stats, those that
    called its function, quickest first (a module's together); else all of them."""
    if stats is None:
        return items
    called = set(stats["tests_by_mangled_function_name"].get(name.rsplit("__mutmut_", 1)[0], ()))
    took = stats["duration_by_test"]
    mine = [i for i in items if i.nodeid in called]
    # each module's tests together (its fixtures set up once), the modules and their
    # tests quickest first
    quickest: dict = {}
    for i in mine:
        quickest[i.path] = min(quickest.get(i.path, 1e9), took.get(i.nodeid, 0))
    return sorted(mine, key=lambda i: (quickest[i.path], str(i.path), took.get(i.nodeid, 0)))


def summarize(paths: list[str]) -> None:
    """Killed / total per mutated function, and the mutants not killed."""
    verdicts: dict[str, str] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                row = json.loads(line)
                verdicts[row["name"]] = row["verdict"]
    control = verdicts.pop(CONTROL, "survived")
    if control != "survived":
        sys.exit("the control run (no mutant) failed: the verdicts mean nothing")
    total: Counter[str] = Counter()
    killed: Counter[str] = Counter()
    for name, verdict in verdicts.items():
        function = name.rsplit("__mutmut_", 1)[0]
        total[function] += 1
        killed[function] += verdict == "killed"
    for function in sorted(total):
        print(f"{function}: {killed[function]} of {total[function]} killed")
    print(f"all: {sum(killed.values())} of {sum(total.values())} killed")
    for name in sorted(n for n, v in verdicts.items() if v != "killed"):
        print(f"  not killed: {name}")


if __name__ == "__main__":
    summarize(sys.argv[1:])
