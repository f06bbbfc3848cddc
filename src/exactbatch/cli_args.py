"""What each argument of the ``exactbatch`` command may be: argparse types whose
``ArgumentTypeError`` becomes a usage error (exit status 2) naming the argument.

Only the standard library at import: the command starts fast, and a type that
needs a tool (sizes, integer lists) imports it when it parses.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

__all__ = ["delimiter", "int_at_least", "int_list", "json_object", "positive_int", "seed", "size"]


def int_at_least(minimum: int, what: str) -> Callable[[str], int]:
    """An integer of at least ``minimum`` (``what`` names it in the message)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer; got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"expected {what} >= {minimum}; got {value}")
        return value

    return parse


def delimiter(text: str) -> str:
    """One CSV delimiter character (a typed ``\\t`` is a tab)."""
    text = "\t" if text == "\\t" else text  # a typed backslash-t is a tab
    if len(text) != 1 or text in '\r\n"':
        raise argparse.ArgumentTypeError(
            f"expected one character other than a quote or a line break (',', ';', '\\t'); "
            f"got {text!r}"
        )
    return text


positive_int = int_at_least(1, "an integer")
seed = int_at_least(0, "a seed")


def size(text: str) -> int:
    """A byte size such as ``512MB`` or ``2GiB`` (:func:`exactbatch.tools.common.parse_size`)."""
    from exactbatch.tools.common import parse_size

    try:
        return parse_size(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def int_list(text: str) -> list[int]:
    """Integers separated by commas (:func:`exactbatch.tools.common.parse_int_list`)."""
    from exactbatch.tools.common import parse_int_list

    try:
        return parse_int_list(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def json_object(text: str) -> dict[str, Any]:
    """A JSON object, such as fsspec storage options."""
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object {{...}}; got {text!r}")
    return value
