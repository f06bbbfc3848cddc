"""Reliability, 1: fuzzed files - every bad file is a clear error, every good one reads right.

``.ndf`` files get mutated headers (any of n, d, l set to small, boundary or
random 64-bit values; header bytes flipped), lengths (cut anywhere, grown
by junk, or resized to fit a mutated header) and data bytes. Parquet files
get truncated anywhere (most often in the footer), bytes of their footer or
anywhere overwritten, a wrong footer length, and wrong schemas in a second
file. The promise checked for each case:

* the file is refused with a clear error - ``NdfError``/``ValueError`` whose
  message names the file (or ``FileNotFoundError`` for a missing one) - or
* it reads correctly: every row handed out is a row the file holds (for
  ``.ndf``: bit for bit the bytes after the header; for Parquet: the rows
  pyarrow reads from it, or the rows originally written), each exactly once
  per epoch;

and never a crash, a hang, a ``MemoryError`` from a giant header (nothing
is allocated from header values before the size check), another exception
type, or rows that are not in the file.

The checkers (:func:`check_ndf_bytes`, :func:`check_parquet_bytes`) return
"error" or "read"; ``bench/reliability.py fuzz`` reuses them for the long
run (30,000 cases of each kind) in child processes, so a crash or a hang is
also caught and counted there.

Reliability, 3: files that change underneath a reader (at the end). An
``.ndf`` truncated or rewritten in place mid-epoch is an ``NdfError`` at the
next batch read (its size, mtime and ctime are checked at every read; a
rewrite with its mtime put back is tests/ndf/test_file.py's); one
replaced (renamed over) or deleted keeps being read as the file that was
opened. The loader runs in a child process, so a SIGBUS would show as its
exit status. The truncations here happen between reads; truncations
*during* a copy from the memory map (which waits for the copy's read lease)
are tested in tests/ndf/test_guard.py and counted by
``bench/reliability.py changes``. A Parquet file changed after
``parquet_source`` read its footer is a ``ValueError`` at its next read.
"""

from __future__ import annotations

import collections
import io
import os
import signal
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from exactbatch import (
    DataLoader,
    NdfError,
    TotalSizeWarning,
    kernels,
    open_ndf,
    parquet_source,
    save_ndf,
)
from exactbatch.ndf import HEADER_SIZE

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

HEADER = struct.Struct("<4sQQQ")

#: outcomes of the cases checked in this process (the long run prints them)
OUTCOMES: collections.Counter = collections.Counter()

FUZZ = settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


# -- .ndf ---------------------------------------------------------------------------


def valid_ndf(n: int, d: int, l: int, seed: int) -> bytes:  # noqa: E741
    """A valid file of n rows (random bits: NaNs and infinities included)."""
    rng = np.random.default_rng(seed)
    bits = rng.integers(0, 2**64, size=n * (d + l), dtype=np.uint64, endpoint=False)
    return HEADER.pack(b"NDF1", n, d, l) + bits.astype("<u8").tobytes()


BIG_VALUES = [2**31, 2**32, 2**32 + 1, 2**53, 2**60, 2**61, 2**62, 2**63 - 1, 2**63, 2**64 - 1]

field_values = st.one_of(st.integers(0, 64), st.sampled_from(BIG_VALUES), st.integers(0, 2**64 - 1))

ndf_mutations = st.one_of(
    st.tuples(st.just("field"), st.integers(0, 2), field_values),  # set n, d or l
    st.tuples(st.just("header_byte"), st.integers(0, HEADER_SIZE - 1), st.integers(0, 255)),
    st.tuples(st.just("byte"), st.integers(0, 2**20), st.integers(0, 255)),
    st.tuples(st.just("cut"), st.integers(0, 2**20)),  # keep this many bytes (mod len+1)
    st.tuples(st.just("grow"), st.binary(min_size=1, max_size=64)),
    st.tuples(st.just("fit"), st.binary(min_size=0, max_size=8)),  # size to the header
)


