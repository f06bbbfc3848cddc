"""One law matrix: the loader's laws (tests/laws.py) over every combination of options.

DESIGN.md, "Exactness across every combination": the laws hold for every
combination of source kind, shuffle, drop_last, shards, even_batches,
elastic, prefetch, threads, resume and faults, not only for each alone.

The product (before the subsets below):

    source kind  dataset, array (l=0), pair, tensor, dataframe (array-likes),
                 ndf, s3 (an .ndf URL on the local S3
                 server), sharded (a local sharded dataset of uneven parts,
                 an empty one among them), list of chunks, factory,
                 parquet, ndf_blocks, sharded_blocks (ndf_blocks of the
                 sharded dataset); rows_double and chunks_double, a new
                 kind each known to exactbatch only through its protocol
                 (RowSource; ChunkSource with no optional hook:
                 tests/doubles.py); the Arrow-native kinds arrow_file (an
                 IPC file of record batches, an empty one among them),
                 arrow_table, polars (a DataFrame), hf (a Dataset read
                 through an index mapping), and the streams arrow_stream (a
                 RecordBatchReader factory), lazyframe and duckdb
    shuffle      False, True
    drop_last    False, True
    shards       1, 2, 3
    prefetch     0, 2 (with prefetch, iter() or iter() reading ahead with peek())
    mode         plain, even_batches, elastic, elastic + even_batches
                 (elastic: random access only); pad and elastic_pad
                 (even_batches="pad": without drop_last and threads, and
                 iter() for next_into, which refuses it; every batch is
                 checked full, its mask a prefix, padding zeros with ids -1,
                 and the laws run over its real rows, a padding batch an
                 empty one: equal counts on every shard, every row once)
    threads      1, 4 (4 threads calling next_into on one loader)
    gather       DataLoader(threads=) None, 1, 3 (the threads splitting one batch's
                 gather), by the hash; the fresh loader of the determinism law
                 gathers on 1 or 2; and test_gather_threads_give_the_same_bytes:
                 batches bit-identical for 1, 2, 3 and 7 threads, every random-
                 access kind, float64 and float32, with and without a transform
    with_rows    False, True: by the hash, half the cases (each kind both ways in
                 every mode, way, shard count, shuffle and drop_last): every
                 batch's row ids (the third element, or next_into's brows)
                 must be exactly its rows' (column 0 of the traceable rows)
    read depth   1, 2, 3 by the hash: the chunks a chunk-indexed stream (parquet,
                 ndf_blocks, sharded_blocks, chunks_double) reads ahead at once,
                 on as many threads (sources/passes.py read_depth)
    rows         the whole source, or (random access, on a stride) a subset:
                 ``rows=`` ids of a source 19 rows larger, scattered and
                 unsorted; the laws then hold over the subset's positions
                 (laws.subset_positions), the rows handed out being the
                 source's ids
    columns      every column of the source, or (on a stride, every kind)
                 DataLoader(features=, labels=) choosing the traceable
                 columns of a source holding one more feature and one more
                 label (by name where the kind has names, else by position):
                 the laws hold over the selection, a state resumes under it
    categorical  plain, or (4 cases of each of parquet, arrow_table,
                 arrow_stream and polars, drawn by the hash, and 1 resume
                 case each) ``categorical=``: the id column x0 held as
                 strings (helpers.coded_ids) and coded back to the ids by a
                 vocabulary learned or given (the Arrow kinds' strings plain
                 or dictionary-encoded, Parquet's read as dictionaries), so
                 that every row is traced through its code

Every case draws its sizes from a fixed hash of its name: n in 23..61 rows
(odd sizes), batch_size 4, 5 or 7, chunk sizes from several patterns (empty
chunks included), a stream buffer of 6..13 rows and ndf_blocks blocks of
3..8 rows, so that buffers mix and batches straddle chunks. The ways a case
takes its batches: 4 threads; else ``iter()`` with prefetch 2 (for half of
those cases, by the hash, reading 3 batches ahead with ``peek()`` before
each ``next()``: the state counts only the batches handed out, and
``next()`` hands out the batch peeked); else ``next_into``. A shuffled epoch's
batches are sliced from its whole keyed order (computed at once at these
sizes) or, for half of the cases by the hash, map blocks of positions and
never use it (``random_access._WHOLE_ROWS`` 0, as past 2**24 rows).

Size: 3,346 cases, 5,316 with ``EXACTBATCH_LAWS=all`` (``pytest --co``, on 2026-12-07);
about 100 s of CPU (``/usr/bin/time pytest -n 0 tests/test_law_matrix.py``).

* ``test_epoch_laws`` (3,302 with ``EXACTBATCH_LAWS=all``, 1,332 by default; 563
  over a subset, 65 over a column selection, 16 over a categorical column): the
  whole product (3,360 allowed
  combinations), less the s3 cases off a stride of 12 (each is network
  round trips; the subset, columns and pure-path axes draw from its stride
  of 4) and the sharded and sharded_blocks cases off a stride of 3
  (their reads are an .ndf file's, part by part: tests/ndf/test_ndf_dataset.py
  covers the splitting), and the doubles and the Arrow kinds off a stride
  of 4. Two epochs of every shard: the epoch law, determinism (a fresh loader's
  ``set_epoch(1)``, without prefetch) and epochs differ. By default (since
  2026-12-07) the plain cases of it are cut to their 4-way covering
  (``covering``: 649 of 2,619, every combination of values of any four of
  the seven axes - each kind in every mode at every shard count, shuffled
  and not, say - held by some case); ``EXACTBATCH_LAWS=all`` runs them all.
  The subset, columns, categorical, ranges, pure-path and resume cases are
  drawn as before, from the whole product.
* ``test_epoch_laws_on_the_pure_path`` (332): the same on a stride of 16 of
  those cases on the pure NumPy path, half of them in float32; run again
  under ``EXACTBATCH_PURE=1`` by ``tests/test_backends.py``;
  ``test_epoch_laws_in_float32_on_this_backend`` (1): a few more in float32.
* ``test_resume_at_every_batch`` (405): the single-thread cases on a stride
  of 5 (s3, sharded, sharded_blocks, the doubles and the Arrow kinds on a
  stride of 15; under contiguous "pad", shard 0, the one padded), every kind and
  mode among them; the last shard cut at every batch of epoch 0 or 1; and
  50 of the random-access ones again over a subset (rows=), 26 over a
  column selection (features=, labels=), and 4 over a categorical column.
* ``test_resume_in_a_fresh_process`` (5).
* ``test_read_error_once_*`` (354): every kind that can fail to read (the
  Arrow streams fail as the factory does, and are left to it) x
  shuffle x (iter, iter + prefetch 2, peek, peek + prefetch 2, next_into);
  and threads.
* ``test_changed_setting_*``: every kind x every setting that fixes the
  order or the source's shape, the seed among them (a stream not read yet
  reads its first chunk at load to learn its widths).
* ``test_ledger_*`` (18): the epoch ledger.
"""

from __future__ import annotations

