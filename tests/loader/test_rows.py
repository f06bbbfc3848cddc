"""Row ids: ``DataLoader(..., with_rows=True)`` (DESIGN.md, "Real data").

Laws:

* Every batch is ``(xb, yb, rows)``: ``rows`` a new int64 array of the
  batch's global row ids, in its row order - the index into a random-access
  source, the position in a stream's unshuffled order.
* The ids are the ledger's: after every batch, the digest of the ids handed
  out so far is the state's ledger digest, so the ids prove exactly-once by
  themselves - across a ``kill -9`` and a resume too, on data whose values
  say nothing of their rows (no fingerprints).
* ``next_into(bx, by, brows)`` writes the same ids into ``brows``; a bad
  ``brows`` (or one given to a loader without ids, or none to one with) is a
  ``TypeError``/``ValueError`` naming ``brows``.
* ``with_rows`` fixes no order: a state resumes under either setting.

The law matrix (tests/test_law_matrix.py) runs half its cases with
``with_rows=True`` and checks every batch's ids against its traceable rows;
the adapters' ids are tested in tests/adapters/test_torch.py and test_jax.py.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
from helpers import chunks_of, ids_of, make_data, write_ndf_dataset, write_parquet
from hypothesis import given, settings
from hypothesis import strategies as st
from laws import roundtrip, run_python

import exactbatch
from exactbatch import DataLoader, ndf_blocks, open_ndf, open_ndf_dataset, parquet_source, save_ndf
from exactbatch.order.digest import rows_digest

# -- the argument ------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["yes", 1, None, 1.0])
def test_with_rows_must_be_a_bool(bad):
    x, y = make_data(10)
    with pytest.raises(TypeError, match="with_rows must be a bool"):
        DataLoader((x, y), 4, with_rows=bad)


def test_with_rows_takes_a_numpy_bool_and_is_an_attribute():
    x, y = make_data(10)
    assert DataLoader((x, y), 4, with_rows=np.bool_(True)).with_rows is True
    assert DataLoader((x, y), 4).with_rows is False
    assert len(next(iter(DataLoader((x, y), 4)))) == 2


# -- what a batch carries ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shuffle", [False, True])
def test_random_access_batches_carry_their_rows_ids(shuffle, dtype):
    """Each batch's rows are ``x[rows]``, on data whose values do not encode the row."""
    x = np.random.default_rng(1).normal(size=(53, 4))
    y = np.random.default_rng(2).normal(size=(53, 2))
    loader = DataLoader((x, y), 8, shuffle=shuffle, seed=4, with_rows=True, dtype=dtype)
    seen = []
    for xb, yb, rows in loader:
        assert rows.dtype == np.int64 and rows.shape == (xb.shape[0],)
        np.testing.assert_array_equal(xb, x[rows].astype(dtype))
        np.testing.assert_array_equal(yb, y[rows].astype(dtype))
        seen += rows.tolist()
    assert sorted(seen) == list(range(53))
    assert (seen != list(range(53))) == shuffle


def test_ids_belong_to_the_caller():
    """A batch's ids are a new array: later batches and epochs never write them."""
    x, y = make_data(40)
    loader = DataLoader((x, y), 4, with_rows=True, prefetch=2)
    first = [(rows, rows.copy()) for _, _, rows in loader]
    for _ in loader:
        pass
    for rows, kept in first:
        np.testing.assert_array_equal(rows, kept)
    assert not any(np.shares_memory(a, b) for (a, _), (b, _) in zip(first, first[1:], strict=False))


def test_a_sharded_dataset_gives_global_ids(tmp_path):
    """A sharded .ndf dataset's ids are its global rows, across its parts and shards."""
    path = write_ndf_dataset(tmp_path / "ds", [7, 0, 11, 5], d=3, l=1)
    seen = []
    for s in range(2):
        with open_ndf_dataset(path) as ds:
            loader = DataLoader(ds, 4, num_shards=2, shard_index=s, with_rows=True)
            for batch in loader:
                seen += ids_of(batch)
    assert sorted(seen) == list(range(23))


