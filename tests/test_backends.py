"""Both backends, proven: the suite runs on the one it should, and the pure path runs too.

Laws: where a C toolchain is present the compiled core is built and, unless
``EXACTBATCH_PURE`` asks for the pure path, it is the backend; the kernel tests
and a stride of the law matrix pass in a process started under
``EXACTBATCH_PURE=1``, where every reader gets the pure path's kernels (the
session fixture of ``conftest.py``); and the check behind the backend fixtures
(tests/backends.py) tells the two backends apart.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig

import backends
import pytest

from exactbatch import backend, kernels

TESTS = os.path.dirname(os.path.abspath(__file__))
# What the process under EXACTBATCH_PURE=1 runs: the kernel tests, and the law matrix's
# stride on the pure path (there on the path the environment chose).
# EXACTBATCH_PURE_LAWS=all runs the whole law matrix there instead (about 5,000 cases:
# some 32 minutes on one shared core of the 2-core test machine, too long for `make
# test`; docs/development.md).
PURE_RUN = ["test_kernels.py", "test_law_matrix.py::test_epoch_laws_on_the_pure_path"]
PURE_ENV = {"EXACTBATCH_PURE": "1"}
if os.environ.get("EXACTBATCH_PURE_LAWS", "") == "all":
    PURE_RUN = ["test_kernels.py", "test_law_matrix.py"]
    PURE_ENV["EXACTBATCH_LAWS"] = "all"  # the whole product, not the epoch laws' covering
# Left out there: the kernel tests that start interpreters of their own with
# EXACTBATCH_PURE set to each value (the same runs, whatever this process's backend:
# the suite runs them).
PURE_DESELECT = [
    "test_kernels.py::test_exactbatch_pure_selects_the_numpy_path",
    "test_kernels.py::test_exactbatch_pure_of_another_value_is_an_error_naming_it",
]


def _compiler() -> str | None:
    """A C compiler that can build the extension, or None: sysconfig's ``CC`` (what
    setuptools uses), else ``cc``, ``gcc`` or ``clang`` on the PATH; and Python's headers."""
    if not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        return None
    cc = shlex.split(sysconfig.get_config_var("CC") or "") or [None]
    for name in (cc[0], "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def test_a_machine_with_a_c_compiler_runs_the_compiled_core():
    """The extension is optional at install (a failed compile installs without it), so a
    broken build would leave the suite green on the pure path alone: here it fails."""
    cc = _compiler()
    if cc is None:
        pytest.skip("no C compiler and Python headers here: the pure path alone is expected")
    assert backends.built(), (
        f"a C compiler is present ({cc}) but the compiled core is not built: see the "
        "output of `make core` (python setup.py build_ext --inplace)"
    )
    # the compiled core, unless EXACTBATCH_PURE asks for the pure path
    assert backend() == backends.expected_backend(), backend()


def test_the_check_tells_the_backends_apart(monkeypatch):
    """tests/backends.py sees every kernel switch made with use_backend, and a factory that
    ignores the switch fails it, naming the factory."""
    if not backends.built():
        pytest.skip("the compiled core is not built")
    for name in ("compiled", "numpy"):
        with backends.on_backend(name):
            assert set(backends.readers().values()) == {name == "compiled"}
    chosen = kernels.memory_rows

    def built_not_chosen(x, y):  # memory_rows testing whether the core is built, not chosen
        before = kernels.use_backend("compiled")
        try:
            return chosen(x, y)
        finally:
            kernels.use_backend(before)

    monkeypatch.setattr(kernels, "memory_rows", built_not_chosen)
    with pytest.raises(AssertionError, match="other backend serves: memory_rows$"):
        with backends.on_backend("numpy"):
            pass
    assert backend() == backends.expected_backend()  # put back all the same


def test_the_kernels_and_the_laws_pass_under_exactbatch_pure(tmp_path):
    """The kernel tests and the law matrix's stride on the pure path, run by pytest in a
    process started with EXACTBATCH_PURE=1 (the process's backend chosen by the
    environment at import, not switched by use_backend): every test passes, none is
    missing, and the process says it ran on the pure path."""
    if backend() != "compiled":
        pytest.skip("the suite itself runs on the pure path")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--basetemp",
            str(tmp_path / "pure"),
            *(os.path.join(TESTS, t) for t in PURE_RUN),
            *(f"--deselect=tests/{t}" for t in PURE_DESELECT),
        ],
        cwd=os.path.dirname(TESTS),
        # PYTEST_ADDOPTS dropped: this run's options are its own (no junit file of the
        # parent's overwritten, no workers of xdist for a run this short)
        env={
            **{k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
            **PURE_ENV,
        },
        capture_output=True,
        text=True,
        timeout=600 if len(PURE_RUN[1].split("::")) > 1 else 7200,
    )
    tail = r.stdout[-3000:] + r.stderr[-2000:]
    assert r.returncode == 0, tail
    assert "exactbatch backend: numpy" in r.stdout, tail
    passed = re.search(r"(\d+) passed", r.stdout)
    assert passed and int(passed.group(1)) >= 250, tail
    assert not re.search(r"\d+ (failed|errors?)\b", r.stdout), tail