import itertools
import os
import zlib
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np
import pytest
from helpers import (
    coded_ids,
    collect,
    make_x,
    make_y,
    next_into_ids,
    write_ndf_dataset,
    write_parquet,
)
from laws import (
    ARROW_KINDS,
    ARROW_STREAM_KINDS,
    DOUBLE_KINDS,
    ELASTIC_KINDS,
    INDEXED_STREAM_KINDS,
    RANDOM_ACCESS_KINDS,
    STREAM_KINDS,
    FlakyChunks,
    FlakyReader,
    arrow_table_of,
    check_abandoned_iterator,
    check_certified,
    check_close,
    check_deterministic,
    check_epoch,
    check_epochs_differ,
    check_errors_near_the_end,
    check_lineage,
    check_reset_seed,
    check_reshard,
    check_reshard_ranges,
    check_resume,
    check_resume_in_process,
    check_retry,
    check_same_bytes,
    check_shared_iterator,
    check_state_mid_read,
    check_stats_counts,
    drain,
    loader_from_spec,
    roundtrip,
    run_threads,
    subset_positions,
    wrap_reader,
)

import exactbatch
from exactbatch import save_ndf
from exactbatch.feeds import random_access, streamed
from exactbatch.loader import compaction

# Array-likes (a CPU torch tensor, a pandas DataFrame) become random-access
# sources in the second round; switch their cases on when that lands.
ARRAY_LIKE_KINDS = ("tensor", "dataframe")
MODES = ("plain", "even", "elastic", "elastic_even")
# even_batches="pad" (iter() only, never with drop_last): its cases come after the others
# in ALL, so the strides below pick the cases they always did.
PAD_MODES = ("pad", "elastic_pad")
# elastic="ranges" (contiguous shares of each segment, the rest re-dealt at a resume): not
# in the product, but a stride of the elastic cases re-run in it (RANGES_CASES), a few
# per law, so the suite's time hardly moves.
RANGES_MODES = {"elastic": "ranges", "elastic_even": "ranges_even", "elastic_pad": "ranges_pad"}
# The protocol doubles, then the Arrow kinds, last, so the other kinds' strides below
# pick the cases they always did.
LATE = DOUBLE_KINDS + ARROW_KINDS
KINDS = tuple(k for k in RANDOM_ACCESS_KINDS + STREAM_KINDS if k not in LATE) + LATE

NS = (23, 29, 37, 41, 47, 53, 61)
BATCHES = (4, 5, 7)
BUFFERS = (6, 9, 13)
READ_DEPTHS = (1, 2, 3)  # chunks a chunk-indexed stream reads ahead at once
CHUNK_KINDS = ("parquet", "ndf_blocks", "sharded_blocks", "chunks_double")
BLOCKS = (3, 6, 8)
CHUNK_PATTERNS = ((5, 0, 9, 3, 11), (7,), (1, 4, 13, 2), (6, 6, 0, 10))
GATHER_THREADS = (None, 1, 3)  # DataLoader(threads=): None picks from the bytes
LABELS = {"array": 0, "tensor": 0, "dataframe": 0, "list": 0, "dataset": 2, "s3": 2, "factory": 2}


@dataclass(frozen=True)
class Case:
    kind: str
    shuffle: bool
    drop_last: bool
    shards: int
    prefetch: int
    mode: str
    threads: int
    subset: bool = False  # rows=: a subset of a larger source
    columns: bool = False  # features=/labels=: the loader's columns of a wider source
    coded: bool = False  # categorical=: the id column held as strings, coded by a vocabulary

    def __str__(self) -> str:
        return (
            f"{self.kind}-{'shuf' if self.shuffle else 'seq'}"
            f"-{'drop' if self.drop_last else 'keep'}-S{self.shards}-pf{self.prefetch}"
            f"-{self.mode}-t{self.threads}"
            + ("-rows" if self.subset else "")
            + ("-cols" if self.columns else "")
            + ("-cat" if self.coded else "")
        )

    @property
    def via(self) -> str:
        if self.threads > 1:
            return "threads"
        if self.prefetch:  # iter(), half of the cases reading ahead with peek()
            return self.pick(("iter", "peek"), "via")
        return "iter" if self.pad else "next_into"  # next_into refuses "pad"

    @property
    def pad(self) -> bool:
        return self.mode in (*PAD_MODES, "ranges_pad")

    @property
    def even(self) -> bool | str:
        """The loader's even_batches: False, True or "pad"."""
        return "pad" if self.pad else self.mode in ("even", "elastic_even", "ranges_even")

    @property
    def elastic(self) -> bool:
        """Dealt in turn (elastic=True): global batch g to shard g mod S."""
        return self.mode in ("elastic", "elastic_even", "elastic_pad")

    @property
    def ranges(self) -> bool:
        """elastic="ranges": an epoch at one shard count is contiguous shards' (the laws'
        elastic=False), a resume re-deals the rest."""
        return self.mode in RANGES_MODES.values()

    @property
    def dealing(self) -> bool | str:
        """The loader's elastic: False, True or "ranges"."""
        return "ranges" if self.ranges else self.elastic

    def pick(self, options, salt: str):
        """A fixed choice among ``options``, hashed from the case's name."""
        return options[zlib.crc32(f"{self}/{salt}".encode()) % len(options)]


def allowed(case: Case) -> bool:
    if case.pad and (case.drop_last or case.threads > 1):
        return False  # refused with drop_last; threads share a loader by next_into
    return not ((case.elastic or case.ranges) and case.kind not in ELASTIC_KINDS)


ALL = [
    c
    for modes in (MODES, PAD_MODES)
    for c in itertools.starmap(
        Case,
        itertools.product(KINDS, (False, True), (False, True), (1, 2, 3), (0, 2), modes, (1, 4)),
    )
    if allowed(c)
]


def marks_for(kind: str) -> list:
    return []


def param(case: Case):
    return pytest.param(case, id=str(case), marks=marks_for(case.kind))


# On a stride (not the whole product): s3 (network round trips each), and sharded,
# whose reads are an .ndf file's per part (its own tests cover the part splits).
# The protocol doubles (tests/doubles.py) on a stride too: their reads are NumPy's, and
# the stride still takes every mode, shard count and way.
EPOCH_STRIDE = {"s3": 4, "sharded": 3, "sharded_blocks": 3, "rows_double": 4, "chunks_double": 4}
RESUME_STRIDE = {"s3": 15, "sharded": 15, "sharded_blocks": 15}
RESUME_STRIDE.update(rows_double=15, chunks_double=15)
# The Arrow kinds on a stride too: their reads are the shared Arrow column readers
# (tests/sources/test_arrow_sources.py reads each kind's columns, chunks and nulls).
EPOCH_STRIDE.update(dict.fromkeys(ARROW_KINDS, 4))
RESUME_STRIDE.update(dict.fromkeys(ARROW_KINDS, 15))
BLOCK_KINDS = ("ndf_blocks", "sharded_blocks")
EPOCH_CASES = [c for i, c in enumerate(ALL) if i % EPOCH_STRIDE.get(c.kind, 1) == 0]
RESUME_CASES = [
    c for i, c in enumerate(ALL) if c.threads == 1 and i % RESUME_STRIDE.get(c.kind, 5) == 0
]
# The rows axis (rows=, a subset of a larger random-access source) on a stride of the
# random-access cases: every kind, mode, shard count and way among them.
SUBSET_STRIDE, SUBSET_EXTRA = 3, 19  # the source holds SUBSET_EXTRA rows beyond the subset
SUBSET_CASES = [
    replace(c, subset=True)
    for i, c in enumerate(EPOCH_CASES)
    if c.kind in RANDOM_ACCESS_KINDS and i % SUBSET_STRIDE == 1
]
RESUME_CASES += [
    replace(c, subset=True)
    for i, c in enumerate(RESUME_CASES)
    if c.kind in RANDOM_ACCESS_KINDS and i % 4 == 1
]
# The columns axis (DataLoader(features=, labels=): the loader's columns of a source
# holding one more feature and one more label, left out) on a stride: every kind.
COLUMNS_CASES = [replace(c, columns=True) for i, c in enumerate(EPOCH_CASES) if i % 41 == 3]
RESUME_CASES += [replace(c, columns=True) for i, c in enumerate(RESUME_CASES) if i % 14 == 2]
# the source kinds whose columns have names (the others' are chosen by position)
NAMED_KINDS = ("parquet", "dataframe", *ARROW_KINDS)
# The categorical axis (categorical=: the id column x0 held as strings and coded back to
# the ids by a vocabulary, learned or given; the Arrow kinds' strings plain or dictionary-
# encoded, Parquet's read as dictionaries) on a stride of the kinds that take categorical=.
CODED_KINDS = ("parquet", "arrow_table", "arrow_stream", "polars")