def test_parquet_ids_are_rows_across_the_files_in_file_order(tmp_path):
    """A stream's id is the row's position in its unshuffled order: for Parquet, the
    row across the files in file order, whatever order the row groups are read in."""
    pytest.importorskip("pyarrow")
    folder = tmp_path / "pq"
    folder.mkdir()
    write_parquet(folder / "a.parquet", [5, 9], 0)
    write_parquet(folder / "b.parquet", [3, 11, 2], 14)
    src = parquet_source(str(folder), labels=["y0"])
    loader = DataLoader(src, 6, shuffle=True, buffer_size=8, with_rows=True, seed=2)
    seen = [r for batch in loader for r in ids_of(batch)]
    assert sorted(seen) == list(range(30))


def test_ndf_blocks_ids_are_the_files_rows(tmp_path):
    x, y = make_data(45)
    save_ndf(tmp_path / "a.ndf", (x, y))
    with open_ndf(tmp_path / "a.ndf") as f:
        loader = DataLoader(ndf_blocks(f, 6), 4, buffer_size=10, with_rows=True)
    seen = [r for batch in loader for r in ids_of(batch)]
    assert sorted(seen) == list(range(45))


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 13), min_size=1, max_size=8),
    batch_size=st.integers(1, 9),
    buffer_size=st.integers(1, 30),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    shards=st.integers(1, 3),
    seed=st.integers(0, 2**32),
)
def test_stream_ids_index_the_unshuffled_stream(
    sizes, batch_size, buffer_size, shuffle, drop_last, shards, seed
):
    """For any chunking, buffer and shards, a streamed batch's rows are the unshuffled
    stream's rows at its ids (the data's values say nothing of their rows), each id
    at most once and, without drop_last, every row once across the shards."""
    n = sum(sizes)
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, 2)), rng.normal(size=(n, 1))
    bounds = np.cumsum([0, *sizes])
    chunks = [(x[a:z], y[a:z]) for a, z in zip(bounds, bounds[1:], strict=False)]
    seen = []
    for s in range(shards):
        loader = DataLoader(
            chunks,
            batch_size,
            shuffle=shuffle,
            seed=seed,
            drop_last=drop_last,
            buffer_size=buffer_size,
            num_shards=shards,
            shard_index=s,
            total_size=n,
            with_rows=True,
        )
        for xb, yb, rows in loader:
            np.testing.assert_array_equal(xb, x[rows])
            np.testing.assert_array_equal(yb, y[rows])
            seen += rows.tolist()
    assert len(seen) == len(set(seen))
    if not drop_last:
        assert sorted(seen) == list(range(n))


# -- next_into ------------------------------------------------------------------------------


def test_next_into_writes_the_ids_into_brows():
    x, y = make_data(30)
    loader = DataLoader((x, y), 7, with_rows=True, seed=3)
    want = [batch[2].tolist() for batch in loader]
    loader.set_epoch(0)
    bx, by, brows = np.empty((7, 3)), np.empty((7, 1)), np.full(7, -1, dtype=np.int64)
    got = []
    while r := loader.next_into(bx, by, brows):
        np.testing.assert_array_equal(bx[:r], x[brows[:r]])
        got.append(brows[:r].tolist())
    assert got == want


def test_brows_given_to_a_loader_without_ids_is_a_type_error():
    x, y = make_data(10)
    loader = DataLoader((x, y), 4)
    with pytest.raises(TypeError, match=r"brows.*with_rows=True"):
        loader.next_into(np.empty((4, 3)), np.empty((4, 1)), np.empty(4, dtype=np.int64))
    assert loader.state_dict()["batches_done"] == 0  # nothing was handed out


def test_no_brows_for_a_loader_with_ids_is_a_type_error():
    x, y = make_data(10)
    loader = DataLoader((x, y), 4, with_rows=True)
    with pytest.raises(TypeError, match=r"needs brows, an int64 array of shape \(4,\)"):
        loader.next_into(np.empty((4, 3)), np.empty((4, 1)))


