"""A streamed epoch's claims (exactbatch.batching.stream_epoch): many batches claimed
at once are the jobs that claims one at a time make."""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch.batching.stream_epoch import PassTally, StreamEpoch, StreamJob, StreamRowsJob


def _pass(with_rows: bool):
    """Groups of 3, 1 and 2 batches of 2 rows (batch k's x holds k), digests 10 + k."""

    def groups():
        k = 0
        for size in (3, 1, 2):
            group = []
            for _ in range(size):
                x, y = np.full((2, 2), float(k)), np.full((2, 1), -float(k))
                ids = (np.arange(2, dtype=np.int64) + 2 * k,) if with_rows else ()
                group.append((x, y, 10 + k, *ids))
                k += 1
            yield group

    return lambda: (groups(), PassTally())


@pytest.mark.parametrize("with_rows", [False, True])
def test_claim_many_makes_the_jobs_claims_one_at_a_time_make(with_rows):
    many, one = StreamEpoch(_pass(with_rows), 0), StreamEpoch(_pass(with_rows), 0)
    jobs: list = []
    many.claim_many(jobs, 2)  # within a group
    many.claim_many(jobs, 5, ahead=True)  # across groups (a prefetch's)
    many.claim_many(jobs, 9, ahead=True)  # to the end
    singles = [one.claim() for _ in range(6)]
    assert one.claim() is None and many.exhausted()
    kind = StreamRowsJob if with_rows else StreamJob
    assert [type(job) for job in jobs] == [kind] * 6
    for k, (a, b) in enumerate(zip(jobs, singles, strict=True)):
        assert (a.k, a.size, a.digest) == (b.k, b.size, b.digest) == (k, 2, 10 + k)
        got = many.take_group([a])[0]
        assert len(got) == (3 if with_rows else 2) and got[0][0, 0] == k and got[1][0, 0] == -k
        out_x, out_y = np.empty((2, 2)), np.empty((2, 1))
        b.fill(out_x, out_y)
        assert out_x.tolist() == got[0].tolist() and out_y.tolist() == got[1].tolist()
        if with_rows:
            assert a.rows.tolist() == [2 * k, 2 * k + 1]
        else:
            assert a.rows is None
    groups = many.take_group(jobs)
    assert [g[0][0, 0] for g in groups] == list(range(6))


@pytest.mark.parametrize("ahead", [False, True])
def test_a_claim_reads_one_group_of_the_pass_at_most_unless_ahead(ahead):
    """A stream's claim makes the batches it claims (their arrays held until handed out):
    one group of the pass at most, and only when it holds none yet (issue 42: claims of
    a group's count read that many batches ahead); a prefetch's (``ahead``) reads on."""
    reads: list[int] = []

    def counted():
        groups, tally = _pass(False)()

        def logged():
            for group in groups:
                reads.append(len(group))
                yield group

        return logged(), tally

    epoch = StreamEpoch(counted, 0)
    got: list[list] = []
    while True:
        jobs: list = []
        epoch.claim_many(jobs, 5, ahead=ahead)
        if not jobs:
            break
        got.append([job.k for job in jobs])
        if not ahead:  # the groups read by now: those the claims took from, no more
            assert sum(reads) == got[-1][-1] + 1, (reads, got)
    want = [[0, 1, 2, 3, 4], [5]] if ahead else [[0, 1, 2], [3], [4, 5]]
    assert got == want and reads == [3, 1, 2]