def _each_kind(cases, k: int) -> list:
    """``k`` cases of each coded kind, drawn from its own by a fixed hash of their names
    (a stride would fall in step with the product's order: one mode each)."""
    out = []
    for kind in CODED_KINDS:
        own = [c for c in cases if c.kind == kind and not (c.subset or c.columns)]
        own.sort(key=lambda c: zlib.crc32(f"{c}/coded".encode()))
        out += [replace(c, coded=True) for c in own[:k]]
    return out


CODED_CASES = _each_kind(ALL, 4)
RESUME_CASES += _each_kind([c for c in ALL if c.threads == 1], 1)


# The ranges axis: a stride of the elastic cases, each in its ranges mode (every kind that
# can be elastic, each mode and way among them): their epochs and resumes at one count.
# (drawn by a fixed hash of their names: a stride would fall in step with the product)
def _ranges_of(cases, every: int) -> list:
    drawn = [c for c in cases if c.elastic and zlib.crc32(f"{c}/ranges".encode()) % every == 0]
    return [replace(c, mode=RANGES_MODES[c.mode]) for c in drawn]


RANGES_CASES = _ranges_of(EPOCH_CASES, 30)
RESUME_CASES += _ranges_of([c for c in ALL if c.threads == 1], 90)


def chunk_sizes(n: int, pattern) -> list[int]:
    out, total = [], 0
    for s in itertools.cycle(pattern):
        if total >= n:
            return out
        s = min(s, n - total)
        out.append(s)
        total += s


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("laws")


@pytest.fixture
def make_spec(data_dir, request):
    """make_spec(case, **changes) -> the spec of the case's source and loader (files written)."""

    def _make(case: Case, *, n=None, d=3, l=None, seed=None, **loader_changes):  # noqa: E741
        n = case.pick(NS, "n") if n is None else n
        l = LABELS.get(case.kind, 1) if l is None else l  # noqa: E741
        spec = {"kind": case.kind, "n": n, "d": d, "l": l}
        sd, sl = d, l  # the source's widths
        if case.columns:  # one more feature, and one more label where the kind has labels
            sd, sl = d + 1, l + 1 if LABELS.get(case.kind, 1) else 0
            spec["source_d"], spec["source_l"] = sd, sl
        source_n = n + SUBSET_EXTRA if case.subset else n  # the rows the source holds
        if case.subset:
            spec["source_n"] = source_n
        if case.kind in ("list", "factory", "parquet", "chunks_double", *ARROW_KINDS):
            spec["chunks"] = chunk_sizes(source_n, case.pick(CHUNK_PATTERNS, "chunks"))
        if case.kind in ("ndf", "ndf_blocks", "s3"):
            spec["path"] = write_ndf(data_dir, source_n, sd, sl)
        if case.kind in ("sharded", "sharded_blocks"):
            sizes = chunk_sizes(source_n, case.pick(CHUNK_PATTERNS, "parts"))
            spec["path"] = write_sharded(data_dir, sizes, sd, sl)
        if case.kind in BLOCK_KINDS:
            spec["block_rows"] = case.pick(BLOCKS, "blocks")
        if case.coded:  # x0 as strings, coded back to the ids (a vocabulary learned or given)
            vocabularies = (["x0"], {"x0": coded_ids(range(source_n))})
            spec["categorical"] = case.pick(vocabularies, "vocabulary")
            spec["coded"] = case.pick(("plain", "dictionary"), "coded")
        if case.kind == "parquet":
            spec["path"] = write_parquet_folder(data_dir, spec["chunks"], sd, sl, case.coded)
        if case.kind == "arrow_file":
            spec["path"] = write_arrow_file(data_dir, source_n, sd, sl, spec["chunks"])
        if case.kind == "s3":
            s3 = request.getfixturevalue("s3_server")
            key = f"laws/{os.path.basename(spec['path'])}"
            if not s3.fs.exists(f"{s3.bucket}/{key}"):
                s3.fs.put_file(spec["path"], f"{s3.bucket}/{key}")
                s3.fs.invalidate_cache()
            spec["url"], spec["storage_options"] = f"s3://{s3.bucket}/{key}", s3.so
        spec["loader"] = {
            "batch_size": case.pick(BATCHES, "batch"),
            "shuffle": case.shuffle,
            "seed": case.pick((0, 5, 2**40 + 3), "seed") if seed is None else seed,
            "drop_last": case.drop_last,
            "num_shards": case.shards,
            "shard_index": case.shards - 1,
            "prefetch": case.prefetch,
            "even_batches": case.even,
            "elastic": case.dealing,
            # half the cases hand out row ids too, checked against the rows (helpers.ids_of);
            # the salt gives each kind both settings in every mode, way, shard count and flag
            "with_rows": case.pick((False, True), "traced"),
            # the threads gathering one batch (the compiled gather split by row ranges;
            # 3 splits even these small batches): by the hash, each kind every way
            "threads": case.pick(GATHER_THREADS, "gather"),
        }
        if case.kind in STREAM_KINDS:
            spec["loader"]["buffer_size"] = case.pick(BUFFERS, "buffer")
        if case.kind in CHUNK_KINDS:  # chunks read ahead at once, whatever the buffer's size
            depth = case.pick(READ_DEPTHS, "depth")
            request.getfixturevalue("monkeypatch").setattr(
                streamed, "read_depth", lambda *args, **kwargs: depth
            )
        if case.pick((False, True), "blocks"):  # the keyed order's two paths, by the hash:
            # batches mapping blocks of positions, never the epoch's whole order (else
            # sliced from it: computed at once at these sizes, random_access._AT_ONCE_ROWS)
            request.getfixturevalue("monkeypatch").setattr(random_access, "_WHOLE_ROWS", 0)
        if case.kind == "factory":  # a declared N; the list counts its rows ("auto")
            spec["loader"]["total_size"] = n
        if case.subset:  # scattered, unsorted ids: n of the source's source_n rows
            pick = np.random.default_rng(zlib.crc32(str(case).encode()))
            spec["loader"]["rows"] = pick.permutation(source_n)[:n].tolist()
        if case.columns:  # x0..x{d-1} and y0..y{l-1}, by name or by position
            named = case.kind in NAMED_KINDS
            feats = [f"x{j}" for j in range(d)] if named else list(range(d))
            labs = [f"y{k}" for k in range(l)] if named else list(range(sd, sd + l))
            spec["loader"]["features"] = feats
            spec["loader"]["labels"] = labs if sl else None
        spec["loader"].update(loader_changes)
        return spec

    return _make


def write_ndf(folder, n, d, l) -> str:  # noqa: E741
    path = os.path.join(folder, f"rows-{n}-{d}-{l}.ndf")
    if not os.path.exists(path):
        rows = np.arange(n)
        save_ndf(path, (make_x(rows, d), make_y(rows, l)))
    return path


