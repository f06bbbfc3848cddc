"""Packaging: an sdist and a wheel build on this machine, the wheel with the compiled core.

The sdist must carry the compiled core's C sources and private headers
(``src/exactbatch/_core*.c``, ``_core*.h``: so ``pip install`` from it compiles
the core), the wheel the built extension ``exactbatch/_core*.so``.
Built offline, with the running interpreter's setuptools (no build isolation:
nothing is downloaded).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    shutil.which("cc") is None and shutil.which("gcc") is None, reason="no C compiler"
)


def _copy_tree(dest: pathlib.Path) -> pathlib.Path:
    """The project's sources in a fresh folder, so that builds leave nothing in the tree."""
    tree = dest / "tree"
    keep = ("src", "pyproject.toml", "setup.py", "README.md")
    for name in keep:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, tree / name, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
        else:
            tree.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, tree / name)
    return tree


def _run(args, cwd) -> None:
    r = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (args, r.stdout[-2000:], r.stderr[-3000:])


def test_sdist_and_wheel_build_and_carry_the_compiled_core(tmp_path):
    pytest.importorskip("setuptools")  # built without isolation: with this venv's setuptools
    tree = _copy_tree(tmp_path)
    out = tmp_path / "dist"
    env_py = [sys.executable]
    _run([*env_py, "setup.py", "--quiet", "sdist", "--dist-dir", os.fspath(out)], tree)
    _run(
        [
            *env_py,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--wheel-dir",
            os.fspath(out),
            ".",
        ],
        tree,
    )
    (sdist,) = out.glob("exactbatch-*.tar.gz")
    (wheel,) = out.glob("exactbatch-*.whl")
    with tarfile.open(sdist) as t:
        names = t.getnames()
    core = sorted(p.name for p in (ROOT / "src" / "exactbatch").glob("_core*.[ch]"))
    assert "_core.c" in core and "_core.h" in core, core
    for name in core:
        assert any(n.endswith(f"src/exactbatch/{name}") for n in names), (name, names)
    assert any(n.endswith("src/exactbatch/kernels.py") for n in names), names
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert any(n.startswith("exactbatch/_core") and n.endswith((".so", ".pyd")) for n in names)
    assert "exactbatch/kernels.py" in names
    assert "-py3-none-any" not in wheel.name  # a platform wheel: it holds compiled code


def test_readme_install_list_names_every_user_extra():
    """README's install list shows every extra a user installs (issue 43: polars,
    duckdb, hf, arrow and ray were missing); the tools' own extras aside."""
    import re

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    readme = (ROOT / "README.md").read_text()
    shown = set(re.findall(r"'\.\[([a-z0-9_-]+)\]'", readme))
    missing = set(extras) - {"docs", "demo", "progress"} - shown
    assert not missing, f"README's install list lacks {sorted(missing)}"
