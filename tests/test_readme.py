"""Every Python example in README.md and in the docs/ pages runs as it stands (each
block on its own, in an empty folder)."""

import re
import warnings
from pathlib import Path

import pytest

from exactbatch.errors import ConvergenceWarning

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
OPTIONAL = ("pyarrow", "torch", "pymc", "pandas", "fsspec", "jax", "numpyro", "optax", "polars")
OPTIONAL += ("datasets", "duckdb")
OPTIONAL += ("ray",)


def _blocks(page: Path) -> list[tuple[int, str]]:
    """The ```python blocks of a page, each with the line its code starts on."""
    text = page.read_text()
    return [
        (text.count("\n", 0, m.start(1)), m.group(1))
        for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.S | re.M)
    ]


EXAMPLES = [(page, line, code) for page in PAGES for line, code in _blocks(page)]


def _title(page: Path, line: int) -> str:
    return f"{page.relative_to(ROOT)}:{line + 1}"


@pytest.mark.parametrize(
    ("page", "line", "code"), EXAMPLES, ids=[_title(p, n) for p, n, _ in EXAMPLES]
)
def test_example_runs(page, line, code, tmp_path, monkeypatch):
    """The block executes without error in an empty folder (skipped when it needs an
    optional package that is not installed), and a fit it runs converges: a page's fit
    is shown as the way to fit, so its warning is an error here (unless the block is
    about the warning: it names ConvergenceWarning)."""
    for module in OPTIONAL:
        if f"import {module}" in code or f"exactbatch.{module}" in code:
            pytest.importorskip(module)
    monkeypatch.chdir(tmp_path)
    # Blank lines first, so that a traceback names the line of the page.
    with warnings.catch_warnings():
        if "ConvergenceWarning" not in code:
            warnings.simplefilter("error", ConvergenceWarning)
        exec(compile("\n" * line + code, str(page), "exec"), {"__name__": "__docs__"})


def test_readme_is_a_front_page_with_a_tour():
    """README shows a short tour of runnable examples and stays a front page."""
    assert len(_blocks(README)) >= 5
    assert len(README.read_text().splitlines()) <= 300


def test_docs_pages_hold_the_examples():
    """Every usage page shows at least one runnable example."""
    usage = sorted((ROOT / "docs" / "usage").glob("*.md"))
    assert len(usage) >= 9
    assert [p.name for p in usage if not _blocks(p)] == []


def test_docs_index_lists_every_page():
    """docs/index.md links every page of the site (a page added without a line there
    is a page no reader finds)."""
    docs = ROOT / "docs"
    index = (docs / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w./-]+\.md)(?:#[\w-]*)?\)", index))
    pages = {p.relative_to(docs).as_posix() for p in docs.rglob("*.md")} - {"index.md"}
    assert sorted(pages - linked) == []


def test_blocks_are_found_with_their_lines(tmp_path):
    """The block finder returns each block's code and the line it starts on."""
    page = tmp_path / "page.md"
    page.write_text("# t\n\n```python\nx = 1\n```\n\n```sh\nls\n```\n```python\ny = 2\n```\n")
    assert _blocks(page) == [(3, "x = 1\n"), (10, "y = 2\n")]
