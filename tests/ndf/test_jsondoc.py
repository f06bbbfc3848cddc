"""ndf/jsondoc.py: the JSON documents beside .ndf data, read strictly (each function on its
own: what it accepts, what it refuses, and the message naming the document)."""

from __future__ import annotations

import pytest

from exactbatch import NdfError
from exactbatch.ndf import jsondoc
from exactbatch.ndf.jsondoc import (
    MAX_DOC_BYTES,
    check_kind,
    fetch_doc,
    get_int,
    parse_doc,
    strict_int,
)


def test_parse_doc_reads_an_object():
    assert parse_doc(b'{"a": [1, -2, 1.5, "x", null, true], "b": {}}', "W", "a doc") == {
        "a": [1, -2, 1.5, "x", None, True],
        "b": {},
    }
    assert parse_doc('{"é": 1}'.encode(), "W", "a doc") == {"é": 1}


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"[1, 2]", "W: not a doc: expected a JSON object, found list [1, 2]"),
        (b'"' + b"s" * 100 + b'"', "W: not a doc: expected a JSON object, found str " + "s" * 60),
        (b"{", "W: not a doc: not valid JSON (Expecting property name"),
        (b'{"a": NaN}', "W: not a doc: not valid JSON (NaN is not JSON"),
        (b'{"a": -Infinity}', "W: not a doc: not valid JSON (-Infinity is not JSON"),
        (b'{"a": 1, "a": 2}', "W: not a doc: not valid JSON (key(s) ['a'] given more than once"),
        (b"\xff{}", "W: not a doc: not valid JSON ("),
        (b"[" * 100_000 + b"]" * 100_000, "W: not a doc: its JSON is nested too deep"),
    ],
)
def test_parse_doc_refuses_naming_the_document(raw, message):
    with pytest.raises(NdfError) as e:
        parse_doc(raw, "W", "a doc")
    assert str(e.value).startswith(message), str(e.value)


def test_keys_given_twice_are_listed_sorted_once_each():
    raw = b'{"b": 1, "a": 1, "b": 2, "a": 2, "a": 3, "c": 0}'
    with pytest.raises(NdfError, match=r"key\(s\) \['a', 'b'\] given more than once in one object"):
        parse_doc(raw, "W", "a doc")
    many = ", ".join(f'"k{i}": 1, "k{i}": 2' for i in range(10)).encode()
    with pytest.raises(NdfError) as e:
        parse_doc(b"{" + many + b"}", "W", "a doc")
    assert "['k0', 'k1', 'k2', 'k3', 'k4', 'k5', 'k6', 'k7'] given" in str(e.value)


def test_integers_of_at_most_20_digits():
    assert parse_doc(b'{"a": 18446744073709551615}', "W", "d") == {"a": 2**64 - 1}
    assert parse_doc(b'{"a": -99999999999999999999}', "W", "d") == {"a": -(10**20) + 1}
    with pytest.raises(NdfError, match="an integer of 21 digits \\(at most 20\\)"):
        parse_doc(b'{"a": 100000000000000000000}', "W", "d")
    with pytest.raises(NdfError, match="an integer of 21 digits"):
        parse_doc(b'{"a": -100000000000000000000}', "W", "d")


def test_parse_doc_refuses_a_document_over_the_limit(monkeypatch):
    monkeypatch.setattr(jsondoc, "MAX_DOC_BYTES", 10)
    assert parse_doc(b'{"a": 123}', "W", "a doc") == {"a": 123}  # 10 bytes: at the limit
    with pytest.raises(NdfError, match=r"^W: 11 bytes is too large for a doc \(at most 10\)$"):
        parse_doc(b'{"a": 1234}', "W", "a doc")


def test_fetch_doc_asks_for_one_byte_over_the_limit():
    calls = []

    class FS:
        def cat_file(self, key, start=None, end=None):
            calls.append((key, start, end))
            return b"{}"

    assert fetch_doc(FS(), "bucket/m.json") == b"{}"
    assert calls == [("bucket/m.json", 0, MAX_DOC_BYTES + 1)]
    assert MAX_DOC_BYTES == 256 << 20


def test_check_kind():
    check_kind({"format": "F", "version": 3}, "W", "a doc", "F", 3, " (hint)")
    with pytest.raises(NdfError, match=r"^W: not a doc: expected format 'F', found format 'G'$"):
        check_kind({"format": "G", "version": 3}, "W", "a doc", "F", 3, "")
    with pytest.raises(NdfError, match=r"^W: not a doc: expected format 'F', found format None$"):
        check_kind({"version": 3}, "W", "a doc", "F", 3, "")
    for version in (4, True, 3.0, "3", None):
        with pytest.raises(NdfError) as e:
            check_kind({"format": "F", "version": version}, "W", "a doc", "F", 3, " (hint)")
        assert str(e.value) == (
            f"W: a doc version {version!r}; this exactbatch reads version 3 only, an integer (hint)"
        )
    with pytest.raises(NdfError, match="W: a doc version True;"):
        check_kind({"format": "F", "version": True}, "W", "a doc", "F", 1, "")


def test_strict_int():
    assert strict_int(0) and strict_int(-5) and strict_int(2**70)
    assert not strict_int(True) and not strict_int(False)
    assert not strict_int(1.0) and not strict_int("1") and not strict_int(None)


def test_get_int():
    doc = {"a": 5, "b": True, "c": 1.0, "d": -1, "e": 11, "f": 10, "z": 0}
    assert get_int(doc, "a", "W", 10) == 5
    assert get_int(doc, "f", "W", 10) == 10 and get_int(doc, "z", "W", 10) == 0
    assert get_int(doc, "missing", "W", 10, default=7) == 7
    assert get_int(doc, "missing", "W", 10, default=None) is None
    assert get_int(doc, "a", "W", 10, default=7) == 5
    for key, found in (("b", "True"), ("c", "1.0"), ("d", "-1"), ("e", "11")):
        with pytest.raises(NdfError) as e:
            get_int(doc, key, "W", 10)
        assert str(e.value) == f"W: {key!r} must be an integer in [0, 10]; found {found}"
    with pytest.raises(NdfError) as e:
        get_int(doc, "missing", "W", 10)
    assert str(e.value) == "W: 'missing' must be an integer in [0, 10]; found nothing"
    with pytest.raises(NdfError) as e:
        get_int({"s": "x" * 100}, "s", "W", 10)
    assert str(e.value).endswith("found '" + "x" * 59)


@pytest.mark.parametrize(
    "size, error, want",
    [
        (0, OSError(22, "The requested range is not satisfiable"), b""),  # S3's empty object
        (5, OSError(22, "The requested range is not satisfiable"), OSError),
        (0, FileNotFoundError(2, "gone"), FileNotFoundError),  # missing: never an empty one
    ],
)
def test_fetch_doc_reads_an_empty_object_as_no_bytes(size, error, want):
    class FS:
        def cat_file(self, key, start=None, end=None):
            raise error

        def size(self, key):
            return size

    if isinstance(want, bytes):
        assert fetch_doc(FS(), "bucket/m.json") == want
    else:
        with pytest.raises(want):
            fetch_doc(FS(), "bucket/m.json")
