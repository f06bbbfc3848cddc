"""The source protocols (sources/protocols.py): a new kind of source plugs in through
``RowSource`` or ``ChunkSource`` alone; a stream's optional hooks are read once, in one
place, each checked, and a stream without them is still read exactly.

The law matrix runs both doubles of tests/doubles.py through every law (its
``rows_double`` and ``chunks_double`` kinds); these tests pin what the protocols say.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from doubles import ChunksDouble, RowsDouble
from helpers import chunks_of, collect, make_data, make_x, make_y, write_parquet

from exactbatch import DataLoader, ndf_blocks, open_ndf, parquet_source, save_ndf
from exactbatch.sources.chunks import ChunkError
from exactbatch.sources.kinds import open_source

N = 30


def rows_sorted(batches) -> list[int]:
    return sorted(r for b in batches for r in b)


# -- random access: RowSource and RowReader ----------------------------------------------------


def test_a_row_source_is_random_access_through_open_reader_alone():
    """An object with open_reader() is a random-access source: every loader opens a
    reader of its own and closes it with itself; epochs are full shuffles (elastic
    sharding, which only random access has, works)."""
    x, y = make_data(N)
    src = RowsDouble(x, y)
    shards = [DataLoader(src, 4, seed=3, num_shards=2, shard_index=s, elastic=True) for s in (0, 1)]
    assert src.opened == 2 and src.closed == 0
    assert shards[0].state_dict()["source"] == "random access"
    got = [collect(loader, 3, 1) for loader in shards]
    assert rows_sorted(got[0] + got[1]) == list(range(N))
    for loader in shards:
        loader.close()
    assert src.closed == 2


def test_a_reader_lacking_a_member_is_a_type_error_naming_what_it_lacks():
    class Half:
        n, d, l = 3, 1, 0  # noqa: E741

        def read(self, rows, out_x, out_y):
            pass

    class Source:
        def __init__(self, reader):
            self.reader = reader

        def open_reader(self):
            return self.reader

    with pytest.raises(
        TypeError,
        match=r"^Source\.open_reader\(\) returned Half, which lacks "
        r"prefetch_default, close: a RowReader has n, d, l, read\(rows, out_x, out_y\), "
        r"prefetch_default\(batch_bytes\) and close\(\)$",
    ):
        DataLoader(Source(Half()), 2)
    bad = Half()
    bad.prefetch_default, bad.close, bad.n = (lambda b: 0), (lambda: None), -1
    with pytest.raises(ValueError, match=r"Source\.open_reader\(\)\.n must be >= 0"):
        DataLoader(Source(bad), 2)
    bad.n = 3.0
    with pytest.raises(TypeError, match=r"Source\.open_reader\(\)\.n must be an int"):
        DataLoader(Source(bad), 2)


def test_an_unknown_source_is_a_type_error_listing_every_kind_with_the_protocols():
    with pytest.raises(TypeError) as err:
        DataLoader(3.5, 2)
    message = str(err.value)
    assert message.startswith("source must be a RowSource (open_reader()), an NdfFile")
    assert "a ChunkSource (chunk_rows, read_chunk" in message
    assert message.endswith("or a re-iterable of chunks; got float")


# -- streams: ChunkSource and its hooks ---------------------------------------------------------


def test_a_bare_chunk_source_is_read_exactly_without_any_optional_hook():
    """chunk_rows and read_chunk only (no n_rows, widths, buffer hooks; not even
    __iter__): "auto" counts its rows in a pass (with the warning), the widths come
    from the first chunk read, and a shuffled epoch reads only read_chunk."""
    x, y = make_data(N)
    src = ChunksDouble(x, y, [7, 0, 11, 5, 7])
    with pytest.warns(UserWarning, match=r"counted its rows with one full pass \(30 rows\)"):
        loader = DataLoader(src, 4, seed=2, buffer_size=9)
    assert loader.total_size == N and len(loader) == 8
    assert rows_sorted(collect(loader, 3, 1)) == list(range(N))
    assert loader.d == 3 and loader.l == 1


def test_the_widths_of_a_bare_chunk_source_are_learnt_from_read_chunk_on_demand():
    """With N declared there is no counting pass: d and l are None until a chunk is
    read - by next_into, or by load_state_dict, which reads chunk 0 through read_chunk
    (the source need not be iterable; it had to be)."""
    x, y = make_data(N)
    loader = DataLoader(ChunksDouble(x, y, [10, 10, 10]), 5, total_size=N, shuffle=False)
    assert loader.d is None
    bx, by = np.empty((5, 3)), np.empty((5, 1))
    assert loader.next_into(bx, by) == 5 and bx[:, 0].tolist() == [0, 1, 2, 3, 4]
    assert (loader.d, loader.l) == (3, 1)
    src = ChunksDouble(x, y, [10, 10, 10])
    fresh = DataLoader(src, 5, total_size=N, shuffle=False)
    fresh.load_state_dict(loader.state_dict())
    assert (fresh.d, fresh.l) == (3, 1) and src.reads == [0]
    assert collect(fresh, 3, 1)[0] == [5, 6, 7, 8, 9]


def test_buffer_hooks_without_widths_are_left_unused():
    """read_rows_into and open_chunk need the widths (a buffer's rows are x then y):
    a source that has them but no d and l is read with read_chunk, exactly."""
    x, y = make_data(N)

    class NoWidths(ChunksDouble):
        n_rows = N

        def read_rows_into(self, row, out):
            raise AssertionError("read_rows_into used without the widths")

        def open_chunk(self, i):
            raise AssertionError("open_chunk used without the widths")

    src = NoWidths(x, y, [6, 6, 6, 6, 6])
    got = collect(DataLoader(src, 4, seed=1, buffer_size=8), 3, 1)
    assert rows_sorted(got) == list(range(N)) and sorted(src.reads) == [0, 1, 2, 3, 4]


def test_a_chunk_of_other_rows_than_chunk_rows_says_is_a_chunk_error_naming_it():
    """A chunk shorter than chunk_rows says would be rows lost (longer: rows counted
    twice): a ChunkError naming the chunk, at the read, not an ExactnessError later."""
    x, y = make_data(N)

    class Short(ChunksDouble):
        def read_chunk(self, i):
            cx, cy = super().read_chunk(i)
            return (cx[:-1], cy[:-1]) if i == 2 else (cx, cy)

    loader = DataLoader(Short(x, y, [10, 10, 10]), 5, total_size=N, shuffle=False)
    with pytest.raises(
        ChunkError,
        match=r"^chunk 2: read_chunk\(2\) returned 9 rows, but "
        r"chunk_rows\[2\] says 10",
    ):
        collect(loader)


class Hooked(ChunksDouble):
    """Every optional hook, served by __getattr__ so each lookup is counted."""

    HOOKS = (
        *("n_rows", "d", "l", "block_rows", "will_need"),
        *("read_rows_into", "open_chunk", "read_columns"),
    )

    def __init__(self, x, y, sizes):
        super().__init__(x, y, sizes)
        self.looked_up: list[str] = []
        self.hinted: list[int] = []

    def __getattr__(self, name):
        if name not in self.HOOKS:
            raise AttributeError(name)
        self.looked_up.append(name)
        values = {"n_rows": len(self.x), "d": self.x.shape[1], "l": self.y.shape[1]}
        values.update(block_rows=self.chunk_rows[0], will_need=self.hinted.append)
        values.update(read_rows_into=self._into, open_chunk=self._open, read_columns=self._open)
        return values[name]

    def _into(self, row, out):
        out[:, : self.x.shape[1]] = self.x[row : row + len(out)]
        out[:, self.x.shape[1] :] = self.y[row : row + len(out)]

    def _open(self, i):
        raise AssertionError("read_rows_into comes first")


def test_every_hook_is_looked_up_once_per_loader_and_used():
    """stream_hooks is the one place a stream's hooks are asked for: each of the eight
    once, when the loader is built, none during its epochs (before, the feed asked for
    will_need, read_rows_into and open_chunk at every pass)."""
    x, y = make_data(N)
    src = Hooked(x, y, [6] * 5)
    loader = DataLoader(src, 4, seed=5, buffer_size=12)
    assert sorted(src.looked_up) == sorted(Hooked.HOOKS)
    del src.looked_up[:]
    for _ in range(2):
        assert rows_sorted(collect(loader, 3, 1)) == list(range(N))
    assert src.looked_up == [] and src.reads == []  # read_rows_into read every chunk
    assert sorted(src.hinted) == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert loader.state_dict()["block_rows"] == 6 and (loader.d, loader.l) == (3, 1)


@pytest.mark.parametrize(
    "change, error, message",
    [
        (dict(chunk_rows=[[1, 2], [3]]), TypeError, r"Bad\.chunk_rows must be a "),
        (
            dict(chunk_rows=[1.0, 2.0]),
            TypeError,
            r"Bad\.chunk_rows must be a 1-D sequence of "
            r"integer row counts; got dtype float64",
        ),
        (dict(chunk_rows=[[1, 2]]), TypeError, r"Bad\.chunk_rows must be a 1-D .* shape \(1, 2\)"),
        (dict(chunk_rows=[3, -1]), ValueError, r"Bad\.chunk_rows must be row counts >= 0; got -1"),
        (dict(n_rows=3.0), TypeError, r"Bad\.n_rows must be an int; got 3\.0"),
        (dict(n_rows=-2), ValueError, r"Bad\.n_rows must be >= 0"),
        (dict(block_rows=0), ValueError, r"Bad\.block_rows must be >= 1"),
        (dict(d=2), TypeError, r"Bad has only one of d and l; a chunk source has both"),
        (dict(d=2, l="1"), TypeError, r"Bad\.l must be an int"),
    ],
)
def test_a_hook_of_the_wrong_kind_is_an_error_naming_it(change, error, message):
    class Bad:
        chunk_rows = [2, 2]

        def read_chunk(self, i):
            return np.zeros((2, 2))

    src = Bad()
    for name, value in change.items():
        setattr(src, name, value)
    with pytest.raises(error, match=message):
        DataLoader(src, 2, total_size=4)


def test_only_a_chunk_source_s_widths_are_hooks():
    """d and l are read of a chunk source only: a re-iterable's own d (a DaskStream's,
    say) is not taken as the stream's widths; n_rows and block_rows are read of any."""

    from exactbatch.sources.protocols import stream_hooks

    class Chunks(list):
        d, l, n_rows, block_rows = 9, 9, 4, 2  # noqa: E741

    hooks = stream_hooks(Chunks(chunks_of([2, 2])))
    assert (hooks.d, hooks.l, hooks.n_rows, hooks.block_rows) == (None, None, 4, 2)
    assert not hooks.chunk_indexed and hooks.read_chunk is None


