"""Random-access readers (sources/random_access.py, sources/kinds.py): a sharded dataset
is a random-access source, read as its parts concatenated.

A loader over an NdfDataset gives the very batches of the same loader over one
.ndf holding the parts' rows in order, for every setting that shapes an epoch;
a shard opens only the parts its rows lie in.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from helpers import collect, make_data, write_ndf_dataset

from exactbatch import DataLoader, open_ndf, open_ndf_dataset, save_ndf
from exactbatch.sources.kinds import open_source
from exactbatch.sources.random_access import NdfReader

SIZES = [13, 0, 30, 1, 21, 9]  # uneven, an empty part among them
N = sum(SIZES)


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """(the sharded dataset's folder, one .ndf of the same rows)."""
    folder = tmp_path_factory.mktemp("ra")
    one = folder / "one.ndf"
    save_ndf(one, make_data(N, 3, 2))
    return write_ndf_dataset(folder / "ds", SIZES, d=3, l=2), str(one)


def test_a_dataset_is_a_random_access_source(both):
    with open_ndf_dataset(both[0]) as ds:
        reader = open_source(ds)
    assert isinstance(reader, NdfReader)
    assert (reader.n, reader.d, reader.l) == (N, 3, 2)
    out_x, out_y = np.empty((4, 3)), np.empty((4, 2))
    reader.read(slice(11, 15), out_x, out_y)  # the reader keeps its own share
    assert out_x[:, 0].tolist() == [11, 12, 13, 14]


SETTINGS = [
    dict(shuffle=s, drop_last=dl, num_shards=k, elastic=el, even_batches=ev)
    for s, dl, k, el, ev in itertools.product(
        (False, True), (False, True), (1, 3), (False, True), (False, True)
    )
]


@pytest.mark.parametrize("batch_size", [4, 16])
@pytest.mark.parametrize(
    "settings", SETTINGS, ids=lambda s: "-".join(f"{k}={int(v)}" for k, v in s.items())
)
def test_same_batches_as_one_file(both, settings, batch_size):
    """Every shard, two epochs: the batches of a loader over the dataset equal those of
    the same loader over one .ndf holding the parts' rows concatenated."""
    folder, one = both
    for s in range(settings["num_shards"]):
        got, want = [], []
        for source, out in ((open_ndf_dataset(folder), got), (open_ndf(one), want)):
            loader = DataLoader(source, batch_size, seed=7, shard_index=s, **settings)
            source.close()
            for _ in range(2):
                out.append(collect(loader, 3, 2))
            loader.close()
        assert got == want


@pytest.mark.parametrize("shard", [0, 1, 2])
def test_a_shard_opens_only_its_parts(both, shard):
    """Contiguous sharding: after a shuffled epoch a shard has opened exactly the
    non-empty parts that hold rows of its range."""
    with open_ndf_dataset(both[0]) as ds:
        loader = DataLoader(ds, 5, shuffle=True, num_shards=3, shard_index=shard)
        collect(loader)
        a, b = shard * N // 3, (shard + 1) * N // 3
        starts = ds.starts
        want = tuple(
            k for k in range(len(SIZES)) if SIZES[k] and starts[k] < b and starts[k + 1] > a
        )
        assert ds.open_parts == want
        loader.close()


def test_prefetch_default_as_for_one_file(both):
    """Local: as an .ndf file (none for small batches, 2 from 256 KiB a batch)."""
    with open_ndf_dataset(both[0]) as ds:
        assert DataLoader(ds, 8).prefetch == 0
        assert DataLoader(ds, 1 << 14).prefetch == 2  # 16384 rows * 40 bytes = 640 KiB


def test_prefetch_default_of_a_url_is_two_whatever_the_batch(tmp_path):
    """At a URL every batch is a round trip: 2 batches ahead even for the smallest."""
    fsspec = pytest.importorskip("fsspec")
    fs = fsspec.filesystem("memory")
    save_ndf(tmp_path / "u.ndf", make_data(20, 3, 2))
    fs.pipe_file("/exactbatch-ra/u.ndf", (tmp_path / "u.ndf").read_bytes())
    try:
        with open_ndf("memory://exactbatch-ra/u.ndf") as f:
            reader = NdfReader(f)
        assert [reader.prefetch_default(b) for b in (0, 40, 1 << 20)] == [2, 2, 2]
        reader.close()
        with open_ndf(tmp_path / "u.ndf") as f:
            local = NdfReader(f)
        assert [local.prefetch_default(b) for b in (40, (256 << 10) - 1, 256 << 10)] == [0, 0, 2]
        local.close()
    finally:
        fs.rm("/exactbatch-ra", recursive=True)
