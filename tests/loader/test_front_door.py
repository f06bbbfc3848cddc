"""The DataLoader's own checks (reset, set_epoch, pickling, len, repr, load_state_dict's
flag) and next_into's checks of the caller's buffers (loader/into.py): each message in
full, and the one check in C that plain buffers take once they passed."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from exactbatch import DataLoader
from exactbatch.loader.into import IntoChecks
from tests.helpers import make_data
from tests.loader.test_exactness import FlakyReads


def loader(n=10, d=3, l=1, **kw) -> DataLoader:  # noqa: E741
    x, y = make_data(n, d, l)
    if kw.get("label_dtype") is not None:  # class labels: 0, 1, 2, 0, ...
        y = (np.arange(n) % 3).astype(np.float64).reshape(n, 1)
    return DataLoader((x, y) if l else x, 4, **{"shuffle": False, **kw})


def stream(n=10, d=3, l=1, **kw) -> DataLoader:  # noqa: E741
    x, y = make_data(n, d, l)
    return DataLoader(lambda: iter([(x[:6], y[:6]), (x[6:], y[6:])]), 4, shuffle=False, **kw)


# -- next_into's buffers ---------------------------------------------------------------------


def test_plain_buffers_pass_the_full_checks_once_then_one_check_in_c():
    dl = loader(dtype=np.float32)
    assert dl._checks.plain is None
    bx, by = np.empty((4, 3), np.float32), np.empty((4, 1), np.float32)
    assert dl.next_into(bx, by) == 4
    assert dl._checks.plain == (4, 3, 1, 4)  # (b, d, l, itemsize)
    assert dl.next_into(bx, by) == 4 and bx[0, 0] == 4
    with pytest.raises(TypeError, match=r"^bx must have dtype float32 and shape \(4, 3\)"):
        dl.next_into(np.empty((4, 3)), by)  # the C check fails: the full ones say why
    with pytest.raises(ValueError, match=r"^by must have shape \(4, 1\); got \(4, 2\)$"):
        dl.next_into(bx, np.empty((4, 2), np.float32))
    assert dl.next_into(bx, by) == 2 and bx[0, 0] == 8


def test_buffers_with_row_ids_or_class_labels_are_never_plain():
    dl = loader(with_rows=True)
    bx, by, brows = np.empty((4, 3)), np.empty((4, 1)), np.empty(4, np.int64)
    assert dl.next_into(bx, by, brows) == 4 and list(brows) == [0, 1, 2, 3]
    assert dl._checks.plain is None
    assert [dl.next_into(bx, by, brows) for _ in range(5)] == [4, 2, 0, 0, 0]  # full checks
    assert list(brows[:2]) == [8, 9]
    dl = loader(label_dtype=np.int64)
    assert dl.next_into(bx, np.empty((4, 1), np.int64)) == 4
    assert dl._checks.plain is None
    assert [dl.next_into(bx, np.empty((4, 1), np.int64)) for _ in range(4)] == [4, 2, 0, 0]


def test_missing_buffers_are_named_with_their_shapes():
    dl = loader(label_dtype=np.int32)
    want = (
        r"^next_into needs buffers bx \(float64\) of shape \(4, 3\) and by \(int32\) of "
        r"shape \(4, 1\) \(by may be None only when l = 0\)$"
    )
    with pytest.raises(TypeError, match=want):
        dl.next_into(np.empty((4, 3)))
    with pytest.raises(TypeError, match=want):
        dl.next_into(None, np.empty((4, 1), np.int32))
    no_labels = loader(l=0)
    with pytest.raises(TypeError, match=r"bx \(float64\) of shape \(4, 3\) and by"):
        no_labels.next_into(None)
    bx = np.empty((4, 3))
    assert no_labels.next_into(bx) == 4 and no_labels.next_into(bx, None) == 4
    assert list(bx[:, 0]) == [4, 5, 6, 7]
    single = loader(l=0, dtype=np.float32)  # by made of the loader's dtype
    bx = np.empty((4, 3), np.float32)
    assert single.next_into(bx) == 4 and single._checks.plain == (4, 3, 0, 4)
    assert single.next_into(bx) == 4 and bx[0, 0] == 4


def test_class_labels_check_each_buffer_against_its_own_dtype():
    dl = loader(label_dtype=np.int64)
    bx, by = np.empty((4, 3)), np.empty((4, 1), np.int64)
    with pytest.raises(TypeError, match=r"^bx must have dtype float64 and shape \(4, 3\)"):
        dl.next_into(bx.astype(np.int64), by)
    with pytest.raises(TypeError, match=r"^by must have dtype int64 and shape \(4, 1\)"):
        dl.next_into(bx, by.astype(np.float64))
    with pytest.raises(ValueError, match=r"^by must have shape \(4, 1\); got \(4, 2\)$"):
        dl.next_into(bx, np.empty((4, 2), np.int64))
    assert dl.next_into(bx, by) == 4 and list(by[:, 0]) == [0, 1, 2, 0]
    single = loader(label_dtype=np.int64, dtype=np.float32)  # bx of the loader's dtype
    with pytest.raises(TypeError, match=r"^bx must have dtype float32 and shape \(4, 3\)"):
        single.next_into(bx, by)


def test_plain_buffers_that_do_not_fit_are_named():
    dl = loader()
    by = np.empty((4, 1))
    with pytest.raises(ValueError, match=r"^bx must have shape \(4, 3\); got \(4, 2\)$"):
        dl.next_into(np.empty((4, 2)), by)
    with pytest.raises(TypeError, match=r"^by must have dtype float64 and shape \(4, 1\)"):
        dl.next_into(np.empty((4, 3)), by.astype(np.float32))
    assert dl._checks.plain is None and dl.next_into(np.empty((4, 3)), by) == 4


def test_brows_without_with_rows_and_with_rows_without_brows():
    bx, by = np.empty((4, 3)), np.empty((4, 1))
    with pytest.raises(TypeError) as e:
        loader().next_into(bx, by, np.empty(4, np.int64))
    assert str(e.value) == (
        "next_into got brows, but this DataLoader was built with with_rows=False: build it "
        "with with_rows=True to have row ids written into an int64 array of shape (4,)"
    )
    dl = loader(with_rows=True)
    with pytest.raises(TypeError) as e:
        dl.next_into(bx, by)
    assert str(e.value) == (
        "next_into of a DataLoader with with_rows=True needs brows, an int64 array of shape "
        "(4,) for the rows' ids: next_into(bx, by, brows)"
    )
    with pytest.raises(TypeError, match=r"^brows must have dtype int64 and shape \(4,\)"):
        dl.next_into(bx, by, np.empty(4, np.int32))
    with pytest.raises(ValueError, match=r"^brows must have shape \(4,\); got \(3,\)$"):
        dl.next_into(bx, by, np.empty(3, np.int64))


def test_padding_is_refused_by_name():
    dl = loader(num_shards=2, shard_index=1, even_batches="pad")
    with pytest.raises(ValueError) as e:
        dl.next_into(np.empty((4, 3)), np.empty((4, 1)))
    assert str(e.value) == (
        "next_into cannot hand out the padding batches of even_batches='pad' (it returns the "
        "rows written, and 0 means the end of the epoch): iterate with iter(loader), whose "
        "batches are (xb, yb, mask)"
    )


def test_next_into_first_reads_ahead_to_learn_a_streams_widths():
    dl = stream(total_size=None)
    assert dl.d is None and dl._checks.plain is None
    bx, by = np.empty((4, 3)), np.empty((4, 1))
    got = []
    while (r := dl.next_into(bx, by)) > 0:
        got += list(bx[:r, 0])
    assert dl.d == 3 and dl._checks.plain == (4, 3, 1, 8)
    assert got == list(range(10))


def test_a_stream_without_a_chunk_ends_its_epoch_at_once():
    dl = DataLoader(lambda: iter([]), 4, total_size=None)
    assert dl.next_into(np.empty((4, 3)), np.empty((4, 1))) == 0
    assert dl._checks.plain is None and dl.d is None


# -- the front door's own checks --------------------------------------------------------------


def test_reset_checks_the_seed_and_takes_any_big_one():
    dl = loader()
    with pytest.raises(ValueError, match=r"^seed must be >= 0; got seed=-1$"):
        dl.reset(-1)
    with pytest.raises(TypeError, match=r"^seed must be an int; got 1.5$"):
        dl.reset(1.5)
    dl.reset(2**70)
    assert dl.seed == 2**70
    dl.reset(0)
    assert dl.seed == 0
    dl.reset()
    assert dl.seed == 0


def test_set_epoch_checks_the_epoch():
    dl = loader()
    with pytest.raises(ValueError, match=r"^epoch must be >= 0; got epoch=-1$"):
        dl.set_epoch(-1)
    with pytest.raises(TypeError, match=r"^epoch must be an int; got '1'$"):
        dl.set_epoch("1")
    dl.set_epoch(0)
    assert dl.epoch == 0


def test_a_loader_is_not_pickled():
    with pytest.raises(TypeError) as e:
        pickle.dumps(loader())
    assert str(e.value) == (
        "a DataLoader cannot be pickled: send state_dict(), use load_state_dict"
    )


def test_len_of_a_stream_of_unknown_size():
    with pytest.raises(TypeError) as e:
        len(stream(total_size=None))
    assert str(e.value) == "len() of a DataLoader over a stream with total_size=None is unknown"
    assert len(stream(total_size=10)) == 3


def test_repr():
    dl = loader(seed=5, drop_last=True, num_shards=2, shard_index=1)
    assert repr(dl) == (
        "DataLoader(n=5, d=3, l=1, batch_size=4, shuffle=False, seed=5, drop_last=True, "
        "shard=1/2, total_size=10, epoch=0)"
    )


def test_load_state_dict_checks_its_flag():
    dl = loader()
    with pytest.raises(TypeError, match="^allow_other_data must be a bool"):
        dl.load_state_dict(dl.state_dict(), allow_other_data=1)


def test_plain_buffers_take_the_full_checks_once_an_epoch_long(monkeypatch):
    """After plain buffers passed, next_into checks them in C only: the full checks (with
    their messages) run again only for a buffer that fails it, or for brows."""
    calls = []
    full = IntoChecks.full

    def counted(self, *args):
        calls.append(args[2] is not None)  # brows given
        return full(self, *args)

    monkeypatch.setattr(IntoChecks, "full", counted)
    dl = loader(n=40)
    bx, by = np.empty((4, 3)), np.empty((4, 1))
    assert [dl.next_into(bx, by) for _ in range(11)] == [4] * 10 + [0]
    assert calls == [False]
    with pytest.raises(ValueError, match="^bx must have shape"):
        dl.next_into(np.empty((4, 2)), by)
    assert calls == [False, False]
    dl = loader(n=40, with_rows=True)
    calls.clear()
    assert [dl.next_into(bx, by, np.empty(4, np.int64)) for _ in range(3)] == [4] * 3
    assert calls == [True] * 3


def test_next_into_hands_out_the_batches_an_iterator_read_ahead():
    """An iterator left mid-epoch leaves batches it read; next_into hands them out."""
    dl = loader(n=40, shuffle=True, seed=3)
    want = [list(xb[:, 0]) for xb, _ in loader(n=40, shuffle=True, seed=3)]
    it = iter(dl)
    got = [list(next(it)[0][:, 0])]
    it.peek(3)
    bx, by = np.empty((4, 3)), np.empty((4, 1))
    while dl.next_into(bx, by):
        got.append(list(bx[:, 0]))
        assert list(by[:, 0]) == list(make_data(40)[1][bx[:, 0].astype(int), 0])
    assert got == want


def test_a_read_that_raises_leaves_its_batch_to_the_next_call():
    dl = loader(n=40)
    FlakyReads(dl, fail_at=2)
    bx, by = np.empty((4, 3)), np.empty((4, 1))
    assert dl.next_into(bx, by) == 4 and bx[0, 0] == 0
    with pytest.raises(OSError, match="injected"):
        dl.next_into(bx, by)
    got = []
    while dl.next_into(bx, by):
        got.append(int(bx[0, 0]))
    assert got == list(range(4, 40, 4))


def test_next_into_counts_its_reads_of_the_source():
    dl = loader(n=40, shuffle=True)
    it = iter(dl)
    next(it)
    it.peek(2)  # read ahead by the iterator: next_into hands them out without a read
    bx, by = np.empty((4, 3)), np.empty((4, 1))
    while dl.next_into(bx, by):
        pass
    stats = dl.stats()["epoch"]
    assert stats["batches"] == 10 and 1 <= stats["reads"] <= 8


def test_load_state_dict_refuses_other_data_unless_allowed():
    x, y = make_data(10)
    state = loader().state_dict()
    other = DataLoader((x + 1, y), 4, shuffle=False)
    with pytest.raises(ValueError, match="^state was taken on other data"):
        other.load_state_dict(state)
    other.load_state_dict(state, allow_other_data=True)
    with pytest.raises(TypeError, match=r"^state must be a dict from state_dict\(\); got list$"):
        other.load_state_dict(["x"])


def test_a_stream_not_read_yet_learns_its_widths_at_load_state_dict():
    first = stream(total_size=None)
    bx, by = np.empty((4, 3)), np.empty((4, 1))
    assert first.next_into(bx, by) == 4
    state = first.state_dict()
    resumed = stream(total_size=None)
    resumed.load_state_dict(state)
    assert resumed.next_into(bx, by) == 4 and list(bx[:, 0]) == [4, 5, 6, 7]
    narrow = stream(d=2, total_size=None)
    with pytest.raises(ValueError, match="^state was taken with d=3, this loader has d=2$"):
        narrow.load_state_dict(state)  # refused at the load, not mid-epoch
    assert narrow.d == 2


@pytest.mark.parametrize(
    "kw, error, message",
    [
        ({"batch_size": 0}, ValueError, r"^batch_size must be >= 1; got batch_size=0$"),
        ({"seed": -1}, ValueError, r"^seed must be >= 0; got seed=-1$"),
        ({"buffer_size": 0}, ValueError, r"^buffer_size must be >= 1; got buffer_size=0$"),
        ({"prefetch": -1}, ValueError, r"^prefetch must be >= 0; got prefetch=-1$"),
        ({"prefetch": 1025}, ValueError, r"^prefetch must be <= 1024; got prefetch=1025$"),
        ({"threads": 0}, ValueError, r"^threads must be >= 1; got threads=0$"),
        ({"threads": 1.5}, TypeError, r"^threads must be an int; got 1.5$"),
        ({"progress": print, "progress_every": 0}, ValueError, "^progress_every must be"),
        ({"progress": 3}, TypeError, "^progress must be a callable"),
    ],
)
def test_the_front_doors_arguments_are_checked_by_name(kw, error, message):
    x, y = make_data(10)
    kw = {"batch_size": 4, **kw}  # (a copy: the parameters are shared between runs)
    with pytest.raises(error, match=message):
        DataLoader((x, y), **kw)


def test_the_front_doors_settings_reach_the_loader():
    x, y = make_data(40)
    dl = DataLoader((x, y), 4)  # shuffled, seed 0, by default
    assert dl.seed == 0 and dl.shuffle is True
    assert [list(b[:, 0]) for b, _ in dl] == [
        list(b[:, 0]) for b, _ in DataLoader((x, y), 4, shuffle=True, seed=0)
    ]
    firsts = [int(b[0, 0]) for b, _ in DataLoader((x, y), 4)]
    assert firsts != sorted(firsts)  # not file order
    big = DataLoader((x, y), 4, seed=2**70, threads=2, prefetch=1024, buffer_size=7)
    assert (big.seed, big.threads, big.prefetch, big.buffer_size) == (2**70, 2, 1024, 7)
    assert DataLoader((x, y), 4, threads=1).threads == 1
    assert DataLoader((x, y), 4, prefetch=0).prefetch == 0
    labels = (np.arange(40) % 3).astype(np.float64).reshape(40, 1)
    assert DataLoader((x, labels), 4, label_dtype=np.int32).label_dtype == np.int32
    assert DataLoader((x, y), 4, features=[0]).d == 1
    sized = stream(total_size=np.int64(10))
    assert sized.total_size == 10 and type(sized.total_size) is int and len(sized) == 3
    seen = []
    watched = DataLoader((x, y), 4, progress=seen.append)
    for _ in watched:
        pass
    assert len(seen) == 1 and seen[0]["epoch"]["batches"] == 10