@pytest.mark.parametrize(
    "brows,error,says",
    [
        (np.empty(4, dtype=np.int32), TypeError, r"brows must have dtype int64 and shape \(4,\)"),
        (np.empty(4), TypeError, r"brows must have dtype int64"),
        ([0, 0, 0, 0], TypeError, r"brows must be a int64 NumPy array of shape \(4,\)"),
        (np.empty(5, dtype=np.int64), ValueError, r"brows must have shape \(4,\); got \(5,\)"),
        (np.empty((4, 1), dtype=np.int64), ValueError, r"brows must have shape \(4,\)"),
        (np.empty(8, dtype=np.int64)[::2], ValueError, "brows must be a writeable C-contiguous"),
    ],
    ids=["int32", "float64", "list", "longer", "2-D", "strided"],
)
def test_a_bad_brows_is_an_error_naming_it(brows, error, says):
    x, y = make_data(10)
    loader = DataLoader((x, y), 4, with_rows=True)
    with pytest.raises(error, match=says):
        loader.next_into(np.empty((4, 3)), np.empty((4, 1)), brows)
    assert loader.state_dict()["batches_done"] == 0


# -- the ledger's ids, and resume ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pair", "stream"])
def test_the_ids_are_the_ledgers(kind):
    """After every batch, the digest of the ids handed out this epoch is the state's
    ledger digest: the ids are the very ones the ledger counts, not a second reckoning."""
    x, y = make_data(61)
    source = (x, y) if kind == "pair" else chunks_of([5, 0, 9, 3, 11, 7, 26])
    kw = {} if kind == "pair" else {"buffer_size": 9, "total_size": 61}
    loader = DataLoader(source, 6, seed=8, with_rows=True, **kw)
    handed: list[int] = []
    for batch in loader:
        handed += batch[2].tolist()
        state = loader.state_dict()
        if state["epoch"] == 0:  # (the state after the last batch is the next epoch's)
            assert state["ledger"]["rows"] == len(handed)
            assert int(state["ledger"]["digest"], 16) == rows_digest(np.array(handed))
    assert sorted(handed) == list(range(61))


def test_a_state_resumes_under_either_setting():
    """with_rows fixes no order: a state of a loader without ids resumes in one with
    them (and back), with the rest of the epoch's batches."""
    x, y = make_data(50)
    plain = DataLoader((x, y), 6, seed=1)
    it = iter(plain)
    for _ in range(3):
        next(it)
    state = roundtrip(plain.state_dict())
    rest = [ids_of(b) for b in it]
    resumed = DataLoader((x, y), 6, seed=1, with_rows=True)
    resumed.load_state_dict(state)
    assert [ids_of(b) for b in resumed] == rest
    back = DataLoader((x, y), 6, seed=1)
    back.load_state_dict(state)
    assert [ids_of(b) for b in back] == rest


# The child: one epoch of a shuffled .ndf loader with prefetch, resuming from the
# checkpoint if there is one. After each batch it checks the rows are x[ids], then
# saves the state and every id handed out so far in one atomic checkpoint (the state
# and the bookkeeping together, as a training step would), and says "batch".
_TRAINER = textwrap.dedent(
    """
    import json, os, sys, time
    import numpy as np
    from exactbatch import DataLoader, open_ndf
    path, ckpt = sys.argv[1], sys.argv[2]
    x = open_ndf(path).read_rows(np.arange(int(sys.argv[3])))[0]
    with open_ndf(path) as f:
        loader = DataLoader(f, 7, seed=11, with_rows=True, prefetch=2)
    handed = []
    if os.path.exists(ckpt):
        with open(ckpt) as g:
            saved = json.load(g)
        loader.load_state_dict(saved["state"])
        handed = saved["ids"]
    for xb, yb, rows in loader:
        assert np.array_equal(xb, x[rows])
        handed += rows.tolist()
        with open(ckpt + ".tmp", "w") as g:
            json.dump({"state": loader.state_dict(), "ids": handed}, g)
            g.flush()
            os.fsync(g.fileno())
        os.replace(ckpt + ".tmp", ckpt)
        print("batch", flush=True)
        time.sleep(0.002)
    print("done", flush=True)
    """
)


