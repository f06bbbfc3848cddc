"""even_batches="pad": every rank the same batch count, every row once, padded batches masked.

The laws (every row once across shards, equal counts, masks, resume, the
certificate) run over every source kind in the law matrix (its modes pad
and elastic_pad); here: the evaluation sum over S ranks against one
process, resume in the middle of the padding, an elastic resume at another
shard count, a stream longer than its declared N, and what is refused.
"""

from __future__ import annotations

import importlib
import warnings

import numpy as np
import pytest
from helpers import chunks_of, collect, ids, make_x, make_y, unpad, write_parquet
from laws import check_shared_iterator, roundtrip

from exactbatch import DataLoader, certify, parquet_source
from exactbatch.adapters.minibatch import check_exact_batches

# a list of chunks is counted ("auto"), with a warning that says so
pytestmark = pytest.mark.filterwarnings("ignore:total_size=.auto.:UserWarning")


def pair(n: int, d: int = 3, l: int = 1):  # noqa: E741
    rows = np.arange(n)
    return make_x(rows, d), make_y(rows, l)


def data(n: int, seed: int = 0, integers: bool = False):
    rng = np.random.default_rng(seed)
    if integers:
        return rng.integers(-50, 50, (n, 3)).astype(float), rng.integers(-9, 9, (n, 1)) * 1.0
    return rng.standard_normal((n, 3)), rng.standard_normal((n, 1))


def source(kind: str, x, y, tmp_path):
    """``(source, extra loader kwargs)`` of the rows ``x, y`` as ``kind``."""
    n = len(x)
    if kind in ("pair", "elastic"):
        return (x, y), {"elastic": kind == "elastic"}
    cuts = [min(c, n) for c in (0, 4, 4, 17, 30, n)]  # an empty chunk among them
    chunks = [(x[a:z], y[a:z]) for a, z in zip(cuts[:-1], cuts[1:], strict=True)]
    if kind == "list":
        return chunks, {"buffer_size": 9}
    if kind == "factory":  # a declared N
        return (lambda: iter(chunks)), {"buffer_size": 9, "total_size": n}
    raise AssertionError(kind)


def per_row(xb, yb):
    """A per-row metric: the squared error of a fixed linear model (float64)."""
    w = np.array([0.5, -1.25, 2.0])
    return (xb @ w - yb[:, 0]) ** 2


KINDS = ["pair", "elastic", "list", "factory"]


@pytest.mark.parametrize("integers", [False, True], ids=["float", "integer"])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("kind", KINDS)
def test_a_masked_metric_summed_over_ranks_is_the_single_process_sum(
    kind, shuffle, integers, tmp_path
):
    """An evaluation loop over S in {1, 2, 3, 4} ranks: every rank runs len(loader) steps
    of batch_size rows; the mask-weighted metric summed over the ranks equals the sum
    over every row in one process (exactly for integer-valued data, else to 1e-12
    relative), and the rows counted are each row once."""
    n, b = 43, 5
    x, y = data(n, integers=integers)
    want = per_row(x, y).sum()
    for S in (1, 2, 3, 4):
        src, kw = source(kind, x, y, tmp_path)
        total, rows, steps = 0.0, [], set()
        for s in range(S):
            loader = DataLoader(
                src, b, num_shards=S, shard_index=s, shuffle=shuffle, seed=3,
                even_batches="pad", with_rows=True, **kw,
            )  # fmt: skip
            count = 0
            for xb, yb, ids_, mask in loader:
                assert xb.shape == (b, 3) and yb.shape == (b, 1) and mask.dtype == bool
                total += float((per_row(xb, yb) * mask).sum())
                rows += ids_[mask].tolist()
                count += 1
            assert count == len(loader)
            steps.add(count)
        assert len(steps) == 1, f"S={S}: ranks ran {steps} steps"
        assert sorted(rows) == list(range(n)), f"S={S}: not every row once"
        if integers:
            assert total == want, (S, total, want)
        else:
            assert abs(total - want) <= 1e-12 * abs(want), (S, total, want)