def test_a_state_taken_after_close_still_records_the_source_s_sizes(tmp_path):
    """The hooks are read once, so a state taken after close() records n_rows and
    block_rows as before it (it recorded None, and a fresh loader refused it), and
    resumes after the batch handed out before it."""
    path = str(tmp_path / "a.ndf")
    rows = np.arange(N)
    save_ndf(path, (make_x(rows, 2), make_y(rows, 1)))
    with open_ndf(path) as f:
        src = ndf_blocks(f, 5)
    loader = DataLoader(src, 4, buffer_size=8)
    it = iter(loader)
    first = next(it)[0][:, 0].astype(int).tolist()
    loader.close()
    state = loader.state_dict()
    assert (state["n_rows"], state["block_rows"], state["batches_done"]) == (N, 5, 1)
    fresh = DataLoader(src, 4, buffer_size=8)
    fresh.load_state_dict(state)  # a ValueError before: "n_rows=None, this loader has 30"
    assert rows_sorted([first, *collect(fresh, 2, 1)]) == list(range(N))


def test_parquet_and_ndf_blocks_declare_their_hooks(tmp_path):
    """What the built-in chunk sources provide, as stream_hooks reads it."""
    from exactbatch.sources.protocols import stream_hooks

    pytest.importorskip("pyarrow")
    path = str(tmp_path / "a.parquet")
    write_parquet(path, [4, 6], 0, d=2, l=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        pq = stream_hooks(parquet_source(path, labels="y0"))
    assert (pq.n_rows, pq.d, pq.l, pq.block_rows) == (10, 2, 1, None)
    assert pq.open_chunk is not None and pq.read_rows_into is None and pq.will_need is None
    assert pq.read_columns is not None
    assert pq.chunk_rows.tolist() == [4, 6] and not pq.chunk_rows.flags.writeable
    ndf = str(tmp_path / "a.ndf")
    save_ndf(ndf, (make_x(np.arange(10), 2), make_y(np.arange(10), 1)))
    with open_ndf(ndf) as f:
        blocks = stream_hooks(ndf_blocks(f, 4))
    assert (blocks.n_rows, blocks.d, blocks.l, blocks.block_rows) == (10, 2, 1, 4)
    assert blocks.read_rows_into is not None and blocks.will_need is not None
    assert open_source(RowsDouble(*make_data(3))).n == 3