def write_sharded(folder, sizes, d, l) -> str:  # noqa: E741
    path = os.path.join(folder, "parts-" + "-".join(map(str, sizes)) + f"-{d}-{l}")
    if not os.path.exists(path):
        write_ndf_dataset(path, sizes, d, l)
    return path


def write_parquet_folder(folder, chunks, d, l, coded=False) -> str:  # noqa: E741
    """Two files of row groups ``chunks`` (an empty group included where the sizes say);
    ``coded``: x0 held as strings (helpers.coded_ids)."""
    base = "pq-" + "-".join(map(str, chunks)) + f"-{d}-{l}" + ("-cat" if coded else "")
    path = os.path.join(folder, base)
    id_type = None
    if coded:
        import pyarrow as pa

        id_type = pa.string()
    if not os.path.exists(path):
        os.makedirs(path)
        half = len(chunks) // 2 or 1
        first = 0
        for name, groups in (("a.parquet", chunks[:half]), ("b.parquet", chunks[half:])):
            if groups:
                write_parquet(os.path.join(path, name), groups, first, d=d, l=l, id_type=id_type)
                first += sum(groups)
    return path


def write_arrow_file(folder, n, d, l, chunks) -> str:  # noqa: E741
    """An Arrow IPC file of record batches of ``chunks`` rows (uncompressed: mapped)."""
    import pyarrow as pa

    path = os.path.join(folder, "rows-" + "-".join(map(str, chunks)) + f"-{d}-{l}.arrow")
    if not os.path.exists(path):
        table = arrow_table_of(n, d, l, chunks)
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            for batch in table.to_batches():
                w.write_batch(batch)
    return path


ARROW_NEEDS = {"polars": "polars", "lazyframe": "polars", "hf": "datasets", "duckdb": "duckdb"}


def needs(case: Case) -> None:
    if case.kind in ARROW_KINDS:
        pytest.importorskip("pyarrow")
        if case.kind in ARROW_NEEDS:
            pytest.importorskip(ARROW_NEEDS[case.kind])
    if case.kind == "tensor":
        pytest.importorskip("torch")
    if case.kind == "dataframe":
        pytest.importorskip("pandas")
    if case.kind == "parquet":
        pytest.importorskip("pyarrow")


# -- the epoch laws over the whole product -------------------------------------------------------


# s3's own cases here on a stride of 12 of the product, not 4 (each read is a round trip
# to the local S3 server): a subset of the stride of 4 with every mode, shard count, way,
# shuffle and drop_last of it; the subset, columns and pure-path axes still draw theirs
# from the stride of 4 (EPOCH_CASES).
S3_EPOCH_STRIDE = 12
EPOCH_LAW_CASES = [
    c
    for i, c in enumerate(ALL)
    if i % (S3_EPOCH_STRIDE if c.kind == "s3" else EPOCH_STRIDE.get(c.kind, 1)) == 0
]
# The product's seven axes (each case's sizes, ways and read depths are drawn from its name).
AXES = ("kind", "shuffle", "drop_last", "shards", "prefetch", "mode", "threads")
COVER_WAY = 4  # every combination of values of any 4 axes that the cases above hold


def covering(cases, way: int = COVER_WAY) -> list:
    """The fewest of ``cases`` (greedily; in their order) that hold together every
    combination of values of any ``way`` of the axes that ``cases`` hold: each kind in
    every mode at every shard count with and without shuffle, and so on for every four
    axes. The whole product, where the laws hold all the same, is EXACTBATCH_LAWS=all's."""
    import heapq

    groups = list(itertools.combinations(range(len(AXES)), way))
    keys = []
    for c in cases:
        values = [getattr(c, a) for a in AXES]
        keys.append({(g, tuple(values[a] for a in g)) for g in groups})
    need = set().union(*keys)
    heap = [(-len(k), i) for i, k in enumerate(keys)]  # lazy greedy: gains only fall
    heapq.heapify(heap)
    chosen = []
    while need:
        _, i = heapq.heappop(heap)
        gain = len(keys[i] & need)
        if heap and gain < -heap[0][0]:  # stale: put back with its gain now
            heapq.heappush(heap, (-gain, i))
            continue
        chosen.append(i)
        need -= keys[i]
    return [cases[i] for i in sorted(chosen)]


# The epoch laws on the 4-way covering of the cases above (650 of 2,655 on 2026-12-07),
# not on all of them, unless EXACTBATCH_LAWS=all: the suite's 10 minutes (the cut and why
# the laws hold: docs/development.md, "The suite's time").
if os.environ.get("EXACTBATCH_LAWS") != "all":
    EPOCH_LAW_CASES = covering(EPOCH_LAW_CASES)


def test_the_covering_holds_every_combination_of_any_four_axes():
    """The rule the default run's epoch cases keep (``covering``): every combination of
    values of any four axes (so of any fewer) that the whole product's epoch cases hold,
    some chosen case holds; and the cases chosen are the product's own, in its order."""
    full = [
        c
        for i, c in enumerate(ALL)
        if i % (S3_EPOCH_STRIDE if c.kind == "s3" else EPOCH_STRIDE.get(c.kind, 1)) == 0
    ]
    chosen = covering(full)
    assert len(chosen) < len(full) / 3
    assert [c for c in full if c in set(chosen)] == chosen
    for way in range(1, COVER_WAY + 1):
        for axes in itertools.combinations(AXES, way):
            held = {tuple(getattr(c, a) for a in axes) for c in chosen}
            assert held == {tuple(getattr(c, a) for a in axes) for c in full}, axes
    if os.environ.get("EXACTBATCH_LAWS") != "all":
        assert EPOCH_LAW_CASES == chosen


@pytest.mark.parametrize(
    "case",
    [param(c) for c in EPOCH_LAW_CASES + SUBSET_CASES + COLUMNS_CASES + CODED_CASES + RANGES_CASES],
)
def test_epoch_laws(case, make_spec):
    """Two epochs of every shard: each the epoch law; epoch 1 equal to a fresh loader's
    set_epoch(1) (as a set of batches under threads); shuffled epochs differ."""
    check_epoch_laws(case, make_spec)


# The same laws on the pure NumPy path and in float32: a stride of the product (every
# kind, mode and way among them), about 25 s. They run in the suite's process (the
# path chosen by kernels.use_backend, checked by the numpy_backend fixture) and again,
# with the kernel tests, in a process of its own under EXACTBATCH_PURE=1
# (tests/test_backends.py).
PURE_CASES = [
    (c, dtype)
    for i, c in enumerate(EPOCH_CASES)
    for off, dtype in ((0, "float64"), (7, "float32"))
    if i % 16 == off
]


@pytest.mark.parametrize("case, dtype", [pytest.param(c, t, id=f"{c}-{t}") for c, t in PURE_CASES])
def test_epoch_laws_on_the_pure_path(case, dtype, make_spec, numpy_backend):
    check_epoch_laws(case, make_spec, dtype=np.dtype(dtype))


def test_epoch_laws_in_float32_on_this_backend(make_spec):
    """float32 batches on the suite's own backend (a few cases; the laws in float64 run
    above over the whole product)."""
    for i, case in enumerate(EPOCH_CASES):
        if i % 40 == 7:
            check_epoch_laws(case, make_spec, dtype=np.dtype(np.float32))


# Shuffled streams in float32: their buffer holds float32 rows (gather.buffer_dtype),
# every stream kind, a stride of the rest of the product.
STREAM_F32_CASES = [
    c for c in EPOCH_CASES if c.shuffle and c.kind in STREAM_KINDS and not c.elastic
][::5]


