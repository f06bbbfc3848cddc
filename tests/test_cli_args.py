"""What each argument of the exactbatch command may be (exactbatch.cli_args): each type
called as argparse calls it, its values and its messages (a usage error names them)."""

from __future__ import annotations

import argparse

import pytest

from exactbatch import cli_args


def refused(parse, text) -> str:
    with pytest.raises(argparse.ArgumentTypeError) as e:
        parse(text)
    return str(e.value)


def test_int_at_least_takes_the_minimum_and_above():
    parse = cli_args.int_at_least(3, "a count")
    assert parse("3") == 3 and parse(" 17 ") == 17
    assert refused(parse, "2") == "expected a count >= 3; got 2"
    assert refused(parse, "x") == "expected an integer; got 'x'"
    assert refused(parse, "1.5") == "expected an integer; got '1.5'"


def test_positive_int_and_seed():
    assert cli_args.positive_int("1") == 1
    assert refused(cli_args.positive_int, "0") == "expected an integer >= 1; got 0"
    assert cli_args.seed("0") == 0
    assert refused(cli_args.seed, "-1") == "expected a seed >= 0; got -1"


@pytest.mark.parametrize(
    ("text", "want"), [(",", ","), (";", ";"), ("X", "X"), ("\\t", "\t"), ("\t", "\t")]
)
def test_a_delimiter_is_one_character(text, want):
    assert cli_args.delimiter(text) == want


@pytest.mark.parametrize("text", ["", ",,", "\\n", "\r", "\n", '"', "ab"])
def test_a_delimiter_is_not_a_quote_a_line_break_or_two_characters(text):
    message = refused(cli_args.delimiter, text)
    assert message == (
        f"expected one character other than a quote or a line break (',', ';', '\\t'); got {text!r}"
    )


def test_size():
    assert cli_args.size("2KiB") == 2048 and cli_args.size("1GB") == 1 << 30
    assert refused(cli_args.size, "0") == "a size must be positive; got '0'"
    assert refused(cli_args.size, "lots") == (
        "expected a size such as 512MB, 1GB or 1.5GiB; got 'lots'"
    )


def test_int_list():
    assert cli_args.int_list("64, 1024,4096") == [64, 1024, 4096]
    assert refused(cli_args.int_list, "1,x") == (
        "expected comma-separated integers (64,1024); got '1,x'"
    )
    assert refused(cli_args.int_list, "0") == "expected comma-separated integers >= 1; got '0'"


def test_json_object():
    assert cli_args.json_object('{"anon": true}') == {"anon": True}
    assert refused(cli_args.json_object, "[1]") == "expected a JSON object {...}; got '[1]'"
    assert refused(cli_args.json_object, "{").startswith("not JSON: Expecting")
