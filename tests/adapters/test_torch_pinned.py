"""as_torch(pin_memory=True)'s pool of pinned buffers (exactbatch.adapters.torch_pinned),
on a CPU: plain memory from a stand-in allocator in place of page-locked memory, the
pool's logic as it runs with CUDA (reuse, no buffer lent twice while a batch of it is
held, a device copy's event awaited, release)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from exactbatch import DataLoader  # noqa: E402
from exactbatch.adapters.torch_pinned import PinnedPool, use_counter  # noqa: E402
from exactbatch.torch import TorchLoader, as_torch  # noqa: E402


class Allocator:
    """Plain CPU tensors, counted."""

    def __init__(self):
        self.made = []

    def __call__(self, nbytes: int):
        self.made.append(nbytes)
        return torch.empty(nbytes, dtype=torch.uint8)


use_count = use_counter(torch)


class Event:
    """A device copy's event: done after ``polls`` queries."""

    def __init__(self, polls: int):
        self.polls = polls

    def query(self) -> bool:
        self.polls -= 1
        return self.polls < 0


def test_a_buffer_is_reused_once_nothing_holds_it_and_never_lent_twice():
    alloc = Allocator()
    pool = PinnedPool(alloc, use_count)
    a = pool.take(100)
    held_a = a.base[:48].view(torch.float64)  # a batch of it, kept by the caller
    b = pool.take(100)
    assert b is not a and len(alloc.made) == 2  # a is held: a new buffer
    assert pool.take(100) is b  # b: lent, but nothing made from it is alive
    held_b = b.base.numpy()  # a NumPy array of it holds it as well
    view = held_a[:2]  # and a view of a batch does
    del held_a
    c = pool.take(100)
    assert c not in (a, b) and len(alloc.made) == 3
    held_c = c.base[:8]
    del view
    assert pool.take(80) is a  # free now: reused, no allocation
    del held_b, held_c
    assert len(alloc.made) == 3
    lent, free = pool.sizes()
    assert lent + free == 3


def test_a_larger_request_takes_a_new_buffer_and_give_back_frees_at_once():
    alloc = Allocator()
    pool = PinnedPool(alloc, use_count)
    a = pool.take(64)
    pool.give_back(a)
    assert pool.sizes() == (0, 1)
    big = pool.take(128)  # a is too small
    assert big is not a and alloc.made == [64, 128]
    assert pool.take(10) is a
    pool.clear()
    assert pool.sizes() == (0, 0)
    pool.take(0)  # (nothing to hold: a buffer of one byte, never of none)
    assert alloc.made == [64, 128, 1]


def test_the_pinned_allocator_asks_torch_for_page_locked_bytes(monkeypatch):
    """pinned_allocator(torch): ``torch.empty(nbytes, dtype=torch.uint8,
    pin_memory=True)``; as_torch(pin_memory=True) with CUDA and no allocator of its own
    gathers into its buffers (torch.empty recorded here: page-locked memory needs CUDA)."""
    from exactbatch.adapters.torch_pinned import pinned_allocator

    asked = []
    empty = torch.empty

    def recorded(*args, **kw):
        asked.append((args, kw))
        return empty(*args, dtype=kw["dtype"])

    monkeypatch.setattr(torch, "empty", recorded)
    t = pinned_allocator(torch)(24)
    assert asked == [((24,), {"dtype": torch.uint8, "pin_memory": True})]
    assert t.dtype == torch.uint8 and t.shape == (24,)
    asked.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    tl = TorchLoader(loader(), pin_memory=True)
    assert tl.pin_memory is True and tl._pool is not None
    first = next(iter(tl))
    assert [kw for _, kw in asked] == [{"dtype": torch.uint8, "pin_memory": True}]
    assert np.array_equal(first[0].numpy(), next(iter(loader()))[0])


def test_a_buffer_whose_device_copy_is_not_done_waits_for_its_event():
    pool = PinnedPool(Allocator(), use_count)
    a = pool.take(64)
    a.event = Event(polls=1)  # the copy to the device still runs at the next take
    assert pool.take(64) is not a
    assert pool.take(64) is a  # done now
    assert a.event is None


def test_without_torchs_use_count_a_buffer_is_never_reused():
    """A torch without ``_C._storage_Use_Count``: no buffer can be known free, so each
    take is a new buffer, even where nothing holds the last one (so never one a batch the
    caller keeps is made of); one given back unused is free at once."""
    alloc = Allocator()
    pool = PinnedPool(alloc, use_counter(object()))  # (no _C at all)
    a = pool.take(64)
    held = a.base[:8]  # a batch of it, kept
    b = pool.take(64)
    del held
    c = pool.take(64)  # nothing holds a or b now, but the pool cannot know it
    assert len({id(a), id(b), id(c)}) == 3 and alloc.made == [64, 64, 64]
    pool.give_back(c)
    assert pool.take(64) is c and pool.sizes() == (3, 0)


def loader(**kw):
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(53, 3)), rng.normal(size=(53, 2))
    return DataLoader((x, y), 8, seed=3, **kw)