@pytest.mark.parametrize("case", [param(c) for c in STREAM_F32_CASES])
def test_shuffled_stream_laws_in_float32(case, make_spec):
    check_epoch_laws(case, make_spec, dtype=np.dtype(np.float32))


def check_epoch_laws(case, make_spec, **changes):
    needs(case)
    spec = make_spec(case, **changes)
    n, d, l, b = spec["n"], spec["d"], spec["l"], spec["loader"]["batch_size"]  # noqa: E741
    ordered = case.via != "threads"
    runs, states = [], []
    for s in range(case.shards):
        loader = loader_from_spec(spec, shard_index=s)
        epochs, flat = [], []  # (flat: every batch handed out, for the stats law)
        for e in range(2):
            if e and case.via in ("next_into", "threads"):
                loader.reset()  # next_into: 0 until reset()
            batches = drain(loader, case.via, d, l)
            check_stats_counts(loader.stats(), batches, [*flat, *batches], e + 1)
            flat += batches
            epochs.append(subset_positions(spec, batches))
        states.append(loader.state_dict())
        loader.close()
        # (on another gather thread count: the same batches whatever it is)
        fresh = loader_from_spec(spec, shard_index=s, prefetch=0, threads=case.pick((1, 2), "t"))
        fresh.set_epoch(1)
        check_deterministic(epochs[1], subset_positions(spec, collect(fresh, d, l)), ordered)
        fresh.close()
        runs.append(epochs)
    for e in range(2):
        check_epoch(
            [run[e] for run in runs],
            n=n,
            batch_size=b,
            drop_last=case.drop_last,
            shuffle=case.shuffle,
            even_batches=case.even,
            elastic=case.elastic,
            ordered=ordered,
            # (ranges on a shuffled stream: a contiguous shard of the chunk order's rows)
            owned=not (case.ranges and case.shuffle and case.kind in STREAM_KINDS),
        )
    both = [[run[e] if ordered else sorted(run[e]) for run in runs] for e in range(2)]
    check_epochs_differ(both[0], both[1], case.shuffle)
    check_certified(states, [sum(len(b) for run in runs for b in run[e]) for e in range(2)])


GATHER_KINDS = [k for k in RANDOM_ACCESS_KINDS if k not in ("s3",)]


@pytest.mark.parametrize("kind", GATHER_KINDS)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_gather_threads_give_the_same_bytes(kind, dtype, make_spec):
    """DataLoader(threads=k): the same batches, byte for byte, for every k (the compiled
    gather split by row ranges; the pure path ignores it), shuffled, over a subset, with
    a transform where the kind takes one, through iter() and next_into."""
    case = Case(kind, True, False, 1, 0, "plain", 1, subset=kind in ("dataset", "ndf"))
    needs(case)
    spec = make_spec(case, n=61, dtype=np.dtype(dtype))
    if kind in ("dataset", "ndf", "sharded"):
        rng = np.random.default_rng(7)
        spec["loader"]["transform"] = exactbatch.Standardize(
            (rng.normal(size=spec["d"]), rng.uniform(0.5, 2, size=spec["d"]))
        )
    check_same_bytes(lambda t: loader_from_spec(spec, threads=t), (1, 2, 3, 7))


# -- resume ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", [param(c) for c in RESUME_CASES])
def test_resume_at_every_batch(case, make_spec):
    """The last shard, cut at every batch of an epoch (epoch 0 or 1) through iter (with the
    case's prefetch) or next_into: a fresh loader restored from the JSON state hands out
    (through iter or next_into) the rest of the epoch, then the next epoch; a state at the
    end resumes at the next."""
    needs(case)
    spec = make_spec(case)
    epoch = case.pick((0, 1), "epoch")
    via = "iter" if case.prefetch or case.pad else case.pick(("iter", "next_into"), "via")
    resume_via = "iter" if case.pad else case.pick(("iter", "next_into"), "resume_via")
    # the last shard; under contiguous "pad", shard 0 (the smallest: the one padded)
    shard = 0 if case.pad and not case.elastic else case.shards - 1
    check_resume(
        lambda: loader_from_spec(spec, shard_index=shard),
        spec["d"],
        spec["l"],
        epoch=epoch,
        via=via,
        resume_via=resume_via,
        set_epoch=case.pick((False, True), "set_epoch"),  # axis: set_epoch after resume
    )


FRESH_PROCESS = [
    (Case("pair", True, False, 3, 2, "even", 1), 1),
    (Case("ndf", True, True, 2, 0, "elastic", 1), 2),
    (Case("factory", True, False, 2, 2, "plain", 1), 3),
    (Case("parquet", True, True, 3, 0, "even", 1), 1),
    (Case("ndf_blocks", False, False, 1, 2, "plain", 1), 4),
]


@pytest.mark.parametrize("case,k", [pytest.param(c, k, id=str(c)) for c, k in FRESH_PROCESS])
def test_resume_in_a_fresh_process(case, k, make_spec):
    """A state taken after k batches of epoch 1, resumed by a fresh Python process that
    rebuilds the loader: the rest of the epoch, then the next, as in this process."""
    needs(case)
    check_resume_in_process(make_spec(case, n=61), k, epoch=1)


# -- faults ------------------------------------------------------------------------------------

# A list in memory has nothing to fail; a stream of Arrow batches fails as a factory's
# pass does (the same feed reads both, front to back), which the factory's cases cover.
FAULT_KINDS = [k for k in KINDS if k != "list" and k not in ARROW_STREAM_KINDS]
FAULT_WAYS = [("iter", 0), ("iter", 2), ("peek", 0), ("peek", 2), ("next_into", 0)]


# Each kind in plain mode, and the kinds that can be elastic in elastic mode too (an
# elastic stream's chunks are read ahead on a thread of their own: its error reaches
# the read that needs the chunk).
FAULT_MODES = [
    pytest.param(k, m, id=f"{k}-{m}", marks=marks_for(k))
    for k in FAULT_KINDS
    for m in (("plain", "elastic") if k in ELASTIC_KINDS else ("plain",))
]


@pytest.mark.parametrize("via,prefetch", FAULT_WAYS)
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("kind,mode", FAULT_MODES)
def test_read_error_once_then_the_same_batches(kind, mode, shuffle, via, prefetch, make_spec):
    """A read raising OSError once (a reader's 3rd read, a Parquet row group's or a
    block's 3rd read, a factory's pass at its 3rd chunk), the caller catching it and
    going on: the epoch's batches exactly, and a state taken after the error counts
    only the batches handed out."""
    case = Case(kind, shuffle, False, 2, prefetch, mode, 1)
    needs(case)
    spec = make_spec(case)
    d, l = spec["d"], spec["l"]  # noqa: E741
    want = collect(loader_from_spec(spec), d, l)
    if kind in RANDOM_ACCESS_KINDS:
        loader = loader_from_spec(spec)
        flaky = wrap_reader(loader, FlakyReader)
        flaky.batch = loader.batch_size  # small batches may be read a group at a time
    else:  # the factory is its own injector; a chunk-indexed source is wrapped
        wrapped = []

        def wrap(source):
            wrapped.append(source if kind == "factory" else FlakyChunks(source))
            return wrapped[0]

        loader = loader_from_spec(spec, wrap=wrap)
        (flaky,) = wrapped
    at = min(2, len(want) - 1)  # a shard of two batches fails at its second
    absorbed = getattr(flaky, "absorbed", None)  # an elastic stream's read ahead let it go
    check_retry(
        loader, lambda: flaky.arm(at), want, via, d, l, lambda: loader_from_spec(spec), absorbed
    )
    loader.close()


