"""The shuffle buffer's plan (exactbatch.batching.buffer): its size in rows, one piece or
two halves, and the window of rows a row can be mixed with (the module docs' rule)."""

from __future__ import annotations

from exactbatch.batching.buffer import DEFAULT_BUFFER_BYTES, full_mix_buffer, mixing_window


def test_the_default_buffer_holds_64_mib_of_rows():
    """buffer_size=None: as many rows of d + l float64 as fill 64 MiB (rows of no values
    count as one value each)."""
    assert mixing_window(10, None, (3, 1)) == DEFAULT_BUFFER_BYTES // 32
    assert mixing_window(10, None, (0, 0)) == DEFAULT_BUFFER_BYTES // 8


def test_the_window_is_the_buffer_at_least_one_batch_and_never_past_the_stream():
    assert mixing_window(10, 100, (3, 1)) == 100
    assert mixing_window(100, 10, (3, 1)) == 100  # a buffer under one batch is one batch
    assert mixing_window(10, 100, (3, 1), size_hint=40) == 40
    assert mixing_window(10, 100, (3, 1), size_hint=1) == 1
    assert mixing_window(10, 100, (3, 1), size_hint=0) == 1


def test_halves_when_chunked_larger_than_the_buffer_and_16_chunks_fit():
    """Two halves (a window of half the buffer, at least a batch) only for a chunk-indexed
    source (``ahead``: its chunks' rows) of known size larger than the buffer, when the
    buffer holds at least 16 chunks."""
    assert mixing_window(10, 1001, (3, 1), size_hint=5000, ahead=10) == 500
    assert mixing_window(10, 160, (3, 1), size_hint=5000, ahead=10) == 80  # 16 chunks
    assert mixing_window(10, 159, (3, 1), size_hint=5000, ahead=10) == 159  # fewer: one piece
    assert mixing_window(100, 160, (3, 1), size_hint=5000, ahead=10) == 100  # half < a batch
    assert mixing_window(10, 160, (3, 1), size_hint=160, ahead=10) == 160  # the stream fits
    assert mixing_window(10, 160, (3, 1), size_hint=161, ahead=10) == 80
    assert mixing_window(10, 160, (3, 1), size_hint=None, ahead=10) == 160  # size unknown
    assert mixing_window(10, 160, (3, 1), size_hint=5000, ahead=None) == 160  # not chunked


def test_a_full_mix_needs_a_buffer_of_the_whole_stream_or_1_when_it_fits_in_a_batch():
    assert full_mix_buffer(10, 5) == 1
    assert full_mix_buffer(10, 10) == 1
    assert full_mix_buffer(10, 11) == 11
    assert mixing_window(10, full_mix_buffer(10, 11), (3, 1), size_hint=11, ahead=1) == 11