@pytest.mark.parametrize(
    "kw", [{}, {"with_rows": True}, {"dtype": np.float32}, {"prefetch": 2}, {"threads": 2}]
)
def test_pinned_batches_are_the_loaders_and_each_iter_is_the_next_epoch(kw):
    """Gathered by next_into into the pool's buffers: the same batches as the loader's
    iter(), epoch after epoch; batches kept are never overwritten (a buffer each), batches
    dropped as they come reuse two buffers or so."""
    alloc = Allocator()
    tl = TorchLoader(loader(**kw), pin_memory=True, allocator=alloc)
    assert tl.pin_memory is True and tl._pool is not None
    ref = loader(**kw)
    kept = [list(tl), list(tl)]  # epochs 0 and 1, every batch kept
    want = [list(ref), list(ref)]
    for got_epoch, want_epoch in zip(kept, want, strict=True):
        assert len(got_epoch) == len(want_epoch) == 7
        for got, w in zip(got_epoch, want_epoch, strict=True):
            for t, a in zip(got, w, strict=True):
                assert np.array_equal(t.numpy(), a)
    assert len(alloc.made) >= 14  # (held: none reused)
    del kept, got_epoch, got, t
    made = len(alloc.made)
    for xb, *_ in tl:  # dropped as they come: buffers reused
        assert xb.shape[1] == 3
    del xb
    assert len(alloc.made) - made <= 2


def test_pinned_batches_of_class_labels_and_of_a_stream():
    x = np.arange(40.0).reshape(20, 2)
    y = (np.arange(20) % 3).astype(np.float64)[:, None]
    tl = TorchLoader(
        DataLoader((x, y), 6, label_dtype=np.int64), pin_memory=True, allocator=Allocator()
    )
    ys = [yb for _, yb in tl]
    assert all(t.dtype == torch.int64 for t in ys)
    assert sorted(torch.cat(ys)[:, 0].tolist()) == sorted(y[:, 0].astype(int).tolist())
    chunks = [(x[:7], y[:7]), (x[7:], y[7:])]
    tl = TorchLoader(
        DataLoader(chunks, 6, buffer_size=8, total_size=20), pin_memory=True, allocator=Allocator()
    )
    got = [xb for xb, _ in tl]
    assert sorted(torch.cat(got)[:, 0].tolist()) == sorted(x[:, 0].tolist())


def test_pinned_batches_moved_to_a_device():
    """device= with the pool: each batch's views moved (to "meta", which needs no
    accelerator: only the shapes and dtypes remain), the loader's shapes, row ids too."""
    tl = TorchLoader(loader(with_rows=True), pin_memory=True, allocator=Allocator(), device="meta")
    assert tl._pool is not None
    got, want = list(tl), list(loader(with_rows=True))
    assert [[(tuple(t.shape), t.dtype) for t in b] for b in got] == [
        [(a.shape, getattr(torch, a.dtype.name)) for a in w] for w in want
    ]
    assert all(t.is_meta for b in got for t in b)


def test_pinned_parts_do_not_overlap_whatever_their_size():
    """13 rows of 5 float64 features: 520 bytes, not a multiple of 64; the labels start
    at the next 64-byte boundary, past the features' end."""
    rng = np.random.default_rng(1)
    data = (rng.normal(size=(40, 5)), rng.normal(size=(40, 2)))
    tl = TorchLoader(DataLoader(data, 13, seed=2), pin_memory=True, allocator=Allocator())
    for got, want in zip(tl, DataLoader(data, 13, seed=2), strict=True):
        assert all(np.array_equal(t.numpy(), a) for t, a in zip(got, want, strict=True))
        assert all(t.data_ptr() % 64 == 0 for t in got)


def test_pinned_streams_of_one_short_batch_and_of_none():
    """A stream not read yet (its widths unknown): its first batch, shorter than
    batch_size, is copied into a buffer; a stream with no rows gives no batch."""
    x, y = np.arange(10.0).reshape(5, 2), np.ones((5, 1))
    short = DataLoader(lambda: iter([(x, y)]), 8, total_size=5)
    (xb, yb), *rest = TorchLoader(short, pin_memory=True, allocator=Allocator())
    assert not rest and np.array_equal(np.sort(xb.numpy(), axis=0), x) and yb.shape == (5, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        empty = DataLoader(lambda: iter([]), 8, total_size=None)
    assert list(TorchLoader(empty, pin_memory=True, allocator=Allocator())) == []


class FailingReads:
    """A loader whose reads fail (the attributes TorchLoader reads, no more)."""

    batch_size, d, l, with_rows = 4, 3, 2, False  # noqa: E741
    dtype = label_dtype = np.dtype(np.float64)

    def __iter__(self):
        return iter(())

    def __len__(self):
        return 1

    def next_into(self, *out):
        raise OSError("the read failed")


def test_a_failed_read_gives_its_buffer_back_and_its_error_through():
    tl = TorchLoader(FailingReads(), pin_memory=True, allocator=Allocator())
    with pytest.raises(OSError, match="the read failed"):
        next(iter(tl))
    assert tl._pool.sizes() == (0, 1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-CUDA fallback")
def test_pin_memory_without_cuda_warns_and_gives_ordinary_memory():
    with pytest.warns(RuntimeWarning, match="CUDA is not available"):
        tl = as_torch(loader(), pin_memory=True)
    assert tl.pin_memory is False
    assert all(not xb.is_pinned() for xb, _ in tl)