@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("kind", ["pair", "ndf"])
def test_read_error_once_with_threads_loses_no_batch(kind, threads, make_spec):
    """Threads sharing a loader, one read raising OSError once and that thread going on:
    the batches handed out across threads are the epoch's, each once."""
    case = Case(kind, True, False, 1, 0, "plain", threads)
    spec = make_spec(case)
    d, l = spec["d"], spec["l"]  # noqa: E741
    want = collect(loader_from_spec(spec), d, l)
    loader = loader_from_spec(spec)
    flaky = wrap_reader(loader, FlakyReader)
    flaky.arm(3)
    per_thread = [[] for _ in range(threads)]

    def work(i):
        while True:
            try:
                batch = next_into_ids(loader, d, l, limit=1)
            except OSError:  # this thread's read failed: it goes on
                continue
            if not batch:
                return
            per_thread[i] += batch

    run_threads(work, threads)
    got = [b for batches in per_thread for b in batches]
    assert flaky.raised == 1
    assert sorted(got) == sorted(want)


# -- elastic: a state taken at S shards resumed at S' --------------------------------------------

RESHARD_KINDS = INDEXED_STREAM_KINDS + ("pair", "ndf", "sharded")
RESHARD = [(k, s, t) for k in RESHARD_KINDS for s in (1, 2, 3, 4) for t in (1, 2, 3, 4)]


def _flaky_resumed_ranks(kind, spec):
    """``make(num_shards, shard_index, resumed)``: a rank's loader of ``spec``; a
    resumed rank 0's source fails once (its reader, or its stream's chunks)."""

    def make(num_shards, shard_index, resumed):
        wrapped = []

        def wrap(source):
            faulty = resumed and shard_index == 0 and kind in INDEXED_STREAM_KINDS
            wrapped.append(FlakyChunks(source) if faulty and kind != "list" else source)
            return wrapped[0]

        loader = loader_from_spec(spec, wrap=wrap, num_shards=num_shards, shard_index=shard_index)
        if resumed and shard_index == 0:
            if kind in RANDOM_ACCESS_KINDS:
                flaky = wrap_reader(loader, FlakyReader)
                flaky.batch = loader.batch_size
                flaky.arm(1)
            elif isinstance(wrapped[0], FlakyChunks):
                wrapped[0].arm(1)
        return loader

    return make


@pytest.mark.parametrize(
    "kind,shards,after",
    [pytest.param(k, s, t, id=f"{k}-S{s}-to-S{t}", marks=marks_for(k)) for k, s, t in RESHARD],
)
def test_elastic_state_at_s_shards_resumes_at_any_other_count(kind, shards, after, make_spec):
    """Elastic, every indexed stream kind (and random access): S ranks in lockstep cut
    mid-epoch, S' ranks resume from their states (a resumed rank's source failing once,
    the caller going on): every global batch of the epoch exactly as one rank's
    uninterrupted epoch, then the next epoch whole; the last states certify both
    (laws.check_reshard)."""
    case = Case(kind, True, False, shards, 0, "elastic", 1)
    case = replace(case, shuffle=case.pick((True, True, False), "shuffle"))
    case = replace(case, drop_last=case.pick((False, True), "drop"))
    needs(case)
    spec = make_spec(case)
    make = _flaky_resumed_ranks(kind, spec)
    d, l = spec["d"], spec["l"]  # noqa: E741
    cut = case.pick((0, 1, 2, 3, 5), "cut")
    check_reshard(make, shards, after, d, l, cut=cut, via=case.pick(("iter", "next_into"), "via"))


RANGES_RESHARD = [
    (k, s, t)
    for i, (k, s, t) in enumerate(
        (k, s, t)
        for k in ("pair", "ndf", "list", "parquet", "ndf_blocks")
        for s in (1, 2, 3, 4)
        for t in (1, 2, 3, 4)
    )
    if s != t and i % 3 == 0
]


@pytest.mark.parametrize(
    "kind,shards,after",
    [pytest.param(k, s, t, id=f"{k}-S{s}-to-S{t}") for k, s, t in RANGES_RESHARD],
)
def test_ranges_state_at_s_shards_resumes_at_any_other_count(kind, shards, after, make_spec):
    """elastic="ranges", random access and indexed streams: S ranks in lockstep cut
    mid-epoch, S' ranks resume from their states (a resumed rank's source failing once):
    every row once, the batches a function of the history, the next epoch an S'-rank
    epoch; the last states certify both (laws.check_reshard_ranges)."""
    case = Case(kind, True, False, shards, 0, "ranges", 1)
    case = replace(case, shuffle=case.pick((True, True, False), "shuffle"))
    case = replace(case, drop_last=case.pick((False, True), "drop"))
    needs(case)
    spec = make_spec(case)
    make = _flaky_resumed_ranks(kind, spec)
    d, l = spec["d"], spec["l"]  # noqa: E741
    cut = case.pick((0, 1, 2, 3), "cut")
    via = case.pick(("iter", "next_into"), "via")
    check_reshard_ranges(make, shards, after, d, l, cut=cut, via=via)


# -- settings changed between save and resume --------------------------------------------------

BASE = dict(shuffle=True, drop_last=False, shards=3, prefetch=0, mode="plain", threads=1)
# The seed is not among them: a state carries its seed, and a loader resumes it
# whatever seed it was built with (a state taken after reset(seed=...) resumes that
# seed's order; loader/test_resume.py::test_state_carries_the_seed).
CHANGES = {
    "seed": dict(seed=6),
    "batch_size": dict(batch_size=4),
    "shuffle": dict(shuffle=False),
    "drop_last": dict(drop_last=True),
    "num_shards": dict(num_shards=2, shard_index=1),
    "shard_index": dict(shard_index=0),
    "even_batches": dict(even_batches=True),
    "pad": dict(even_batches="pad"),  # recorded as given: "pad" is not False (nor True)
    "elastic": dict(elastic=True),
    "buffer_size": dict(buffer_size=13),
    "block_rows": {},
    "n": {},
    "d": {},
    "l": {},
}
NAMES = {"n": r"\bn\b|n_rows|total_size", "d": r"\bd\b", "l": r"\bl\b", "pad": "even_batches"}


def changes_for(kind: str):
    for setting in CHANGES:
        if setting == "elastic" and kind not in ELASTIC_KINDS:
            continue  # refused at construction for a stream read front to back
        if setting == "buffer_size" and kind not in STREAM_KINDS:
            continue
        if setting == "block_rows" and kind not in BLOCK_KINDS:
            continue
        if setting == "l" and LABELS.get(kind, 1) == 0:
            continue  # a bare array-like has no labels to change
        yield setting


