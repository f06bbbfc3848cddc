"""Page-locked (pinned) buffers for :func:`exactbatch.torch.as_torch`: a pool reused
batch after batch, which the loader gathers into directly (``next_into``), so a batch
costs no copy into pinned memory before its asynchronous move to a CUDA device.

A buffer the pool handed out is reused only once nothing else holds its memory: no
tensor or array made from it is alive outside the pool (its storage's use count is
back to the pool's own references), and the copy to the device that read it has
finished (a CUDA event recorded after it). So a batch the caller keeps is never
overwritten; one it drops is the next batch's buffer. The allocator is injected,
so the pool's logic runs on a CPU (tests give plain memory in its place).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING

from exactbatch.hints import Foreign

if TYPE_CHECKING:
    from torch import Tensor, UntypedStorage

__all__ = ["Buffer", "PinnedPool", "pinned_allocator", "use_counter"]


def use_counter(torch: ModuleType) -> Callable[[UntypedStorage], int]:
    """``storage -> int``: how many tensors and arrays hold a storage, torch's own count
    (``torch._C._storage_Use_Count``, torch's private function: looked up by name). Where
    a torch has none, a count that grows at every query, so that every buffer looks held
    by someone more than when it was made: a buffer is then never reused, only ever new
    (right, and slower), unless it is given back unused."""
    count = getattr(getattr(torch, "_C", None), "_storage_Use_Count", None)
    if count is None:
        # (a constant would equal the buffer's own count, taken by the same function:
        # every lent buffer would look free, and a batch the caller holds be overwritten)
        queries = itertools.count()
        return lambda storage: next(queries)
    return lambda storage: count(storage._cdata)


def pinned_allocator(torch: ModuleType) -> Callable[[int], Tensor]:
    """``nbytes -> tensor``: a 1-D uint8 tensor of page-locked memory (needs CUDA)."""
    return lambda nbytes: torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


class Buffer:
    """One buffer of the pool: its 1-D uint8 tensor, its storage (held, to count who
    else holds it), the count when only the pool does, and the device copy's event."""

    __slots__ = ("base", "event", "nbytes", "own", "storage")

    def __init__(self, tensor: Tensor, use_count: Callable[[UntypedStorage], int]) -> None:
        self.base = tensor
        self.nbytes = tensor.numel()
        self.storage = tensor.untyped_storage()
        self.own = use_count(self.storage)
        self.event: Foreign = None  # a torch.cuda.Event (whose methods are not annotated)


class PinnedPool:
    """Buffers of ``alloc(nbytes)`` (a 1-D uint8 tensor), lent by :meth:`take` and
    reused once free (module docs). ``use_count(storage)``: how many tensors and
    arrays hold a storage (torch's own count). Not thread-safe: one iterator's."""

    def __init__(
        self, alloc: Callable[[int], Tensor], use_count: Callable[[UntypedStorage], int]
    ) -> None:
        self._alloc, self._use_count = alloc, use_count
        self._lent: list[Buffer] = []
        self._free: list[Buffer] = []

    def _busy(self, buf: Buffer) -> bool:
        if buf.event is not None:
            if not buf.event.query():
                return True
            buf.event = None
        return self._use_count(buf.storage) > buf.own

    def take(self, nbytes: int) -> Buffer:
        """A buffer of at least ``nbytes``: a free one (the lent ones nothing holds any
        more come back first), else a new one. Lent until it is free again."""
        lent: list[Buffer] = []
        for buf in self._lent:
            (lent if self._busy(buf) else self._free).append(buf)
        self._lent = lent
        for k, buf in enumerate(self._free):
            if buf.nbytes >= nbytes:
                del self._free[k]
                break
        else:
            buf = Buffer(self._alloc(max(1, nbytes)), self._use_count)
        self._lent.append(buf)
        return buf

    def give_back(self, buf: Buffer) -> None:
        """``buf`` was taken but nothing made from it was handed out: free at once."""
        self._lent.remove(buf)
        self._free.append(buf)

    def sizes(self) -> tuple[int, int]:
        """(lent, free) buffers, for tests and ``repr``."""
        return len(self._lent), len(self._free)

    def clear(self) -> None:
        """Let go of the free buffers (those lent are let go of by their holders)."""
        self._free.clear()
        self._lent.clear()
