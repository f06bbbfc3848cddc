"""`make mutants`: mutation testing of the order, the .ndf checks, audit, the loader's
cursor and state, batching and feeds.

mutmut (configured in pyproject.toml's [tool.mutmut]) puts one-line bugs
into the code, one at a time, and runs the tests that call the mutated
function; a mutant the tests pass with has survived. Each target below is a
separate mutmut run in build/mutants/TARGET, with only its own files mutated
and its own test files run, so that the whole run stays feasible on two
cores. Prints, per target, killed / survived / total and the kill rate, and
lists the survivors (``--diff`` shows each one's change).

    python tests/mutants.py                 # every target, in the order below
    python tests/mutants.py order ndf       # some targets
    python tests/mutants.py --summary       # the last results again, no run
    python tests/mutants.py --recheck ndf   # only what was not killed, against today's tests

Not part of ``make test``: a full run takes about an hour on two cores.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    sys.exit("make mutants needs Python >= 3.11 (tomllib)")

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "mutants"

# Memory measurements are slow (and the rows they hand out are checked elsewhere); a test
# that runs a new process cannot see a mutant.
FAST_ONLY = ["-k", "not memory and not new_process"]
# The loader's tests that run batches through every stage, for the stages' targets.
PIPELINE_TESTS = [
    "tests/loader/test_exactness.py",
    "tests/loader/test_loader.py",
    "tests/loader/test_resume.py",
    "tests/loader/test_distributed.py",
    *FAST_ONLY,
]

# target: (files mutated, mutant-name globs run (functions), test files run)
TARGETS = {
    "order": (
        ["src/exactbatch/order/*"],
        ["exactbatch.order.*"],
        [
            "tests/order/test_bijection.py",
            "tests/order/test_shards.py",
            "tests/loader/test_distributed.py",
        ],
    ),
    "ndf": (
        [
            "src/exactbatch/ndf/format.py",
            "src/exactbatch/ndf/file.py",
            "src/exactbatch/ndf/local.py",
        ],
        [  # the open, size and header checks
            "exactbatch.ndf.format.x_expected_size*",
            "exactbatch.ndf.format.x_check_header*",
            "exactbatch.ndf.local.xǁLocalHandleǁcheck_size*",
            "exactbatch.ndf.local.xǁLocalHandleǁpread_into*",
            "exactbatch.ndf.file.x_open_ndf*",
        ],
        [  # (the tests that read in a child process cannot see a mutant: left out)
            "tests/ndf/test_file.py",
            *(
                f"tests/reliability/test_files.py::{t}"
                for t in (
                    "test_fuzzed_ndf_file_is_a_clear_error_or_reads_exactly",
                    "test_giant_header_is_an_ndf_error_without_allocating",
                    "test_zero_width_file_with_a_giant_row_count_reads_as_empty_rows",
                    "test_missing_ndf_file_is_file_not_found",
                )
            ),
            # open_ndf's URL branch: fsspec's memory://, and S3 with its storage_options
            "tests/ndf/test_remote.py::test_memory_protocol_directly",
            "tests/ndf/test_remote.py::test_open_ndf_url_header_and_rows",
        ],
    ),
    "audit": (
        ["src/exactbatch/audit.py"],
        ["exactbatch.audit.*"],
        [
            "tests/test_audit.py",
            "tests/feeds/test_streamed_audit.py",
            "tests/loader/test_loader.py",
            "tests/loader/test_exactness.py",
        ],
    ),
    "loader": (  # the cursor (claims, hand-outs, give-backs, the ledger check) and the state
        [
            "src/exactbatch/loader/cursor.py",
            "src/exactbatch/loader/epoch_iterator.py",
            "src/exactbatch/loader/state.py",
        ],
        [
            "exactbatch.loader.cursor.*",
            "exactbatch.loader.epoch_iterator.*",
            "exactbatch.loader.state.*",
        ],
        [
            "tests/loader/test_exactness.py",
            "tests/loader/test_loader.py",
            "tests/loader/test_resume.py",
            "tests/loader/test_threads.py",
            "tests/loader/test_distributed.py",
            "tests/loader/test_prefetch.py",
            "tests/loader/test_groups.py",
            "tests/loader/test_lifetimes.py",
        ],
    ),
    "buffers": (  # the shuffle buffers: one piece or two halves, and the rule between them
        [
            "src/exactbatch/batching/buffer.py",
            "src/exactbatch/batching/buffer_whole.py",
            "src/exactbatch/batching/buffer_halves.py",
        ],
        ["exactbatch.batching.buffer*"],
        [
            "tests/batching/",
            "tests/feeds/test_streamed_properties.py",
            "tests/feeds/test_streamed.py",
            "tests/loader/test_exactness.py",
            "tests/loader/test_resume.py",
            *FAST_ONLY,
        ],
    ),
    "batching": (  # the epochs' batch plans (random access and streamed), re-batching, the gather
        [
            "src/exactbatch/batching/gather.py",
            "src/exactbatch/batching/random_access_epoch.py",
            "src/exactbatch/batching/rebatch.py",
            "src/exactbatch/batching/returned.py",
            "src/exactbatch/batching/stream_epoch.py",
        ],
        [
            "exactbatch.batching.gather.*",
            "exactbatch.batching.random_access_epoch.*",
            "exactbatch.batching.rebatch.*",
            "exactbatch.batching.returned.*",
            "exactbatch.batching.stream_epoch.*",
        ],
        [
            "tests/batching/",
            "tests/feeds/test_streamed_properties.py",
            "tests/feeds/test_streamed.py",
            *PIPELINE_TESTS,
        ],
    ),
    "feeds": (  # a source cut into epochs for one shard, and a stream's passes and hooks
        [
            "src/exactbatch/feeds/*",
            "src/exactbatch/sources/passes.py",
            "src/exactbatch/sources/protocols.py",
        ],
        ["exactbatch.feeds.*", "exactbatch.sources.passes.*", "exactbatch.sources.protocols.*"],
        [
            "tests/feeds/",
            "tests/batching/",
            "tests/sources/test_protocols.py",
            "tests/sources/test_blocks.py",  # chunk sources
            "tests/sources/test_parquet.py",
            *PIPELINE_TESTS,
        ],
    ),
}

KILLED = {"killed", "timeout", "segfault", "caught by type check"}


def prepare(target: str) -> Path:
    """A fresh work folder: src and tests linked, pyproject.toml with the target's config
    and pytest's settings."""
    files, _, tests = TARGETS[target]
    work = WORK / target
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in ("src", "tests"):
        (work / name).symlink_to(ROOT / name)
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    config = dict(tool["mutmut"], only_mutate=files, pytest_add_cli_args_test_selection=tests)
    lines = ["[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in config.items()]
    # pytest's own settings too (pythonpath: the tests import helpers and laws from tests/)
    lines += ["[tool.pytest.ini_options]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in tool["pytest"]["ini_options"].items()]
    (work / "pyproject.toml").write_text("\n".join(lines) + "\n")
    return work


def run(target: str, recheck: bool = False) -> None:
    """A fresh mutmut run of ``target``; with ``recheck``, only what the last run did not
    kill, in its folder, against the tests and code as they are now (new tests included;
    the mutants of a changed function are made anew and left unchecked, for the next
    recheck)."""
    if recheck:
        names = sorted(n for n, s in (results(target) or {}).items() if s not in KILLED)
        if not names:
            print(f"== {target}: no survivors to recheck", flush=True)
            return
        work = WORK / target
    else:
        work, names = prepare(target), TARGETS[target][1]
    env = dict(os.environ, CI="true", PYTHONPATH=str(ROOT / "src"))  # derandomized hypothesis
    print(f"== {target}: mutmut run in {work}", flush=True)
    with open(work / "mutmut.log", "a" if recheck else "w") as log:
        subprocess.run(
            [sys.executable, "-m", "mutmut", "run", *names],
            cwd=work,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )


def results(target: str) -> dict[str, str] | None:
    """Each selected mutant's status, from mutmut's files; None if never run."""
    from mutmut.stats import status_by_exit_code

    metas = sorted((WORK / target / "mutants").rglob("*.meta"))
    if not metas:
        return None
    globs = TARGETS[target][1]
    out = {}
    for meta in metas:
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if any(fnmatch.fnmatchcase(name, g) for g in globs):
                out[name] = status_by_exit_code[code]
    return out


def summary(targets: list[str], diff: bool) -> None:
    for target in targets:
        res = results(target)
        if res is None:
            print(f"{target:9s} not run")
            continue
        killed = sum(s in KILLED for s in res.values())
        total = len(res)
        rest = {n: s for n, s in res.items() if s not in KILLED}
        rate = 100 * killed / total if total else 0.0
        print(
            f"{target:9s} killed {killed:4d}  survived {total - killed:4d}  total {total:4d}"
            f"  kill rate {rate:5.1f}%"
        )
        unchecked = sum(s == "not checked" for s in res.values())
        if unchecked:
            print(
                f"    {unchecked} not checked: the run stopped early "
                f"(see {WORK / target / 'mutmut.log'}); they count as not killed"
            )
            rest = {n: s for n, s in rest.items() if s != "not checked"}
        for name, status in sorted(rest.items()):
            print(f"    {status:10s} {name}")
            if diff:
                show = subprocess.run(
                    [sys.executable, "-m", "mutmut", "show", name],
                    cwd=WORK / target,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                print("        " + show.stdout.strip().replace("\n", "\n        "))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", help=f"some of {', '.join(TARGETS)} (default: all)")
    ap.add_argument("--summary", action="store_true", help="print the last results, run nothing")
    ap.add_argument("--diff", action="store_true", help="show each survivor's change")
    ap.add_argument(
        "--recheck",
        action="store_true",
        help="run only what the last run did not kill, in its folder, against today's "
        "tests and code (mutmut makes the mutants of changed functions anew, unchecked; "
        "run --recheck until none is left unchecked; a new pragma shows in a fresh run)",
    )
    args = ap.parse_args()
    targets = args.targets or list(TARGETS)
    unknown = [t for t in targets if t not in TARGETS]
    if unknown:
        ap.error(f"unknown target(s) {unknown}; expected some of {list(TARGETS)}")
    if not args.summary:
        for target in targets:
            run(target, args.recheck)
    summary(targets, args.diff)


if __name__ == "__main__":
    main()