@pytest.mark.parametrize(
    "kind,setting",
    [pytest.param(k, s, id=f"{k}-{s}", marks=marks_for(k)) for k in KINDS for s in changes_for(k)],
)
def test_changed_setting_between_save_and_resume_is_a_value_error_naming_it(
    kind, setting, make_spec
):
    """A state taken mid-epoch, loaded into a loader with one setting that fixes the order
    or the source's shape changed: ValueError naming that setting, and the loader is left
    as it was."""
    case = Case(kind, **BASE)
    needs(case)
    spec = make_spec(case, n=41, seed=5, batch_size=5)
    if kind in STREAM_KINDS:
        spec["loader"]["buffer_size"] = 9
    if kind in BLOCK_KINDS:
        spec["block_rows"] = 6
    loader = loader_from_spec(spec)
    it = iter(loader)
    next(it)
    next(it)
    state = roundtrip(loader.state_dict())
    loader.close()
    if setting in ("n", "d", "l"):
        sizes = {"n": spec["n"], "d": spec["d"], "l": spec["l"], setting: spec[setting] + 1}
        other = make_spec(case, **sizes, seed=5, batch_size=5)
        declared = {"total_size": other["n"]} if "total_size" in spec["loader"] else {}
        other["loader"] = {**spec["loader"], **declared}  # a factory's N is declared
        if kind in BLOCK_KINDS:
            other["block_rows"] = 6
    else:
        other = {**spec, "loader": {**spec["loader"], **CHANGES[setting]}}
        if setting == "block_rows":
            other["block_rows"] = 4
    target = loader_from_spec(other)
    with pytest.raises(ValueError, match=NAMES.get(setting, setting)):
        target.load_state_dict(state)
    # the refused state left the target as it was
    untouched = loader_from_spec(other)
    assert collect(target, other["d"], other["l"]) == collect(untouched, other["d"], other["l"])
    target.close()
    untouched.close()


# -- the epoch ledger --------------------------------------------------------------------------

ExactnessError = exactbatch.ExactnessError


def test_exactness_error_is_an_exported_runtime_error():
    assert issubclass(ExactnessError, RuntimeError)
    assert "ExactnessError" in exactbatch.__all__
    from exactbatch import errors

    assert errors.ExactnessError is ExactnessError


def forge(state: dict, how: str) -> dict:
    state = dict(state)
    if how == "skip_a_batch":
        state["batches_done"] += 1
    elif how == "repeat_a_batch":
        state["batches_done"] -= 1
    elif how == "other_seed":
        state["seed"] += 1
    return state


@pytest.mark.parametrize("how", ["skip_a_batch", "repeat_a_batch", "other_seed"])
@pytest.mark.parametrize("kind", ["pair", "ndf", "factory", "parquet", "ndf_blocks"])
def test_ledger_catches_a_forged_state_by_the_end_of_the_epoch(kind, how, make_spec):
    """A state forged mid-epoch (batches_done moved by one, the seed changed) and loaded
    into a loader that accepts it (built with the forged seed): ExactnessError naming the
    epoch and the shard, at the latest when the epoch ends."""
    case = Case(kind, True, False, 2, 0, "plain", 1)
    needs(case)
    spec = make_spec(case, seed=5)
    loader = loader_from_spec(spec)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = forge(roundtrip(loader.state_dict()), how)
    loader.close()
    target = loader_from_spec({**spec, "loader": {**spec["loader"], "seed": state["seed"]}})
    with pytest.raises(ExactnessError, match=r"(?s)epoch.*shard|shard.*epoch"):
        target.load_state_dict(state)
        collect(target, spec["d"], spec["l"])


@pytest.mark.parametrize("kind", ["pair", "factory"])
def test_ledger_spans_resumes_and_an_honest_run_never_raises(kind, make_spec):
    """Resumed twice mid-epoch through JSON, an honest run finishes its epochs without an
    error, and the state it carries differs from a state after other rows (the digest)."""
    case = Case(kind, True, False, 1, 0, "plain", 1)
    spec = make_spec(case)
    d, l = spec["d"], spec["l"]  # noqa: E741
    first = loader_from_spec(spec)
    it = iter(first)
    next(it)
    state = roundtrip(first.state_dict())
    second = loader_from_spec(spec)
    second.load_state_dict(state)
    it2 = iter(second)
    next(it2)
    state2 = roundtrip(second.state_dict())
    third = loader_from_spec(spec)
    third.load_state_dict(state2)
    collect(third, d, l)
    collect(third, d, l)
    # the same count of batches out in another epoch: another digest
    other = loader_from_spec(spec)
    other.set_epoch(1)
    it3 = iter(other)
    next(it3)
    next(it3)
    state3 = roundtrip(other.state_dict())
    state3["epoch"] = state2["epoch"]
    assert state3 != state2


# -- threads and lifetimes (DESIGN: "Threads and lifetimes") -----------------------------------

LIFETIME_KINDS = [pytest.param(k, marks=marks_for(k)) for k in KINDS]
MID_READ_KINDS = [pytest.param(k, marks=marks_for(k)) for k in RANDOM_ACCESS_KINDS]


@pytest.fixture(params=["grouped", "one by one"])
def grouping(request, monkeypatch):
    """Small batches claimed (and read) a group at a time, or one at a time as large
    batches are: patched before the loaders are built (they size their groups then)."""
    if request.param == "one by one":
        from exactbatch.loader import epoch_iterator

        monkeypatch.setattr(epoch_iterator, "_GROUP_BATCHES", 1)
        monkeypatch.setattr(epoch_iterator, "_AHEAD_GROUP_BATCHES", 1)
        monkeypatch.setattr(epoch_iterator, "_LAZY_BATCHES", 1)  # (next_into's claims)
    return request.param


def _lifetime_spec(kind, prefetch, make_spec):
    case = Case(kind, True, False, 2, prefetch, "plain", 1)
    needs(case)
    spec = make_spec(case)
    return spec, spec["d"], spec["l"], collect(loader_from_spec(spec), spec["d"], spec["l"])


@pytest.mark.parametrize("fail", [False, True], ids=["read", "fails"])
@pytest.mark.parametrize("via,prefetch", [("iter", 0), ("iter", 2), ("next_into", 0)])
@pytest.mark.parametrize("kind", MID_READ_KINDS)
def test_a_state_taken_mid_read_counts_only_batches_handed_out(
    kind, via, prefetch, fail, grouping, make_spec
):
    """Axis: a state taken while a read is in flight, the read then succeeding or failing
    (laws.check_state_mid_read). Random access: a stream reads under the claim's lock,
    so a state waits for its read."""
    spec, d, l, want = _lifetime_spec(kind, prefetch, make_spec)  # noqa: E741
    check_state_mid_read(lambda: loader_from_spec(spec), want, via, fail, d, l)


@pytest.mark.parametrize("keep", [True, False], ids=["kept", "dropped"])
@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("kind", LIFETIME_KINDS)
def test_an_iterator_left_mid_epoch_never_ends_it_early(kind, prefetch, keep, make_spec):
    """Axis: an iterator left after some batches, kept or dropped, then next_into to the
    end (laws.check_abandoned_iterator)."""
    spec, d, l, want = _lifetime_spec(kind, prefetch, make_spec)  # noqa: E741
    k = min(len(want) - 1, Case(kind, True, False, 2, prefetch, "plain", 1).pick((1, 2, 3), "left"))
    check_abandoned_iterator(lambda: loader_from_spec(spec), want, k, keep, d, l)


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("kind", LIFETIME_KINDS)
def test_one_iterator_shared_by_threads_hands_out_every_batch_once(kind, prefetch, make_spec):
    """Axis: one iterator, four threads calling next() (laws.check_shared_iterator)."""
    spec, d, l, want = _lifetime_spec(kind, prefetch, make_spec)  # noqa: E741
    check_shared_iterator(lambda: loader_from_spec(spec), want, 4, d, l)


