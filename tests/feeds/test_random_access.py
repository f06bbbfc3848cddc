"""The random-access feed (exactbatch.feeds.random_access): its whole epoch order is
computed in the background, on a daemon thread of its own, errors kept for whoever
asks for the result."""

from __future__ import annotations

import threading

import pytest

from exactbatch.feeds import random_access


def test_the_whole_order_is_computed_on_a_named_daemon_thread():
    seen = {}

    def compute():
        me = threading.current_thread()
        seen.update(name=me.name, daemon=me.daemon, main=me is threading.main_thread())
        return 42

    assert random_access._in_background(compute).result(timeout=60) == 42
    assert seen == {"name": "exactbatch-order", "daemon": True, "main": False}


def test_an_error_computing_the_whole_order_waits_in_the_future():
    def compute():
        raise MemoryError("no room for the whole order")

    fut = random_access._in_background(compute)
    with pytest.raises(MemoryError, match="no room for the whole order"):
        fut.result(timeout=60)
