"""Every Python example in README.md runs as it stands (each block on its own)."""

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def _title(block: str) -> str:
    return block.strip().splitlines()[-1][:40]


@pytest.mark.parametrize("code", BLOCKS, ids=[_title(b) for b in BLOCKS])
def test_readme_example_runs(code, tmp_path, monkeypatch):
    """The README block executes without error in an empty folder."""
    for module in ("pyarrow", "torch", "pymc", "pandas"):
        if f"import {module}" in code or f"exactbatch.{module}" in code:
            pytest.importorskip(module)
    monkeypatch.chdir(tmp_path)
    exec(compile(code, str(README), "exec"), {"__name__": "__readme__"})


def test_readme_has_examples():
    """The README shows real examples (the parametrized test above is not empty)."""
    assert len(BLOCKS) >= 10
