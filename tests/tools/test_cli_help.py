"""`exactbatch --help` and every subcommand's `--help`, pinned word for word.

The expected text is tests/tools/data/cli_help.txt: each command's help as
argparse prints it on an 80-column terminal. A changed option, default or help
text fails here until the file is made anew, on purpose, with

    PYTHONPATH=src python tests/tools/test_cli_help.py

and the change is then seen in the file's diff. docs/cli.md's table of the
commands is checked against the same parser: each command's row names each of
its own options, and no option the command lacks.
"""

from __future__ import annotations

import argparse
import difflib
import os
import re
import sys
from contextlib import redirect_stdout
from io import StringIO
from pathlib import Path

import pytest

from exactbatch.cli import _parser, main

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "data" / "cli_help.txt"
DOCS = HERE.parents[1] / "docs" / "cli.md"
COLUMNS = "80"  # argparse wraps the help to the terminal's width (COLUMNS first)
# The options of every command, documented once in docs/cli.md's text, not in each row.
COMMON = {"-h", "-q", "--json", "--debug"}


def _commands() -> list[str]:
    """The subcommands, in the parser's order."""
    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return list(sub.choices)


def render() -> str:
    """Every command's help as `exactbatch ... --help` prints it on an 80-column
    terminal: the top level's first, then each subcommand's, each after its command line."""
    saved = {k: os.environ.get(k) for k in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "PYTHON_COLORS")}
    os.environ.update(COLUMNS=COLUMNS, NO_COLOR="1")  # no colour: Python 3.14 colours help
    for k in ("FORCE_COLOR", "PYTHON_COLORS"):
        os.environ.pop(k, None)
    try:
        parts = []
        for argv in ([], *([c] for c in _commands())):
            out = StringIO()
            with redirect_stdout(out):
                status = main([*argv, "--help"])
            assert status == 0, argv
            parts.append(f"$ exactbatch {' '.join([*argv, '--help'])}\n{out.getvalue()}")
        return "\n".join(parts)
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


def test_every_help_is_as_pinned():
    """Each command's `--help` is tests/tools/data/cli_help.txt's, to the character."""
    got, want = render(), GOLDEN.read_text()
    if got != want:
        diff = "".join(
            difflib.unified_diff(
                want.splitlines(True), got.splitlines(True), str(GOLDEN), "--help today"
            )
        )
        pytest.fail(
            "the command's help changed; if on purpose, make the file anew with "
            f"`PYTHONPATH=src python tests/tools/test_cli_help.py`:\n{diff}"
        )


def test_the_pinned_help_covers_every_command():
    """The file holds the top level's help and one section per subcommand, in order."""
    shown = re.findall(r"^\$ exactbatch (.*)--help$", GOLDEN.read_text(), flags=re.M)
    assert shown == ["", *(f"{c} " for c in _commands())]
    assert _commands() == ["info", "convert", "shuffle", "mixing", "bench", "certify"]


def test_every_option_has_help():
    """No option is shown bare (an argument with no help is a line with nothing after it)."""
    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, parser in sub.choices.items():
        for action in parser._actions:
            assert action.help, (name, action.option_strings or action.dest)


def _docs_rows() -> dict[str, str]:
    """docs/cli.md's table of the commands: each command's row, by its name."""
    rows = re.findall(r"^(\| `exactbatch (\w+).*)$", DOCS.read_text(), flags=re.M)
    return {name: line for line, name in rows}


def _names(text: str, option: str) -> bool:
    return re.search(re.escape(option) + r"(?![\w-])", text) is not None


def test_the_docs_table_shows_each_commands_options():
    """docs/cli.md's row of each command names every option of the command's own (by
    one of its spellings: `--no-shuffle` names `--shuffle`'s switch), and no option the
    command lacks; the options every command takes are named in the page's text."""
    rows = _docs_rows()
    assert list(rows) == _commands()
    (sub,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, parser in sub.choices.items():
        row = rows[name]
        spelt = {o for a in parser._actions for o in a.option_strings}
        for action in parser._actions:
            if action.option_strings and not COMMON & set(action.option_strings):
                assert any(_names(row, o) for o in action.option_strings), (name, action.dest)
        unknown = set(re.findall(r"(?<![\w-])--?[a-z][a-z-]*", row)) - spelt
        # "-1" is a position, not an option
        assert {o for o in unknown if not o[1:].isdigit()} == set(), name
    doc = DOCS.read_text()
    for option in ("-q", "--json", "--debug", "--traceback", "--help"):
        assert _names(doc, f"`{option}"), option


if __name__ == "__main__":
    # Make the pinned help anew (after a change to the command's options, on purpose).
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(render())
    print(f"wrote {GOLDEN}", file=sys.stderr)
