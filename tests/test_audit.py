"""audit.py on its own: the counting pass, its restart probe, the per-pass audit and the
ledger check, with their exact messages (a user reads them to fix their code)."""

from __future__ import annotations

import os
import re
import warnings

import numpy as np
import pytest

from exactbatch import ExactnessError, TotalSizeWarning
from exactbatch.audit import audit_pass, check_ledger, count_total
from exactbatch.order import Shard
from exactbatch.order.digest import Tally
from exactbatch.sources.chunks import FactoryStream, IterableStream


def counted(stream):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = count_total(stream)
    return result, [str(w.message) for w in caught]


def test_count_total_counts_warns_and_probes():
    chunks = [np.ones((3, 2)), np.ones((4, 2))]
    (rows, width), messages = counted(IterableStream(chunks))
    assert (rows, width) == (7, (2, 0))
    assert messages == [
        'total_size="auto": the source has no n_rows, so exactbatch counted its rows with '
        "one full pass (7 rows). Pass total_size=7 to skip the counting pass."
    ]


def test_count_total_of_labels_only_rows():
    chunks = [(np.empty((5, 0)), np.arange(5.0))] * 2
    (rows, width), _ = counted(IterableStream(chunks))
    assert (rows, width) == (10, (0, 1))


def test_count_total_refuses_no_rows():
    with pytest.raises(ValueError) as info:
        counted(IterableStream([np.empty((0, 2))]))
    assert str(info.value) == (
        "the source yielded no rows while counting: if it is really empty pass "
        "total_size=0; if it is a factory, check it returns a fresh iterator per call"
    )


def test_count_total_refuses_the_same_iterator_twice():
    it = iter([np.ones((2, 2))])
    with pytest.raises(ValueError) as info:
        counted(FactoryStream(lambda: it))
    assert str(info.value) == (
        "the source returned the same iterator twice, so the counting pass used up "
        "the only pass it has: pass a zero-argument function that builds a fresh "
        "iterator on every call (or declare total_size=N to skip counting)"
    )


def test_count_total_refuses_a_source_that_comes_back_empty():
    passes = iter([[np.ones((2, 2)), np.ones((1, 2))], [np.empty((0, 2))]])
    with pytest.raises(ValueError) as info:
        counted(FactoryStream(lambda: iter(next(passes))))
    assert str(info.value) == (
        "the source yielded 3 rows while counting, then came back empty: it cannot "
        "restart, and every epoch must. Pass a zero-argument function that returns a "
        "fresh iterator on every call (or a re-iterable such as a list)"
    )


def test_count_total_closes_both_passes():
    closed = []

    def factory():
        def gen():
            try:
                yield np.ones((2, 2))
                yield np.ones((2, 2))
            finally:
                closed.append(1)

        return gen()

    counted(FactoryStream(factory))
    assert closed == [1, 1]  # the counting pass, and the probe that read one chunk


@pytest.mark.parametrize(
    ("n", "seen", "warns"),
    [(100, 100, False), (105, 100, False), (89, 100, True), (125, 100, True)],
)
def test_audit_pass_warns_outside_the_window(n, seen, warns):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert audit_pass(n, n, seen, 10, Shard()) is warns
    assert len(caught) == warns
    if warns:
        assert caught[0].category is TotalSizeWarning
        assert str(caught[0].message) == (
            f"total_size={n} disagrees with the stream: a full pass handed out {seen} rows "
            "in full batches of 10 (a correct N satisfies seen <= N < seen + batch_size). "
            "A likelihood rescaled by the wrong N is biased: pass the true row count, or "
            'total_size="auto".'
        )


def test_audit_pass_names_the_shards_share():
    with pytest.warns(TotalSizeWarning) as caught:
        audit_pass(90, 30, 60, 10, Shard(1, 3))
    assert str(caught[0].message).startswith(
        "shard 1's share of total_size=90 (30 rows) disagrees with the stream: "
        "a full pass handed out 60 rows"
    )