@pytest.mark.skipif(os.name != "posix", reason="SIGKILL is POSIX")
def test_exactly_once_across_kill_and_resume_from_the_ids_alone(tmp_path):
    """A trainer killed with SIGKILL three times mid-epoch and resumed from its last
    checkpoint each time: the ids it recorded cover every row exactly once. The data
    are random values (no row says which it is), so the ids alone prove it; the
    loader's own ledger, over the same ids, passed at the epoch's end (the child
    would have raised ExactnessError)."""
    n = 400
    rng = np.random.default_rng(5)
    save_ndf(tmp_path / "d.ndf", (rng.normal(size=(n, 3)), rng.normal(size=(n, 1))))
    ckpt = str(tmp_path / "ckpt.json")
    env = dict(os.environ)
    here = os.path.dirname(os.path.dirname(os.path.abspath(exactbatch.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [here, env.get("PYTHONPATH")]))
    args = [sys.executable, "-c", _TRAINER, str(tmp_path / "d.ndf"), ckpt, str(n)]
    kills = 0
    for after in (5, 11, 3, None):  # kill after that many batches of each run; None: finish
        child = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, text=True)
        assert child.stdout is not None
        lines = []
        while after is None or len(lines) < after:
            line = child.stdout.readline()
            if not line:
                break
            lines.append(line.strip())
        if after is not None:
            os.kill(child.pid, signal.SIGKILL)
            kills += 1
        child.stdout.close()
        assert child.wait(60) == (-signal.SIGKILL if after is not None else 0)
        if after is None:
            assert lines and lines[-1] == "done"
    assert kills == 3
    with open(ckpt) as f:
        saved = json.load(f)
    assert sorted(saved["ids"]) == list(range(n)), "a row lost or handed out twice"
    assert saved["state"]["epoch"] == 1


def test_ids_survive_a_state_through_a_fresh_process():
    """A state taken mid-epoch with ids, resumed in a fresh process: the same ids."""
    x, y = make_data(40)
    here = DataLoader((x, y), 6, seed=9, with_rows=True)
    it = iter(here)
    next(it)
    state = roundtrip(here.state_dict())
    want = [b[2].tolist() for b in it]
    code = (
        "import json, sys\n"
        "from helpers import make_data\n"
        "from exactbatch import DataLoader\n"
        "loader = DataLoader(make_data(40), 6, seed=9, with_rows=True)\n"
        "loader.load_state_dict(json.loads(sys.argv[1]))\n"
        "print(json.dumps([b[2].tolist() for b in loader]))\n"
    )
    assert json.loads(run_python(code, json.dumps(state))) == want


def test_peek_gives_the_ids_the_next_batch_has():
    x, y = make_data(30)
    loader = DataLoader((x, y), 4, with_rows=True, seed=2)
    it = iter(loader)
    peeked = it.peek(3)
    assert all(len(b) == 3 for b in peeked)
    for p in peeked:
        batch = next(it)
        assert batch[2] is p[2]
        assert ids_of(batch) == p[2].tolist()


def test_even_batches_and_drop_last_leave_out_the_same_rows_as_without_ids():
    """The ids change nothing of what is handed out: the same batches as a loader
    without them, in every mode; an unknown-size stream too."""
    x, y = make_data(47)
    for kw in (
        dict(drop_last=True),
        dict(even_batches=True, num_shards=3, shard_index=2),
        dict(elastic=True, num_shards=2, shard_index=1),
    ):
        a = [ids_of(b) for b in DataLoader((x, y), 5, seed=3, **kw)]
        b = [ids_of(b) for b in DataLoader((x, y), 5, seed=3, with_rows=True, **kw)]
        assert a == b, kw
    chunks = chunks_of([4, 9, 0, 3])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(chunks, 3, total_size=None, with_rows=True, buffer_size=5)
    assert sorted(r for b in loader for r in ids_of(b)) == list(range(16))


def test_elastic_ids_prove_a_resume_at_another_shard_count():
    """Elastic: a checkpoint at 3 lockstep shards, resumed at 2, on random values: the
    ids handed out before and after are every row exactly once, and each batch's rows
    are x[ids]."""
    n, b = 300, 8
    x = np.random.default_rng(3).normal(size=(n, 2))
    handed, states = [], []
    for s in range(3):
        ld = DataLoader(x, b, num_shards=3, shard_index=s, elastic=True, seed=4, with_rows=True)
        it = iter(ld)
        for _ in range(5):
            xb, _, rows = next(it)
            assert (xb == x[rows]).all()
            handed += rows.tolist()
        states.append(roundtrip(ld.state_dict()))
    for s in range(2):
        ld = DataLoader(x, b, num_shards=2, shard_index=s, elastic=True, seed=4, with_rows=True)
        ld.load_state_dict(states[s])
        for xb, _, rows in ld:
            assert (xb == x[rows]).all()
            handed += rows.tolist()
    assert sorted(handed) == list(range(n))