@pytest.mark.parametrize(
    "n, b, S, counts",
    [(23, 4, 3, [2, 2, 2]), (41, 5, 2, [5, 5]), (40, 5, 3, [3, 3, 3]), (3, 2, 4, [1, 1, 1, 1])],
)
def test_every_shard_has_the_largest_shards_batch_count(n, b, S, counts):
    """len() is ceil(ceil(n / S) / b) on every shard (contiguous), the count handed out;
    a shard of fewer real batches ends in whole padding batches (mask all False)."""
    for s in range(S):
        loader = DataLoader(pair(n), b, num_shards=S, shard_index=s, even_batches="pad")
        batches = list(loader)
        assert len(loader) == len(batches) == counts[s]
        real = -(-((s + 1) * n // S - s * n // S) // b)
        for k, (xb, _, mask) in enumerate(batches):
            assert xb.shape[0] == b
            assert mask.any() == (k < real), f"shard {s}: batch {k} of {real} real"


def test_an_empty_shard_hands_out_padding_only():
    loader = DataLoader(pair(2), 3, num_shards=3, shard_index=0, even_batches="pad")
    (batch,) = list(loader)
    assert not batch[2].any() and not batch[0].any() and batch[0].shape == (3, 3)
    assert loader.last_rows == 0


def _cut_and_resume(make, k):
    """Take k batches (fewer than the epoch's), resume a fresh loader from the state
    (through JSON): the rest of the epoch, then the next."""
    ref = make()
    want = [[ids(unpad(b)[0]) for b in ref], [ids(unpad(b)[0]) for b in ref]]
    cut = make()
    it = iter(cut)
    for _ in range(k):
        next(it)
    state = roundtrip(cut.state_dict())
    resumed = make()
    resumed.load_state_dict(state)
    got = [ids(unpad(b)[0]) for b in resumed]
    assert got == want[0][k:]
    assert [ids(unpad(b)[0]) for b in resumed] == want[1]
    return want[0]


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("kind", ["pair", "elastic", "list"])
def test_resume_in_the_middle_of_the_padding(kind, prefetch, tmp_path):
    """The padded shard cut before every batch, its padding batch among them: the
    resumed loader hands out the rest, padding included, then the next epoch."""
    # contiguous: shards of 8, 9, 9 rows, shard 0 padded ([4, 4, 0]); elastic: 10 global
    # batches, shard 2 takes 3 of them and a padding batch ([4, 4, 4, 0])
    n, b, S = (40, 4, 3) if kind == "elastic" else (26, 4, 3)
    x, y = pair(n)
    src, kw = source(kind, x, y, tmp_path)
    shard = 2 if kind == "elastic" else 0

    def make():
        return DataLoader(
            src, b, num_shards=S, shard_index=shard, even_batches="pad", seed=1,
            prefetch=prefetch, **kw,
        )  # fmt: skip

    first = make()
    sizes = [len(ids(unpad(bt)[0])) for bt in first]
    assert sizes == ([4, 4, 4, 0] if kind == "elastic" else [4, 4, 0])
    for k in range(len(sizes)):
        _cut_and_resume(make, k)


def test_elastic_pad_resumes_at_another_shard_count_and_certifies():
    """Elastic + pad: a state taken at S=2 after k batches (in lockstep) resumes at S=3;
    the rows of the two runs are every row once, each run's ranks step equally, and the
    states certify the epoch."""
    n, b = 47, 4  # 12 global batches
    x, y = pair(n)
    for k in range(0, 6):
        first = [
            DataLoader((x, y), b, num_shards=2, shard_index=s, elastic=True, even_batches="pad")
            for s in range(2)
        ]
        rows, states = [], []
        for loader in first:
            it = iter(loader)
            for _ in range(k):
                rows += ids(unpad(next(it))[0])
            states.append(roundtrip(loader.state_dict()))
        assert len({s["global_batches_done"] for s in states}) == 1
        steps = set()
        for s in range(3):
            loader = DataLoader(
                (x, y), b, num_shards=3, shard_index=s, elastic=True, even_batches="pad"
            )
            loader.load_state_dict(states[0])
            got = collect(loader)
            steps.add(len(got))
            rows += [r for batch in got for r in batch]
            states.append(roundtrip(loader.state_dict()))
        assert len(steps) == 1
        assert sorted(rows) == list(range(n)), f"k={k}"
        assert certify(states), f"k={k}: {certify(states)}"


def test_pad_and_true_do_not_resume_each_other():
    """A state records even_batches as given: "pad" and True are other settings."""
    for theirs, mine in (("pad", True), (True, "pad"), ("pad", False)):
        loader = DataLoader(pair(30), 4, num_shards=2, even_batches=theirs)
        next(iter(loader))
        state = roundtrip(loader.state_dict())
        assert state["even_batches"] == theirs
        other = DataLoader(pair(30), 4, num_shards=2, even_batches=mine)
        with pytest.raises(ValueError, match="even_batches"):
            other.load_state_dict(state)


def test_a_run_with_padding_certifies_every_row():
    """The records of a pad run say no row is left out by design: certify checks the whole
    epoch, and leaving a rank's states out is not certified."""
    states = []
    for s in range(3):
        loader = DataLoader(pair(41), 4, num_shards=3, shard_index=s, even_batches="pad")
        collect(loader)
        states.append(roundtrip(loader.state_dict()))
    cert = certify(states)
    assert cert and cert.epochs[0].handed == 41
    assert not all(rec["drops"] for st in states for rec in st["history"])
    assert not certify(states[1:])


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_stream_longer_than_its_declared_total_size_is_an_error_not_a_desync(prefetch, shuffle):
    """A factory declaring N=40 that yields 50 rows: the last shard's pass holds more
    batches than every shard hands out: its len(loader) batches go out, then a
    ValueError naming total_size (at every call after too); the shard whose rows fit
    hands out its batches."""
    chunks = chunks_of([10, 10, 10, 10, 10], 3, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TotalSizeWarning of the audit
        ok = DataLoader(lambda: iter(chunks), 5, num_shards=2, shard_index=0,
                        total_size=40, even_batches="pad", shuffle=shuffle)  # fmt: skip
        assert len(collect(ok)) == len(ok) == 4
        long = DataLoader(lambda: iter(chunks), 5, num_shards=2, shard_index=1, total_size=40,
                          even_batches="pad", shuffle=shuffle, prefetch=prefetch)  # fmt: skip
        it, handed = iter(long), 0
        with pytest.raises(ValueError, match=r"(?s)even_batches='pad'.*total_size=40.*wrong"):
            for _ in it:
                handed += 1
        assert handed == len(long) == 4
        with pytest.raises(ValueError, match="total_size"):
            next(it)


def test_a_stream_shorter_than_its_declared_total_size_pads_more(tmp_path):
    """N declared too large: the shard's pass ends early, and padding fills its count."""
    chunks = chunks_of([10, 10, 10], 3, 1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(lambda: iter(chunks), 5, total_size=40, even_batches="pad")
        batches = list(loader)
    assert len(batches) == len(loader) == 8
    assert sorted(r for b in batches for r in ids(unpad(b)[0])) == list(range(30))


def test_parquet_with_padding(tmp_path):
    write_parquet(tmp_path / "a.parquet", [7, 7, 9], 0, d=3, l=1)
    rows = []
    counts = set()
    for s in range(3):
        src = parquet_source(tmp_path / "a.parquet", labels=["y0"])
        loader = DataLoader(src, 4, num_shards=3, shard_index=s, even_batches="pad")
        got = collect(loader)
        counts.add(len(got))
        rows += [r for b in got for r in b]
    assert counts == {2} and sorted(rows) == list(range(23))


# -- what is refused ---------------------------------------------------------------------


@pytest.mark.parametrize("value", ["Pad", "True", "False", ""])
def test_another_string_is_a_value_error_naming_even_batches(value):
    with pytest.raises(ValueError, match=r"even_batches must be False, True or 'pad'"):
        DataLoader(pair(10), 4, even_batches=value)


@pytest.mark.parametrize("value", [0, 1, 1.0, None, ["pad"]])
def test_another_type_is_a_type_error_naming_even_batches(value):
    with pytest.raises(TypeError, match=r"even_batches must be False, True or 'pad'"):
        DataLoader(pair(10), 4, even_batches=value)


def test_numpy_bools_are_accepted():
    assert DataLoader(pair(10), 4, even_batches=np.bool_(True)).even_batches is True


def test_pad_with_drop_last_is_refused():
    with pytest.raises(ValueError, match="even_batches='pad'.*drop_last"):
        DataLoader(pair(10), 4, even_batches="pad", drop_last=True)


def test_next_into_is_refused_with_a_pointer_to_iter():
    loader = DataLoader(pair(10), 4, even_batches="pad")
    bx, by = np.empty((4, 3)), np.empty((4, 1))
    with pytest.raises(ValueError, match=r"next_into.*iter\(loader\)"):
        loader.next_into(bx, by)
    assert len(collect(loader)) == 3  # nothing was claimed


def test_a_stream_of_unknown_size_is_refused():
    with pytest.raises(ValueError, match="even_batches='pad' needs the stream's size"):
        DataLoader(chunks_of([5, 5], 3, 1), 4, total_size=None, even_batches="pad")


def test_the_fit_helpers_refuse_pad():
    """The shared check, and each fit helper through it (where its package is installed)."""
    loader = DataLoader(pair(12), 4, even_batches="pad")
    with pytest.raises(ValueError, match="even_batches='pad'.*evaluation"):
        check_exact_batches(loader, "fit")
    for name in ("numpyro", "pymc"):
        try:
            module = importlib.import_module(f"exactbatch.{name}")
            importlib.import_module(name)
        except ImportError:
            continue
        with pytest.raises(ValueError, match="even_batches='pad'"):
            if name == "numpyro":
                module.fit(None, None, loader, 1, rng_key=None)
            else:
                module.fit(loader, 1, model=None)


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("kind", ["pair", "elastic", "list"])
def test_one_iterator_shared_by_threads_hands_out_every_batch_once(kind, prefetch, tmp_path):
    """Threads calling next() on one iterator of the padded shard: every batch, padding
    included, once (laws.check_shared_iterator), and the ledger passes."""
    n = 40 if kind == "elastic" else 26
    src, kw = source(kind, *pair(n), tmp_path)
    shard = 2 if kind == "elastic" else 0

    def make():
        return DataLoader(src, 4, num_shards=3, shard_index=shard, even_batches="pad",
                          prefetch=prefetch, seed=2, **kw)  # fmt: skip

    want = collect(make())
    assert [] in want  # a padding batch among them
    check_shared_iterator(make, want, 4, 3, 1)


def test_a_stream_that_yields_no_row_cannot_be_padded():
    """N declared, no row at all: the widths a padding batch needs are unknown."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(lambda: iter([]), 4, total_size=10, even_batches="pad")
        with pytest.raises(ValueError, match="yielded no rows.*total_size=10"):
            list(loader)
