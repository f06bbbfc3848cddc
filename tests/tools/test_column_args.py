"""The columns a command reads (exactbatch.tools.column_args) called directly: names and
positions resolved, the defaults, every refusal's message, long lists shortened."""

from __future__ import annotations

import pytest

from exactbatch.tools.column_args import resolve_columns, shown_names, split_columns
from exactbatch.tools.common import CliError

NAMES = ["a", "b", "0", "y"]


def refusal(fn, *args, **kw) -> str:
    with pytest.raises(CliError) as e:
        fn(*args, **kw)
    return str(e.value)


def test_shown_names_up_to_the_limit_are_all_shown():
    assert shown_names(["a", 1]) == "['a', '1']"
    names = [f"c{i}" for i in range(20)]
    assert shown_names(names) == repr(names)
    assert shown_names(names[:5], limit=5) == repr(names[:5])


def test_shown_names_past_the_limit_are_the_first_and_last_few():
    names = [f"c{i}" for i in range(21)]
    head = ", ".join(repr(v) for v in names[:15])
    assert shown_names(names) == f"[{head}, ..., 'c18', 'c19', 'c20'] (21 in all)"
    assert shown_names(names, limit=8) == (
        "['c0', 'c1', 'c2', ..., 'c18', 'c19', 'c20'] (21 in all)"
    )


def test_shown_names_name_the_closest_to_one_not_found():
    names = [f"col{i}" for i in range(30)] + ["price_usd", "unit_PRICE", "prize"]
    text = shown_names(names, "price")
    assert text.endswith("(33 in all; closest to 'price': ['prize', 'price_usd', 'unit_PRICE'])")
    assert shown_names(names, "zzz").endswith("(33 in all; none close to 'zzz')")
    # at most five, close matches first, then those holding the name in any case
    many = [f"x{i}" for i in range(30)] + [f"ab{i}" for i in range(8)]
    assert shown_names(many, "AB").endswith("closest to 'AB': ['ab0', 'ab1', 'ab2', 'ab3', 'ab4'])")
    close = [f"price{i}" for i in range(7)] + [f"x{i}" for i in range(30)]
    assert shown_names(close, "price").endswith(
        "closest to 'price': ['price6', 'price5', 'price4', 'price3', 'price2'])"
    )


def test_resolve_columns_by_name_and_position():
    assert resolve_columns(None, NAMES, "p", "--features") is None
    assert resolve_columns("", NAMES, "p", "--features") == []
    assert resolve_columns(" b , a ,", NAMES, "p", "--features") == [1, 0]
    assert resolve_columns("1,-1,-4", NAMES, "p", "--features") == [1, 3, 0]
    assert resolve_columns("0", NAMES, "p", "--features") == [2]  # the name wins
    assert resolve_columns(3, NAMES, "p", "--features") == [3]


def test_resolve_columns_refusals():
    assert refusal(resolve_columns, "a,zz", NAMES, "f.csv", "--labels") == (
        "f.csv: no column 'zz' (--labels); columns are ['a', 'b', '0', 'y']"
    )
    for k in ("4", "-5"):
        assert refusal(resolve_columns, k, NAMES, "f.csv", "--features") == (
            f"f.csv: column {k} (--features) out of range: the data has 4 columns"
        )
    assert refusal(resolve_columns, "a,-4", NAMES, "f.csv", "--exclude") == (
        "f.csv: a column is named twice in --exclude: 'a,-4'"
    )
    with pytest.raises(CliError) as e:
        resolve_columns("zz", NAMES, "f.csv", "--labels")
    assert e.value.__suppress_context__
    many = [f"col{i}" for i in range(30)]  # a long list names the closest to the one missing
    assert refusal(resolve_columns, "col_7", many, "f.csv", "--labels").endswith(
        "(30 in all; closest to 'col_7': ['col7', 'col27', 'col17', 'col9', 'col8'])"
    )


def test_split_columns_defaults():
    assert split_columns(None, None, NAMES, "p") == ([0, 1, 2, 3], [])
    assert split_columns(None, "y", NAMES, "p") == ([0, 1, 2], [3])
    assert split_columns(None, "y", NAMES, "p", exclude="0") == ([0, 1], [3])
    assert split_columns("b,a", "-1", NAMES, "p", exclude="0") == ([1, 0], [3])
    assert split_columns("b", None, NAMES, "p") == ([1], [])


def test_split_columns_refusals():
    assert refusal(split_columns, "a", None, NAMES, "p", exclude="a,b") == (
        "p: column(s) ['a'] are both chosen and given to --exclude"
    )
    assert refusal(split_columns, None, "y", NAMES, "p", exclude="y") == (
        "p: column(s) ['y'] are both chosen and given to --exclude"
    )
    assert refusal(split_columns, "y,b,a", "a,y", NAMES, "p") == (
        "p: column(s) ['a', 'y'] are both features and labels"
    )
    assert refusal(split_columns, None, None, NAMES, "p", exclude="a,b,0,y") == (
        "p: no columns chosen (--features None, --labels None)"
    )
    assert refusal(split_columns, "", "", NAMES, "p") == (
        "p: no columns chosen (--features '', --labels '')"
    )
    # which option named a column that is not there, and where
    assert refusal(split_columns, "zz", None, NAMES, "p") == (
        "p: no column 'zz' (--features); columns are ['a', 'b', '0', 'y']"
    )
    assert refusal(split_columns, None, "zz", NAMES, "p") == (
        "p: no column 'zz' (--labels); columns are ['a', 'b', '0', 'y']"
    )
    assert refusal(split_columns, None, None, NAMES, "p", exclude="zz") == (
        "p: no column 'zz' (--exclude); columns are ['a', 'b', '0', 'y']"
    )


def test_split_columns_refuse_unnamed_and_repeated_columns():
    names = ["", "a", " ", "b", "a", "b"]
    assert refusal(split_columns, None, "3", names, "p") == (
        "p: the column(s) at position(s) [0, 2] have no name (columns: "
        "['', 'a', ' ', 'b', 'a', 'b']); name them, or choose other columns with "
        "--features/--labels"
    )
    assert refusal(split_columns, "1", None, names, "p") == (
        "p: column name(s) ['a'] appear more than once (columns: "
        "['', 'a', ' ', 'b', 'a', 'b']), so which column is meant is ambiguous; rename them, "
        "or choose other columns with --features/--labels"
    )
    assert refusal(split_columns, "-1,1", "-2", names, "p").startswith(
        "p: column name(s) ['a', 'b'] appear more than once"
    )
    assert split_columns("0", "2", ["a", "b", "c", "b"], "p") == ([0], [2])  # b not chosen