def test_check_ledger_passes_equal_tallies_and_names_the_difference():
    promised = Tally()
    promised.add_range(0, 10)
    check_ledger(Tally(10, promised.digest), promised, epoch=0, shard_index=0, num_shards=1)
    short = Tally()
    short.add_range(0, 9)
    with pytest.raises(ExactnessError) as info:
        check_ledger(short, promised, epoch=3, shard_index=1, num_shards=2)
    assert str(info.value) == (
        f"epoch 3 of shard 1 of 2: handed out 9 rows (digest {short.digest:#018x}) but the "
        f"epoch promised 10 rows (digest {promised.digest:#018x}): -1 rows. Rows were "
        "skipped or repeated: a state from another run or forged, a source that changed "
        "during the epoch, or a bug (please report it)"
    )
    other = Tally()
    other.add_range(1, 11)
    with pytest.raises(
        ExactnessError,
        match=re.escape("promised 10 rows (digest ")
        + r"0x[0-9a-f]{16}\): the same number of rows but not the same rows\. ",
    ):
        check_ledger(other, promised, epoch=0, shard_index=0, num_shards=1)


def test_count_total_names_a_bad_chunk_by_its_position():
    with pytest.raises(ValueError, match=r"^chunk 1: expected x of shape \(rows, 2\)"):
        counted(IterableStream([np.ones((2, 2)), np.ones((2, 3))]))
    with pytest.raises(TypeError, match=r"^chunk 1: x must hold real numbers"):
        counted(IterableStream([np.ones((2, 2)), np.array([["a", "b"]])]))


def test_the_restart_probe_names_a_bad_chunk_by_its_position():
    passes = iter([[np.ones((2, 2))], [np.empty((0, 2)), np.array([["a", "b"]])]])
    with pytest.raises(TypeError, match=r"^chunk 1: x must hold real numbers"):
        counted(FactoryStream(lambda: iter(next(passes))))


def test_the_restart_probe_counts_rows_not_labels():
    """A second pass whose chunks have labels but no rows is empty."""
    passes = iter([[np.ones((2, 2))], [(np.empty((0, 2)), np.empty(0))]])
    with pytest.raises(ValueError, match="came back empty"):
        counted(FactoryStream(lambda: iter(next(passes))))


def test_a_declared_total_size_on_random_access_must_be_the_whole_datasets():
    from exactbatch.audit import resolve_random_access_total

    assert resolve_random_access_total("auto", 5) == resolve_random_access_total(5, 5) == 5
    with pytest.raises(ValueError) as info:
        resolve_random_access_total(4, 5)
    assert str(info.value) == (
        "total_size=4 disagrees with the source, which has n=5 rows; "
        "pass total_size=\"auto\" (or the whole dataset's row count, not a shard's)"
    )


def test_the_warnings_skip_the_files_of_a_wrapper_given_in_skip_file_prefixes(
    tmp_path, monkeypatch
):
    """A warning points at the first frame outside the package; code that wraps the
    package's functions (mutmut's trampolines under `make mutants`) is skipped too once
    its folder is in SKIP_FILE_PREFIXES, and not before."""
    import importlib.util

    from exactbatch import audit

    (tmp_path / "wrapper.py").write_text(
        "from exactbatch import audit\n"
        "def count_total(stream):\n"
        "    return audit.count_total(stream)\n"
    )
    spec = importlib.util.spec_from_file_location("wrapper", tmp_path / "wrapper.py")
    wrapper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wrapper)
    stream = IterableStream([np.ones((3, 2))])
    for prefixes, where in (
        (audit.SKIP_FILE_PREFIXES, str(tmp_path / "wrapper.py")),
        (audit.SKIP_FILE_PREFIXES + (str(tmp_path) + os.sep,), __file__),
    ):
        monkeypatch.setattr(audit, "SKIP_FILE_PREFIXES", prefixes)
        with pytest.warns(UserWarning, match="counted its rows") as caught:
            wrapper.count_total(stream)
        assert [w.filename for w in caught] == [where]
