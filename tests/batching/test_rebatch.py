"""Re-batching's carry (exactbatch.batching.rebatch): the rows of a batch completed
across chunks, in room that grows by doubling from 1024 rows as rows arrive and never
past the batch size, so a huge batch_size costs only the rows that come."""

from __future__ import annotations

import numpy as np

from exactbatch.batching.rebatch import _room, rebatch
from exactbatch.order.digest import rows_digest


def test_the_carry_grows_by_doubling_as_rows_arrive_never_past_the_batch():
    cx, cy = _room(None, None, 10, 5000, 3, 1)
    assert cx.shape == (1024, 3) and cy.shape == (1024, 1)  # at least 1024 rows at first
    assert cx.dtype == cy.dtype == np.float64
    cx[:10], cy[:10] = 1.0, 2.0
    same_x, same_y = _room(cx, cy, 1024, 5000)  # it fits: the same arrays
    assert same_x is cx and same_y is cy
    gx, gy = _room(cx, cy, 1025, 5000)  # doubled, its rows kept
    assert gx.shape == (2048, 3) and gy.shape == (2048, 1)
    assert (gx[:10] == 1.0).all() and (gy[:10] == 2.0).all()
    fx, fy = _room(gx, gy, 3000, 5000)
    assert fx.shape == (4096, 3) and fy.shape == (4096, 1)  # doubled again
    assert _room(gx, gy, 4500, 5000)[0].shape == (4500, 3)  # as needed, over double
    assert _room(fx, fy, 4097, 5000)[0].shape == (5000, 3)  # doubling capped at the batch
    assert _room(None, None, 3000, 5000, 3, 1)[0].shape == (3000, 3)  # as needed at first
    assert _room(None, None, 3, 10, 2, 1)[0].shape == (10, 2)  # never past the batch
    assert _room(None, None, 1, 1, 0, 2)[1].shape == (1, 2)


def test_a_batch_larger_than_the_first_carry_is_completed_across_many_chunks():
    """Batches of 3000 rows from chunks of 700: the carry grows past its first 1024 rows,
    and every batch holds its rows in order, with their digest."""
    chunks = []
    for a in range(0, 10_000, 700):
        x = np.arange(a, min(a + 700, 10_000), dtype=np.float64)[:, None]
        chunks.append((x, -x, a))
    groups = list(rebatch(chunks, 3000, drop_last=False))
    assert all(len(group) == 1 for group in groups)  # one batch at a time: no more held
    out = [batch for group in groups for batch in group]
    assert [len(x) for x, _, _ in out] == [3000, 3000, 3000, 1000]
    assert np.array_equal(np.concatenate([x[:, 0] for x, _, _ in out]), np.arange(10_000))
    assert all(np.array_equal(y, -x) for x, y, _ in out)
    assert all(d == rows_digest(x[:, 0].astype(np.int64)) for x, _, d in out)


def test_chunks_held_by_columns_give_the_batches_their_arrays_give(monkeypatch):
    """Small batches cut from chunks held column by column (laid out a tile at a time:
    tiles smaller than a chunk here, batches straddling tiles and chunks) are the
    batches the same chunks as arrays give: rows, order, digests and fresh arrays."""
    import exactbatch.batching.rebatch as rb
    from exactbatch.sources.column_chunk import Columns

    monkeypatch.setattr(rb, "_TILE_BYTES", 8 * 3 * 10)  # tiles of 10 rows of 3 values
    chunks, a = [], 0
    for size in (0, 23, 7, 41, 1, 30):
        ids = np.arange(a, a + size, dtype=np.float64)
        chunks.append((np.stack([ids, ids * 2], axis=1), -ids[:, None], a))
        a += size

    def held(x, y, id0):
        return Columns(list(x.T.copy()), len(x)), Columns(list(y.T.copy()), len(y)), id0

    for b in (4, 7, 64):
        want = list(rebatch(chunks, b, drop_last=False, with_rows=True))
        got = list(rebatch([held(*c) for c in chunks], b, drop_last=False, with_rows=True))
        assert len(got) == len(want)
        for [(gx, gy, gd, gr)], [(wx, wy, wd, wr)] in zip(got, want, strict=True):
            np.testing.assert_array_equal(gx, wx)
            np.testing.assert_array_equal(gy, wy)
            assert gd == wd and gr.tolist() == wr.tolist()
        xs = [g[0][0] for g in got]
        assert not any(np.shares_memory(p, q) for p, q in zip(xs, xs[1:], strict=False))