@pytest.mark.parametrize("via,prefetch", FAULT_WAYS)
@pytest.mark.parametrize("kind", ["pair", "ndf", "sharded", "factory", "parquet"])
def test_a_read_error_at_each_batch_then_the_same_batches(kind, via, prefetch, grouping, make_spec):
    """Axis: the read-error law (laws.check_retry) with the fault at every batch of the
    epoch in turn, not only the third."""
    case = Case(kind, True, False, 1, prefetch, "plain", 1)
    needs(case)
    spec = make_spec(case)
    d, l = spec["d"], spec["l"]  # noqa: E741
    want = collect(loader_from_spec(spec), d, l)

    def flaky_loader():
        if kind in RANDOM_ACCESS_KINDS:
            loader = loader_from_spec(spec)
            flaky = wrap_reader(loader, FlakyReader)
            flaky.batch = loader.batch_size
            return loader, flaky
        wrapped = []

        def wrap(source):
            wrapped.append(source if kind == "factory" else FlakyChunks(source))
            return wrapped[0]

        loader = loader_from_spec(spec, wrap=wrap)
        return loader, wrapped[0]

    loader, flaky = flaky_loader()  # how many reads (or chunks) an epoch makes
    flaky.arm(10**6)
    collect(loader, d, l)
    reads = 10**6 - flaky.left if kind != "factory" else len(spec["chunks"])
    assert reads > 1
    for at in range(reads):
        loader, flaky = flaky_loader()
        check_retry(
            loader, lambda f=flaky, a=at: f.arm(a), want, via, d, l, lambda: loader_from_spec(spec)
        )
        loader.close()


# -- the lifecycle (DESIGN: "One lifecycle") -----------------------------------------------

LIFECYCLE_KINDS = [
    pytest.param(k, marks=marks_for(k)) for k in ("pair", "ndf", "factory", "parquet")
]
LIFECYCLE_WAYS = [("iter", 0), ("iter", 2), ("next_into", 0)]
SCHEDULES = Counter()  # schedules tried and states resumed, per axis (see the report below)


def _lifecycle_case(kind, prefetch, mode, make_spec, **changes):
    case = Case(kind, True, False, 2, prefetch, mode, 1)
    needs(case)
    spec = make_spec(case, **changes)
    make = lambda **o: loader_from_spec(spec, **o)  # noqa: E731
    return spec, make, spec["d"], spec["l"]


@pytest.mark.parametrize("mode", ["plain", "elastic"])
@pytest.mark.parametrize("via,prefetch", LIFECYCLE_WAYS)
@pytest.mark.parametrize("kind", LIFECYCLE_KINDS)
def test_close_from_another_thread_at_every_batch(kind, via, prefetch, mode, make_spec):
    """Axes: close() from another thread after every batch of an epoch, and a state taken
    during close (laws.check_close)."""
    if mode == "elastic" and kind == "factory":
        pytest.skip("a stream read front to back cannot be elastic")
    spec, make, d, l = _lifecycle_case(kind, prefetch, mode, make_spec)  # noqa: E741
    want = collect(make(), d, l)
    for k in range(len(want) + 1):
        SCHEDULES["close"] += check_close(make, want, via, k, d, l)


@pytest.mark.parametrize("via,prefetch", LIFECYCLE_WAYS)
@pytest.mark.parametrize("kind", LIFECYCLE_KINDS)
def test_reset_seed_mid_run(kind, via, prefetch, make_spec):
    """Axis: reset(seed=...) after 0, 1 and 3 batches (laws.check_reset_seed)."""
    spec, make, d, l = _lifecycle_case(kind, prefetch, "plain", make_spec, seed=5)  # noqa: E741
    fresh = collect(make(seed=11), d, l)
    for k in (0, 1, 3):
        check_reset_seed(make, fresh, k, via, d, l, 11)
        SCHEDULES["reset"] += 1


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("threads", [2, 4])
@pytest.mark.parametrize("mode", ["plain", "elastic"])
@pytest.mark.parametrize("kind", ["pair", "ndf"])
def test_read_errors_near_the_end_on_every_thread(kind, mode, threads, make_spec):
    """Axis: next_into on several threads, a read failing once at each of the epoch's
    last four batches, states taken after every batch (laws.check_errors_near_the_end)."""
    case = Case(kind, True, False, 1, 0, mode, threads)
    spec = make_spec(case)
    d, l = spec["d"], spec["l"]  # noqa: E741
    make = lambda **o: loader_from_spec(spec, **o)  # noqa: E731
    want = collect(make(), d, l)
    for at in range(max(0, len(want) - 4), len(want)):
        SCHEDULES["errors"] += 1
        SCHEDULES["resumed"] += check_errors_near_the_end(make, want, threads, at, d, l)


def test_lifecycle_figures():
    """Prints the schedules tried and the states resumed by the lifecycle axes above
    (run with them, ``-s``: pytest tests/test_law_matrix.py -k "lifecycle or close_from
    or reset_seed or near_the_end" -s -n 0)."""
    print(f"\nlifecycle axes: {dict(SCHEDULES)}")


# -- the lineage law ------------------------------------------------------------------


# elastic="ranges" too (another world size at each restart); with drop_last, which rows
# its last segment drops depends on the history: the law's truth is then a run that
# nothing interrupts through the final lineage's world sizes (laws._ranges_rows).
LINEAGE_DEALINGS = pytest.mark.parametrize(
    "elastic", [False, True, "ranges"], ids=["contiguous", "elastic", "ranges"]
)


@LINEAGE_DEALINGS
def test_lineage_law_random_kill_resume_rollback_trees(elastic):
    """certify's verdict on every state of a random tree of kills, resumes and rollbacks
    (1 to 4 shards) is the truth of the final lineage's row ids (laws.check_lineage);
    both verdicts are met. The odd seeds add the user's habits: set_epoch after a load,
    a stop by close(), a checkpoint resumed again at another shard count (elastic);
    every third seed drops the last partial batch (drop_last; under ranges, the tails of
    the last segment's shares)."""
    verdicts = [
        check_lineage(seed, elastic, habits=seed % 2 == 1, drop_last=_drops(seed))
        for seed in range(60)
    ]
    assert 0 < sum(verdicts) < len(verdicts)


def _drops(seed: int) -> bool:
    return seed % 3 == 2


def test_lineage_law_ranges_with_drop_last_on_every_seed():
    """The lineage law under elastic="ranges" with drop_last on every tree: the rows an
    epoch leaves out are the tails of its last segment's shares, so the truth follows the
    final lineage's world sizes (a segment of no step where an epoch ended included);
    certify's verdict is that truth, and both verdicts are met."""
    verdicts = [
        check_lineage(seed, "ranges", habits=seed % 2 == 1, drop_last=True)
        for seed in range(100, 140)
    ]
    assert 0 < sum(verdicts) < len(verdicts)


@pytest.mark.parametrize("keep", [0, 1], ids=["fold-at-once", "fold-after-1"])
@LINEAGE_DEALINGS
def test_lineage_law_across_compaction_points(elastic, keep, monkeypatch):
    """The lineage law over longer runs (five epochs) whose states fold their old
    records into summaries (exactbatch.loader.compaction) as they go: kills, resumes
    and rollbacks across the folds (the odd seeds with the user's habits, every third
    with drop_last: under elastic its summaries sum each epoch's promise), and
    certify's verdict is still the row ids' truth. (Seed 28 is two restarts from one
    checkpoint that reach one place, with one id: told apart by their load times.)"""
    monkeypatch.setattr(compaction, "KEEP", keep)
    verdicts = [
        check_lineage(seed, elastic, epochs=5, habits=seed % 2 == 1, drop_last=_drops(seed))
        for seed in range(40)
    ]
    assert 0 < sum(verdicts) < len(verdicts)