def mutate_ndf(data: bytes, mutations) -> bytes:
    """Apply ``mutations`` (from :data:`ndf_mutations`) in order."""
    b = bytearray(data)
    for m in mutations:
        kind = m[0]
        if kind == "field" and len(b) >= HEADER_SIZE:
            struct.pack_into("<Q", b, 4 + 8 * m[1], m[2])
        elif kind == "header_byte" and len(b) > m[1]:
            b[m[1]] = m[2]
        elif kind == "byte" and b:
            b[m[1] % len(b)] = m[2]
        elif kind == "cut":
            del b[m[1] % (len(b) + 1) :]
        elif kind == "grow":
            b += m[1]
        elif kind == "fit" and len(b) >= HEADER_SIZE:
            _, n, d, l = HEADER.unpack_from(b)  # noqa: E741
            want = HEADER_SIZE + 8 * n * (d + l)
            if want <= len(b) + (1 << 16):  # pad (with a repeated junk pattern) or cut
                pad = (m[1] or b"\x7f") * (want - len(b))
                b = b[:want] + pad[: max(0, want - len(b))]
    return bytes(b)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint64)


def check_ndf_bytes(path, data: bytes, rng: np.random.Generator) -> str:
    """Write ``data`` to ``path`` and check it is refused clearly or read exactly.

    Returns "error" or "read"; anything else is an AssertionError (or the
    unexpected exception itself).
    """
    path = os.fspath(path)
    with open(path, "wb") as fh:
        fh.write(data)
    try:
        f = open_ndf(path)
    except NdfError as e:
        assert path in str(e), f"the error does not name the file: {e}"
        return "error"
    with f:
        assert len(data) >= HEADER_SIZE, "a file shorter than a header was accepted"
        magic, n, d, l = HEADER.unpack_from(data)  # noqa: E741
        assert magic == b"NDF1"
        assert (f.n, f.d, f.l) == (n, d, l)
        w = d + l
        assert len(data) == HEADER_SIZE + 8 * n * w, "a file of the wrong size was accepted"
        held = np.frombuffer(data, dtype="<u8", offset=HEADER_SIZE).reshape(n, w) if n * w else None
        # indices: the ends, a random sample, and (small n) a shuffled full pass,
        # so that single rows, runs (positional reads) and scattered rows (the map) are read
        picks = [np.array([0, n - 1, n // 2], dtype=np.int64)] if n else []
        if n:
            picks.append(rng.integers(0, min(n, 2**62), size=40, dtype=np.int64))
        if n <= 5000:
            picks.append(rng.permutation(n))
            picks.append(np.arange(n))
        for idx in picks:
            xs, ys = f.read_rows(idx)
            assert xs.shape == (len(idx), d) and ys.shape == (len(idx), l)
            if held is not None:
                np.testing.assert_array_equal(_bits(xs), held[idx, :d])
                np.testing.assert_array_equal(_bits(ys), held[idx, d:])
        with pytest.raises(IndexError):
            f.read_row(n)
        # a loader over it: file order for a few batches, then (small n) a shuffled epoch
        head = DataLoader(f, batch_size=7, shuffle=False)
        for k, (xb, yb) in zip(range(3), head, strict=False):
            rows = np.arange(7 * k, 7 * k + len(xb))
            if held is not None:
                np.testing.assert_array_equal(_bits(xb), held[rows, :d])
                np.testing.assert_array_equal(_bits(yb), held[rows, d:])
        if n <= 5000:
            loader = DataLoader(f, batch_size=7, shuffle=True, seed=int(rng.integers(1000)))
            got = [np.hstack([xb, yb]) for xb, yb in loader]
            assert sum(len(g) for g in got) == n
            if held is not None:
                got_bits = _bits(np.concatenate(got))
                order = np.lexsort(got_bits.T[::-1])
                want = held[np.lexsort(held.T[::-1])]
                np.testing.assert_array_equal(got_bits[order], want)  # the same multiset
    return "read"


@st.composite
def ndf_cases(draw):
    n, d, l = draw(st.integers(0, 40)), draw(st.integers(0, 4)), draw(st.integers(0, 3))  # noqa: E741
    seed = draw(st.integers(0, 2**32 - 1))
    mutations = draw(st.lists(ndf_mutations, min_size=1, max_size=4))
    return mutate_ndf(valid_ndf(n, d, l, seed), mutations), seed


@FUZZ
@given(case=ndf_cases())
def test_fuzzed_ndf_file_is_a_clear_error_or_reads_exactly(tmp_path, case):
    data, seed = case
    out = check_ndf_bytes(tmp_path / "fuzz.ndf", data, np.random.default_rng(seed))
    OUTCOMES["ndf " + out] += 1


@pytest.mark.parametrize(
    "n, d, l",
    [
        (2**40, 2, 1),
        (2**61, 1, 0),
        (2**63 - 1, 1, 1),
        (2**64 - 1, 2**64 - 1, 2**64 - 1),
        (3, 2**62, 0),
    ],
)
def test_giant_header_is_an_ndf_error_without_allocating(tmp_path, n, d, l):  # noqa: E741
    """A header claiming petabytes is refused by size, before anything is allocated."""
    path = tmp_path / "giant.ndf"
    path.write_bytes(HEADER.pack(b"NDF1", n, d, l) + b"\0" * 800)
    tracemalloc.start()
    try:
        with pytest.raises(NdfError) as info:
            open_ndf(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert os.fspath(path) in str(info.value)
    assert peak < 1 << 20, f"opening a bad file allocated {peak} bytes"


def test_zero_width_file_with_a_giant_row_count_reads_as_empty_rows(tmp_path):
    """n = 2**62 rows of no values is a valid 28-byte file: it reads (empty rows), in file
    order and shuffled - the epoch's order must not allocate anything of n entries."""
    path = tmp_path / "wide-open.ndf"
    path.write_bytes(HEADER.pack(b"NDF1", 2**62, 0, 0))
    assert check_ndf_bytes(path, path.read_bytes(), np.random.default_rng(0)) == "read"
    with open_ndf(path) as f:
        loader = DataLoader(f, batch_size=4, shuffle=True, prefetch=0)
        assert len(loader) == 2**60
        xb, yb = next(iter(loader))
        assert xb.shape == (4, 0) and yb.shape == (4, 0)
        assert loader.state_dict()["batches_done"] == 1


def test_missing_ndf_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_ndf(tmp_path / "nope.ndf")


# -- Parquet ------------------------------------------------------------------------

PQ_ROWS, PQ_GROUP = 120, 40
_PQ_BASE: dict = {}


def parquet_base() -> tuple[bytes, np.ndarray]:
    """A valid Parquet file (3 row groups; float64, int32, float32 and bool columns)
    and its rows as float64 (a, b, c, then the label)."""
    if not _PQ_BASE:
        rng = np.random.default_rng(7)
        a = rng.standard_normal(PQ_ROWS)
        b = rng.integers(-1000, 1000, PQ_ROWS).astype(np.int32)
        c = rng.standard_normal(PQ_ROWS).astype(np.float32)
        lbl = rng.random(PQ_ROWS) < 0.5
        table = pa.table({"a": a, "b": b, "c": c, "lbl": lbl})
        buf = io.BytesIO()
        pq.write_table(table, buf, row_group_size=PQ_GROUP)
        rows = np.column_stack([a, b.astype(np.float64), c.astype(np.float64), lbl.astype(float)])
        _PQ_BASE["v"] = (buf.getvalue(), rows)
    return _PQ_BASE["v"]


pq_mutations = st.one_of(
    st.tuples(st.just("cut_tail"), st.integers(1, 700)),  # drop this many bytes from the end
    st.tuples(st.just("cut"), st.integers(0, 2**20)),  # keep this many bytes (mod len)
    st.tuples(st.just("tail_byte"), st.integers(1, 700), st.integers(0, 255)),
    st.tuples(st.just("footer_len"), st.integers(0, 2**32 - 1)),
    st.tuples(st.just("byte"), st.integers(0, 2**20), st.integers(0, 255)),
)


def mutate_parquet(data: bytes, mutations) -> bytes:
    b = bytearray(data)
    for m in mutations:
        kind = m[0]
        if kind == "cut_tail":
            del b[max(0, len(b) - m[1]) :]
        elif kind == "cut" and b:
            del b[m[1] % len(b) :]
        elif kind == "tail_byte" and b:
            b[max(0, len(b) - m[1])] = m[2]
        elif kind == "footer_len" and len(b) >= 8:
            struct.pack_into("<I", b, len(b) - 8, m[1])
        elif kind == "byte" and b:
            b[m[1] % len(b)] = m[2]
    return bytes(b)


def _row_set(rows: np.ndarray) -> np.ndarray:
    """Rows as bit patterns, sorted: equal multisets compare equal (NaNs too)."""
    bits = _bits(np.ascontiguousarray(rows, dtype=np.float64))
    if len(bits) == 0:
        return bits.reshape(0, rows.shape[1])
    return bits[np.lexsort(bits.T[::-1])]


def _oracle(path, names) -> np.ndarray | None:
    """The rows pyarrow reads from the file (float64, nulls as NaN), or None if it cannot."""
    try:
        table = pq.ParquetFile(path).read(columns=list(names))
        cols = []
        for name in names:
            col = table.column(name)
            cols.append(col.cast("float64").to_numpy() if col.null_count else col.to_numpy())
        return np.column_stack([np.asarray(c, dtype=np.float64) for c in cols])
    except Exception:
        return None


def check_parquet_bytes(path, data: bytes, original: np.ndarray, shuffle: bool) -> str:
    """Write ``data`` to ``path``; parquet_source + a loader must fail clearly or read right."""
    path = os.fspath(path)
    with open(path, "wb") as fh:
        fh.write(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", TotalSizeWarning)  # a wrong N is a failure here
            src = parquet_source(path, labels=["lbl"])
            loader = DataLoader(src, batch_size=17, shuffle=shuffle, buffer_size=50, seed=1)
            got = [np.hstack([xb, yb]) for xb, yb in loader]
    except TotalSizeWarning as w:
        raise AssertionError(f"N disagrees with the rows handed out: {w}") from w
    except ValueError as e:  # pyarrow's ArrowInvalid is one too, but must name the file
        assert path in str(e), f"the error does not name the file: {type(e).__name__}: {e}"
        return "error"
    rows = np.concatenate(got) if got else np.empty((0, 4))
    assert rows.shape[1] == 4
    assert loader.total_size == len(rows), (loader.total_size, len(rows))
    mine = _row_set(rows)
    if mine.shape == original.shape and np.array_equal(mine, _row_set(original)):
        return "read"  # exactly the rows written
    # the file as pyarrow reads it, under the column names the source took from it (with
    # features=None a footer byte can rename a feature; the source reads it as renamed)
    held = _oracle(path, [*src.features, *src.labels])
    assert held is not None, "rows were read from a file that pyarrow cannot read"
    assert np.array_equal(mine, _row_set(held)), "rows handed out that the file does not hold"
    return "read"


@st.composite
def parquet_cases(draw):
    mutations = draw(st.lists(pq_mutations, min_size=1, max_size=3))
    return mutations, draw(st.booleans())


@FUZZ
@given(case=parquet_cases())
# found by the long run: a footer byte that makes pyarrow raise ArrowNotImplementedError
# (not a ValueError) while opening; and a footer byte that renames a column
@example(case=([("tail_byte", 139, 66)], False))
@example(case=([("byte", 25, 0), ("byte", 12336, 0)], False))
def test_fuzzed_parquet_file_is_a_clear_error_or_reads_right(tmp_path, case):
    mutations, shuffle = case
    data, rows = parquet_base()
    out = check_parquet_bytes(
        tmp_path / "fuzz.parquet", mutate_parquet(data, mutations), rows, shuffle
    )
    OUTCOMES["parquet " + out] += 1


@pytest.mark.parametrize("keep", [0, 3, 4, 8, 12, "half", -1, -4, -5, -8, -9, -40, -200])
def test_truncated_parquet_is_a_value_error_naming_the_file(tmp_path, keep):
    """Cut anywhere - above all in the footer (its length, the closing magic) - is a ValueError."""
    data, rows = parquet_base()
    cut = len(data) // 2 if keep == "half" else keep % len(data)
    path = tmp_path / "cut.parquet"
    path.write_bytes(data[:cut])
    with pytest.raises(ValueError) as info:
        parquet_source(path, labels=["lbl"])
    assert os.fspath(path) in str(info.value)


def test_parquet_footer_row_counts_that_do_not_add_up_are_a_value_error(tmp_path):
    """A footer whose row-group counts disagree with its total (here: one made negative)
    is refused; before, the group was skipped and N was wrong (rows silently lost)."""
    data, _ = parquet_base()
    meta = pq.ParquetFile(io.BytesIO(data)).metadata
    assert [meta.row_group(g).num_rows for g in range(3)] == [PQ_GROUP] * 3
    # Thrift compact encoding: num_rows of a row group is a zigzag varint; 40 -> 0x50.
    # Find the RowGroup num_rows fields (field 3, type i64: header byte 0x16) in the footer.
    footer_len = struct.unpack_from("<I", data, len(data) - 8)[0]
    start = len(data) - 8 - footer_len
    footer = data[start:-8]
    spots = [i for i in range(len(footer) - 1) if footer[i : i + 2] == b"\x16\x50"]
    assert spots, "no row-group num_rows field found to corrupt"
    for value in (b"\x4f", b"\x4e"):  # zigzag varints: -40, 39
        b = bytearray(data)
        b[start + spots[-1] + 1] = value[0]
        path = tmp_path / "counts.parquet"
        path.write_bytes(bytes(b))
        with pytest.raises(ValueError) as info:
            parquet_source(path, labels=["lbl"])
        assert os.fspath(path) in str(info.value) and "footer" in str(info.value)


# Second-file schemas: (name, table builder, expected: "ok" or a word of the error)
def _schema_variants():
    n = 30
    rng = np.random.default_rng(3)
    a, b, c = rng.standard_normal(n), rng.integers(0, 9, n).astype(np.int64), rng.standard_normal(n)
    lbl = rng.random(n) < 0.5
    good = {"a": a, "b": b, "c": c, "lbl": lbl}

    def t(**over):
        cols = dict(good)
        for k, v in over.items():
            if v is None:
                cols.pop(k)
            else:
                cols[k] = v
        return pa.table(cols)

    strings = pa.array([str(v) for v in range(n)])
    return [
        ("same", lambda: t(), "ok"),
        ("reordered", lambda: pa.table({"lbl": lbl, "c": c, "a": a, "b": b}), "ok"),
        ("extra column", lambda: t(zz=strings), "ok"),
        ("int instead of float", lambda: t(a=np.arange(n)), "ok"),
        ("float32", lambda: t(c=c.astype(np.float32)), "ok"),
        ("nulls", lambda: t(a=pa.array([None if i % 3 == 0 else 1.5 for i in range(n)])), "ok"),
        ("missing feature", lambda: t(b=None), "missing"),
        ("missing label", lambda: t(lbl=None), "missing"),
        ("renamed", lambda: pa.table({"A": a, "b": b, "c": c, "lbl": lbl}), "missing"),
        ("string feature", lambda: t(b=strings), "non-numeric"),
        ("binary label", lambda: t(lbl=pa.array([b"x"] * n)), "non-numeric"),
        ("list feature", lambda: t(c=pa.array([[1.0]] * n)), "non-numeric"),
        ("struct feature", lambda: t(c=pa.array([{"q": 1.0}] * n)), "non-numeric"),
        ("timestamp", lambda: t(a=pa.array(np.arange(n)).cast(pa.timestamp("s"))), "non-numeric"),
        ("decimal", lambda: t(a=pa.array(np.arange(n)).cast(pa.decimal128(25, 2))), "non-numeric"),
        ("null type", lambda: t(a=pa.array([None] * n)), "non-numeric"),
        ("dictionary strings", lambda: t(b=strings.dictionary_encode()), "non-numeric"),
        (
            "duplicate column",
            lambda: pa.Table.from_arrays([a, a, b, c, lbl], names=["a", "a", "b", "c", "lbl"]),
            "more than once",
        ),
    ], good


@pytest.mark.parametrize("variant", range(len(_schema_variants()[0])))
def test_second_file_with_a_wrong_schema_is_a_value_error_naming_it(tmp_path, variant):
    """Two files; the second's schema varies. A bad one is refused naming that file and the
    problem; a good one (even reordered) yields its own rows under the frozen column names."""
    variants, good = _schema_variants()
    name, build, expected = variants[variant]
    first, second = tmp_path / "part-0.parquet", tmp_path / "part-1.parquet"
    pq.write_table(pa.table(good), first)
    pq.write_table(build(), second)
    if expected != "ok":
        with pytest.raises(ValueError) as info:
            parquet_source(tmp_path, features=["a", "b", "c"], labels=["lbl"])
        msg = str(info.value)
        assert os.fspath(second) in msg and expected in msg, msg
        return
    src = parquet_source(tmp_path, features=["a", "b", "c"], labels=["lbl"])
    table = pq.read_table(second)
    xb, yb = src.read_chunk(1)
    for j, col in enumerate(("a", "b", "c")):
        want = table.column(col).cast("float64").to_numpy(zero_copy_only=False)
        np.testing.assert_array_equal(xb[:, j], want)
    np.testing.assert_array_equal(yb[:, 0], table.column("lbl").cast("float64").to_numpy())
    assert len(list(DataLoader(src, batch_size=7))) == len(DataLoader(src, batch_size=7))


@pytest.mark.parametrize("how", ["truncate", "replace", "rewrite", "rewrite-keep-mtime", "delete"])
def test_parquet_file_changed_after_construction_is_a_clear_error(tmp_path, how):
    """The source keeps each footer; a file changed afterwards is refused at its next read
    (a replaced file with the same layout would otherwise be read through the old footer)."""
    data, rows = parquet_base()
    path = tmp_path / "p.parquet"
    path.write_bytes(data)
    src = parquet_source(path, labels=["lbl"])
    xb, _ = src.read_chunk(0)
    np.testing.assert_array_equal(xb, rows[:PQ_GROUP, :3])
    if how == "truncate":
        os.truncate(path, len(data) - 10)
    elif how == "replace":  # same layout, other values: a rename over the path
        other = tmp_path / "other.parquet"
        table = pq.read_table(path)
        pq.write_table(
            table.set_column(0, "a", pa.array(-rows[:, 0])), other, row_group_size=PQ_GROUP
        )
        os.replace(other, path)
    elif how == "rewrite":  # the same bytes written again in place: only the mtime differs
        st = os.stat(path)
        path.write_bytes(data)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    elif how == "rewrite-keep-mtime":  # other bytes, its mtime put back: only ctime differs
        # (imported here: bench/reliability.py imports this module without tests/ on its path)
        from helpers import rewrite_in_place, until_ctime_moves

        opened = os.stat(path).st_ctime_ns
        until_ctime_moves(path, opened, lambda: rewrite_in_place(path, offset=len(data) // 2))
    else:
        os.unlink(path)
    if how == "delete":
        with pytest.raises(FileNotFoundError):
            src.read_chunk(1)
        return
    with pytest.raises(ValueError) as info:
        src.read_chunk(1)
    assert os.fspath(path) in str(info.value)


def test_missing_parquet_file_is_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        parquet_source(tmp_path / "nope.parquet")
    with pytest.raises(FileNotFoundError):
        parquet_source([tmp_path / "nope.parquet"])


# -- 3. the file changes underneath a loader ------------------------------------------

# A loader reads 5 batches, then the file is changed; what must happen next. Run in a
# child process so that a crash (SIGBUS from a truncated mapping) is seen as an exit code.
CHANGED = textwrap.dedent(
    """
    import os, sys, time
    import numpy as np
    from exactbatch import DataLoader, NdfError, open_ndf, save_ndf
    path, how, shuffle, via = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4]
    prefetch = int(sys.argv[6])
    f = open_ndf(path)
    n = f.n
    loader = DataLoader(f, batch_size=100, shuffle=shuffle, seed=3, prefetch=prefetch)
    f.close()  # the loader holds its own share
    bx, by = np.empty((100, 2)), np.empty((100, 1))

    def batch():
        if via == "iter":
            return next(it)
        rows = loader.next_into(bx, by)
        if rows == 0:
            raise StopIteration
        return bx[:rows], by[:rows]

    def check(xb, yb):  # the rows of the file as written: x = (i, 3i + 1/2), y = -i
        i = xb[:, 0]
        assert np.array_equal(xb[:, 1], 3 * i + 0.5) and np.array_equal(yb[:, 0], -i), "garbage"
        return i.astype(np.int64)

    it = iter(loader) if via == "iter" else None
    seen = [check(*batch()) for _ in range(5)]
    deadline = time.monotonic() + 60
    while prefetch and not it._prefetcher.full():  # the prefetch thread's queue
        assert time.monotonic() < deadline  # full, so the good batches below are known
        time.sleep(0.001)
    # batches read ahead in a group (small batches, no prefetch), handed out first
    ahead = sum(len(g.queue) for g in (it._current, *it._ahead)) if it is not None else 0
    if how == "truncate":
        os.truncate(path, int(sys.argv[5]))
    elif how == "rewrite":  # same size, other bytes, written in place
        with open(path, "r+b") as g:
            g.seek(28)
            g.write(np.full(2000, 7.0).tobytes())
    elif how == "replace":  # save_ndf renames a new file over the path
        save_ndf(path, np.full((10, 2), 9.0))
    elif how == "delete":
        os.unlink(path)
    if how in ("truncate", "rewrite"):
        # The next batch read is a clear error; batches prefetched (or read ahead in a
        # group) before the change are handed out first, and they are the file's old
        # rows. (At most prefetch + 1 groups: the prefetch thread holds one more group
        # while it waits for room in its queue.)
        good = 0
        while True:
            try:
                xb, yb = batch()
            except NdfError as e:
                assert path in str(e) and "changed while open" in str(e), str(e)
                break
            check(xb, yb)
            good += 1
            if good > (prefetch + (prefetch > 0)) * loader._groups[prefetch > 0] + ahead:
                sys.exit("no NdfError after the file changed")
        for _ in range(2):  # and every batch after it
            try:
                batch()
            except NdfError:
                pass
            else:
                sys.exit("a batch after the NdfError")
        print("error")
    else:  # the loader keeps reading the file it opened: the rest of this epoch and the next
        while True:
            try:
                seen.append(check(*batch()))
            except StopIteration:
                break
        rows = np.sort(np.concatenate(seen))
        assert np.array_equal(rows, np.arange(n)), "not every row exactly once"
        if via == "next_into":
            loader.reset()
        rows = np.sort(np.concatenate([check(xb, yb) for xb, yb in loader]))
        assert np.array_equal(rows, np.arange(n))
        print("old")
    """
)


# Rows enough that a prefetch thread (2 groups of up to 64 batches of 100 ahead, and one
# more in hand) cannot have read them all before the change.
TRACEABLE_ROWS = 60_000


def _traceable_ndf(path, n: int = TRACEABLE_ROWS):
    i = np.arange(n, dtype=np.float64)
    save_ndf(path, (np.column_stack([i, 3 * i + 0.5]), -i))
    os.utime(path, ns=(10**9, 10**9))  # an old mtime: any write in place changes it


CHANGES = [
    ("truncate", "0"),
    ("truncate", "28"),
    ("truncate", str(28 + 24 * (TRACEABLE_ROWS // 2))),  # half the rows
    ("truncate", str(28 + 24 * TRACEABLE_ROWS - 8)),  # one value short
    ("rewrite", ""),
    ("replace", ""),
    ("delete", ""),
]


@pytest.mark.parametrize(
    "via, prefetch",
    [("iter", 0), ("iter", 2), ("next_into", 0)],
    ids=["iter", "iter-prefetch2", "next_into"],
)
@pytest.mark.parametrize("shuffle", [True, False], ids=["scattered-map", "runs-pread"])
@pytest.mark.parametrize("how, arg", CHANGES, ids=[f"{h}{a}" for h, a in CHANGES])
def test_file_changed_mid_epoch_is_a_clear_error_or_keeps_the_opened_file(
    tmp_path, how, arg, shuffle, via, prefetch
):
    """Truncated or rewritten in place: NdfError at the next batch read (the size, mtime
    and ctime are checked at every read; with prefetch, the batches read before the change come
    first, and they are right), never garbage and never a SIGBUS. Replaced (a rename) or
    deleted: the loader keeps reading the file it opened, every row exactly once."""
    path = tmp_path / "moving.ndf"
    _traceable_ndf(path)
    args = [os.fspath(path), how, str(int(shuffle)), via, arg or "0", str(prefetch)]
    proc = subprocess.run(
        [sys.executable, "-c", CHANGED, *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode != -signal.SIGBUS, "the reader was killed by SIGBUS"
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
    assert proc.stdout.strip() == ("error" if how in ("truncate", "rewrite") else "old")


# One child: truncations during copies, in a loop. A reader thread copies batches (the
# compiled gather releases the GIL) while the main thread truncates the file at a random
# instant; the reader's NdfError says whether the fault guard caught it inside a copy
# (FileChanged "faulted") or the size check after the copy did. With "faulthandler",
# faulthandler's SIGBUS handler is installed after each open (disable, then enable:
# enable alone does nothing when it is on), displacing the guard the open installed.
GUARD_LOOP = textwrap.dedent(
    """
    import faulthandler, os, shutil, sys, threading, time
    import numpy as np
    from exactbatch import NdfError, backend, open_ndf
    pristine, live, trials, batch = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    after_open = sys.argv[6]
    assert backend() == "compiled", backend()
    rng = np.random.default_rng(int(sys.argv[5]))
    size = os.path.getsize(pristine)
    for _ in range(trials):
        shutil.copyfile(pristine, live)
        f = open_ndf(live)
        if after_open == "faulthandler":
            faulthandler.disable()
            faulthandler.enable()
        read, n, d, l = f.rows_reader(), f.n, f.d, f.l
        out_x, out_y, seen = np.empty((batch, d)), np.empty((batch, l)), []
        started = threading.Event()

        def reader():
            r = np.random.default_rng(1)
            try:
                while True:
                    read(r.integers(0, n, batch), out_x, out_y)
                    started.set()
            except NdfError as e:
                caught = "faulted" in str(e.__context__ or "")
                seen.append("guard" if caught else "check")

        t = threading.Thread(target=reader)
        t.start()
        started.wait()
        time.sleep(float(rng.uniform(0, 0.002)))
        os.truncate(live, int(rng.integers(28, size)))
        t.join()
        f.close()
        print(seen[0], flush=True)
    """
)


@pytest.mark.skipif(kernels.backend() != "compiled", reason="the compiled core is not in use")
def test_truncations_during_copies_with_faulthandler_enabled_after_open_are_ndf_errors(tmp_path):
    """The fast slice of ``bench/reliability.py guard``: a thread copies shuffled batches
    while the file is truncated at a random instant, faulthandler's handler installed
    after each open (displacing the fault guard, which puts itself back at the next
    read): each truncation is an NdfError, never a crash ("Fatal Python error: Bus
    error" before the guard was put back)."""
    pristine, live = tmp_path / "pristine.ndf", tmp_path / "live.ndf"
    rng = np.random.default_rng(5)
    save_ndf(pristine, (rng.standard_normal((5000, 16)), rng.standard_normal(5000)))
    trials = 6
    args = [pristine, live, str(trials), "1024", "0", "faulthandler"]
    p = subprocess.run(
        [sys.executable, "-c", GUARD_LOOP, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "EXACTBATCH_PURE": "0"},
    )
    assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
    assert len(p.stdout.split()) == trials and set(p.stdout.split()) <= {"guard", "check"}
