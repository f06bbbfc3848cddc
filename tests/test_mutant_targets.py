"""Every module of src/ with code of its own is under a target of ``make mutants``
(tests/mutants.py), so new code cannot land where no mutation run looks (issue 41).

A module is covered when one of TARGETS' mutated-file globs matches it. One that
no glob matches must be thin - at most :data:`MAX_THIN_LINES` lines of code
(:func:`mutants.code_lines`: no blank line, comment or docstring) - or named in
:data:`GLUE` with the reason it has no logic a mutant could break.
"""

from __future__ import annotations

import fnmatch

import mutants
import pytest

ROOT = mutants.ROOT
MAX_THIN_LINES = 30

# Modules left out of every target on purpose, each with why. Keep it short: a module
# with logic belongs in a target (add one to tests/mutants.py, with the tests that
# exercise it), never here.
GLUE = {
    # The package's public names: imports and __all__, nothing that runs.
    "src/exactbatch/__init__.py": "the public names (imports, __all__)",
    "src/exactbatch/adapters/__init__.py": "empty",
    "src/exactbatch/batching/__init__.py": "re-exports",
    "src/exactbatch/loader/__init__.py": "re-exports",
    "src/exactbatch/ndf/__init__.py": "re-exports",
    "src/exactbatch/sources/__init__.py": "re-exports",
    "src/exactbatch/tools/__init__.py": "empty",
    # The public alias modules: `from exactbatch.torch import ...` names what lives in
    # exactbatch.adapters.* (whose targets are `frameworks`, `samplers`, `cluster`,
    # `checkpoints`), at most with a lazy __getattr__ that defers the framework's import.
    "src/exactbatch/torch.py": "alias of exactbatch.adapters.torch*",
    "src/exactbatch/jax.py": "alias of exactbatch.adapters.jax",
    "src/exactbatch/numpyro.py": "alias of exactbatch.adapters.numpyro",
    "src/exactbatch/pymc.py": "alias of exactbatch.adapters.pymc",
    "src/exactbatch/dask.py": "alias of exactbatch.adapters.dask",
    "src/exactbatch/ray.py": "alias of exactbatch.adapters.ray*",
    # The exception and warning classes: names and docstrings, no behaviour.
    "src/exactbatch/errors.py": "exception classes",
    # Types only: TypedDicts and Protocols, read by mypy, with no body that runs.
    "src/exactbatch/loader/records.py": "types of a state's records (TypedDict, Protocol)",
    # The console script's process wrapper (signals before the parser loads): it acts only
    # as a new process's entry point, which a mutant cannot reach (mutmut mutates the
    # test process's modules); tests/tools/test_interrupt.py runs it in a child process.
    # Its logic, the command line itself, is the `cli` target's (cli.py, cli_parser.py).
    "src/_exactbatch_cli.py": "a process's entry point (tests/tools/test_interrupt.py)",
}


def _covered(path: str) -> bool:
    return any(
        fnmatch.fnmatchcase(path, g) for files, _, _ in mutants.TARGETS.values() for g in files
    )


def test_every_module_with_code_is_under_a_mutation_target():
    loose = {
        path: lines
        for path, lines in mutants.uncovered().items()
        if lines > MAX_THIN_LINES and path not in GLUE
    }
    assert not loose, (
        f"modules with more than {MAX_THIN_LINES} lines of code under no target of "
        f"tests/mutants.py (lines of code each): {loose}; add each to the target of its "
        "layer, with the tests that exercise it (or, if it is only glue, to GLUE above)"
    )


@pytest.mark.parametrize("path", sorted(GLUE))
def test_glue_modules_exist_and_no_target_mutates_them(path):
    assert (ROOT / path).is_file(), f"{path} is gone: drop it from GLUE"
    assert not _covered(path), f"{path} is under a target now: drop it from GLUE"


@pytest.mark.parametrize("target", sorted(mutants.TARGETS))
def test_each_target_names_files_and_tests_that_exist(target):
    """A glob that matches nothing mutates nothing (a renamed module falls out of its
    target unseen), and a test path that is gone stops the target's run."""
    files, names, tests = mutants.TARGETS[target]
    sources = [p.relative_to(ROOT).as_posix() for p in (ROOT / "src").rglob("*.py")]
    for glob in files:
        assert any(fnmatch.fnmatchcase(p, glob) for p in sources), f"{target}: {glob} is no file"
    assert names, f"{target}: no mutant names to run"
    args = iter(tests)
    for arg in args:
        if arg in ("-k", "-m"):
            next(args)  # its expression
            continue
        path = arg.split("::")[0]
        assert (ROOT / path).exists(), f"{target}: {path} does not exist"


def test_code_lines_leave_out_docstrings_comments_and_blank_lines(tmp_path):
    module = tmp_path / "m.py"
    module.write_text(
        '"""A module.\n\nIts docstring."""\n\n# a comment\nimport os\n\n\n'
        'def f(x):\n    """Twice x."""\n    return (\n        2 * x\n    )  # why\n'
    )
    assert mutants.code_lines(module) == 5  # import, def, and the return's three lines


def test_a_recheck_copies_todays_compiled_core_into_the_mutants_folder(tmp_path, monkeypatch):
    """fresh_core: mutmut's copy of src/ keeps the core of the day it was made; a recheck
    replaces it with today's (each `_core*.so`, the old ones gone), and a folder mutmut
    never made is left alone."""
    root = tmp_path / "root"
    (root / "src" / "exactbatch").mkdir(parents=True)
    (root / "src" / "exactbatch" / "_core.cpython-311.so").write_bytes(b"today")
    monkeypatch.setattr(mutants, "ROOT", root)
    work = tmp_path / "work"
    lib = work / "mutants" / "src" / "exactbatch"
    lib.mkdir(parents=True)
    (lib / "_core.cpython-310.so").write_bytes(b"then")
    mutants.fresh_core(work)
    assert sorted(p.name for p in lib.iterdir()) == ["_core.cpython-311.so"]
    assert (lib / "_core.cpython-311.so").read_bytes() == b"today"
    never = tmp_path / "never"
    never.mkdir()
    mutants.fresh_core(never)  # no mutants/ folder: nothing made
    assert list(never.iterdir()) == []
