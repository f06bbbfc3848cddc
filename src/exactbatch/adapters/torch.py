"""PyTorch tensors from a DataLoader: zero-copy by default, cast and moved on request.

``as_torch(loader)`` is an iterable with ``len()``: each ``iter()`` is one
epoch of the loader (the loader's own rule: the next epoch, a fresh seeded
shuffle), yielding ``(xb, yb)`` tensors of shapes (rows, d) and (rows, l).

Costs: without ``device``/``pin_memory``, and with ``dtype`` None or the
loader's own (``DataLoader(..., dtype=np.float32)`` gives ``torch.float32``),
a batch is ``torch.from_numpy`` of the loader's arrays - no copy, the tensor
shares the array's memory (the loader never reuses a batch's arrays, so this
is safe). So for float32 tensors build the loader with ``dtype=np.float32``:
its gather casts as it copies the rows. A ``dtype`` other than the loader's
is one more copy on the CPU, before any move, so less is sent to a device;
``pin_memory`` (with CUDA) gathers each batch straight into page-locked
memory, a buffer of a pool reused once nothing holds it
(:mod:`exactbatch.adapters.torch_pinned`), so that the move to a CUDA device
is asynchronous (``non_blocking=True``) and costs no copy first; with a cast,
it is one more copy, into a pinned tensor.

``TorchIterable`` (``as_torch(loader).dataset()``) is the same iterable as a
``torch.utils.data.IterableDataset`` for code that expects one. Batches are
already formed and the loader shards and reads by itself, so wrap it as
``torch.utils.data.DataLoader(ds, batch_size=None)`` in the main process
(``num_workers=0``): a worker process would each run a copy of the loader and
hand out every batch once per worker, so iterating in a worker is an error.

torch is imported when a function here first needs it, never at import, so
``distributed_shard()`` works without torch installed.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from exactbatch.adapters.torch_pinned import Buffer, PinnedPool, pinned_allocator, use_counter
from exactbatch.checks import check_flag
from exactbatch.distributed import distributed_shard
from exactbatch.extras import need
from exactbatch.hints import Device
from exactbatch.loader import DataLoader

if TYPE_CHECKING:
    import torch

# A batch as tensors: (xb, yb), then the row ids (with_rows), then the mask ("pad")
Tensors = tuple["torch.Tensor", ...]
# Where each part of a batch lies in a pinned buffer: (start, end, dtype, shape)
Span = tuple[int, int, np.dtype, tuple[int, ...]]

# TorchIterable is made on first access (module __getattr__), so torch loads lazily.
__all__ = ["TorchIterable", "TorchLoader", "as_torch", "distributed_shard"]  # noqa: F822


def _torch() -> ModuleType:
    return need("torch", by="exactbatch.torch", package="PyTorch", extra="torch")


class TorchLoader:
    """An epoch-per-``iter()`` iterable of ``(xb, yb)`` tensors; see :func:`as_torch`.

    Attributes: ``loader`` (the wrapped loader), ``dtype`` (the tensors' dtype:
    the one asked for, else the loader's, when it has one), ``device`` and
    ``pin_memory`` (True only when asked for and CUDA is available, or an
    ``allocator`` is given). ``len()`` is ``len(loader)``, the batches per epoch.

    ``allocator`` (for tests, and memory of one's own): ``nbytes -> tensor``, a
    1-D uint8 CPU tensor, used by the pinned pool in place of page-locked memory
    (then ``pin_memory=True`` holds without CUDA).
    """

    dtype: torch.dtype | None
    device: torch.device | None

    def __init__(
        self,
        loader: DataLoader,
        *,
        dtype: Any = None,
        device: Device = None,
        pin_memory: bool = False,
        allocator: Callable[[int], torch.Tensor] | None = None,
    ) -> None:
        torch = _torch()
        if isinstance(loader, (tuple, list)) or hasattr(loader, "shape"):
            # an array (or pair) iterates row by row: refused here, not deep in an epoch
            raise TypeError(
                f"as_torch needs an exactbatch DataLoader; got {type(loader).__name__}, "
                "data itself: wrap it first, as_torch(DataLoader(data, batch_size=...))"
            )
        if not hasattr(loader, "__iter__"):
            raise TypeError(
                f"as_torch needs an exactbatch DataLoader (an iterable of (x, y) arrays); "
                f"got {type(loader).__name__}"
            )
        if dtype is not None and not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype such as torch.float32; got {dtype!r}")
        self.loader = loader
        if dtype is None and hasattr(loader, "dtype"):  # the loader's, so no cast
            dtype = getattr(torch, np.dtype(loader.dtype).name)
        self.dtype = dtype
        self.device = None if device is None else torch.device(device)  # bad names fail here
        asked = check_flag("pin_memory", pin_memory)
        self.pin_memory = asked and (allocator is not None or torch.cuda.is_available())
        if asked and not self.pin_memory:
            warnings.warn(
                "as_torch(pin_memory=True): CUDA is not available, so there is no page-locked "
                "memory to pin: batches stay in ordinary memory (zero-copy tensors)",
                RuntimeWarning,
                stacklevel=3,
            )
        # Gathered straight into the pool's pinned buffers: a loader with next_into
        # whose float dtype is the tensors' (a cast makes a new tensor anyway), and not
        # of even_batches="pad" (its masks come from iter(): pinned as they are copied).
        self._pool: PinnedPool | None = None
        if (
            self.pin_memory
            and hasattr(loader, "next_into")
            and getattr(loader, "even_batches", False) != "pad"
            and (dtype == getattr(torch, np.dtype(getattr(loader, "dtype", "O")).name, None))
        ):
            self._pool = PinnedPool(allocator or pinned_allocator(torch), use_counter(torch))

    def __len__(self) -> int:
        return len(self.loader)

    def __repr__(self) -> str:
        return (
            f"TorchLoader({self.loader!r}, dtype={self.dtype}, device={self.device}, "
            f"pin_memory={self.pin_memory})"
        )

    def _convert(self, a: np.ndarray) -> torch.Tensor:
        t: torch.Tensor = _torch().from_numpy(a)  # shares a's memory
        # (class labels, DataLoader(label_dtype=np.int64), stay integers: a long tensor)
        if self.dtype is not None and t.dtype != self.dtype and a.dtype.kind == "f":
            t = t.to(self.dtype)  # cast on the CPU: fewer bytes to move
        if self.pin_memory:
            t = t.pin_memory()
        if self.device is not None:
            t = t.to(self.device, non_blocking=self.pin_memory)
        return t

    def _convert_ids(self, a: np.ndarray) -> torch.Tensor:
        t: torch.Tensor = _torch().from_numpy(a)  # int64 ids, or a bool mask; shared, never cast
        if self.pin_memory:
            t = t.pin_memory()
        if self.device is not None:
            t = t.to(self.device, non_blocking=self.pin_memory)
        return t

    def __iter__(self) -> Iterator[Tensors]:
        if self._pool is not None:
            return self._pinned()
        return self._converted()

    def _pinned(self) -> Iterator[Tensors]:
        """An epoch gathered by ``next_into`` into the pool's buffers: x, y (and the
        row ids) of a batch in one buffer, each part 64-byte aligned."""
        torch, loader, pool = _torch(), self.loader, self._pool
        assert pool is not None
        b, d, l = loader.batch_size, loader.d, loader.l  # noqa: E741
        # iter()'s rule, each iter() the next epoch: begun by iter() itself, whose
        # iterator is dropped unused (with prefetch, batches it read ahead are left with
        # the cursor, and next_into hands them out first, copied into the buffers)
        it = iter(loader)
        first = None
        if loader.d is None:  # a stream not read yet: its first batch learns the widths
            first = next(it, None)
            if first is None:
                return
        del it
        d, l = loader.d, loader.l  # noqa: E741
        assert d is not None and l is not None  # (known once a batch was read)
        parts: list[tuple[Any, tuple[int, ...]]] = [
            (loader.dtype, (b, d)),
            (loader.label_dtype, (b, l)),
        ]
        if loader.with_rows:
            parts.append((np.dtype(np.int64), (b,)))
        spans: list[Span] = []
        end = 0
        for dt, shape in parts:
            nbytes = int(np.prod(shape)) * np.dtype(dt).itemsize
            spans.append((end, end + nbytes, np.dtype(dt), shape))
            end = -(-(end + nbytes) // 64) * 64
        while True:
            buf = pool.take(end)
            arrays = [buf.base[a:z].numpy().view(dt).reshape(shape) for a, z, dt, shape in spans]
            if first is not None:  # (handed out already: copied into pinned memory)
                n = len(first[0])
                for out, got in zip(arrays, first, strict=True):
                    out[:n] = got
                first = None
            else:
                try:
                    n = loader.next_into(*arrays)
                except BaseException:
                    del arrays
                    pool.give_back(buf)
                    raise
            del arrays  # (the pool counts who holds the buffer: not these)
            if n == 0:
                pool.give_back(buf)
                return
            yield self._views(torch, buf, spans, n)

    def _views(self, torch: ModuleType, buf: Buffer, spans: list[Span], n: int) -> Tensors:
        """Batch ``n`` rows of ``buf`` as tensors (moved to the device: the copy's event
        kept, so the buffer is reused only once it is done)."""
        out = tuple(
            buf.base[a:z].view(getattr(torch, dt.name)).view(shape)[:n] for a, z, dt, shape in spans
        )
        if self.device is None:
            return out
        moved = tuple(t.to(self.device, non_blocking=True) for t in out)
        if self.device.type == "cuda":
            buf.event = torch.cuda.Event()
            buf.event.record()
        return moved

    def _converted(self) -> Iterator[Tensors]:
        convert = self._convert
        if getattr(self.loader, "even_batches", False) == "pad":  # (x, y[, rows], mask)
            for *arrays, mask in self.loader:
                ids = [self._convert_ids(a) for a in arrays[2:]]  # the ids, with_rows
                yield convert(arrays[0]), convert(arrays[1]), *ids, self._convert_ids(mask)
            return
        if getattr(self.loader, "with_rows", False):
            for xb, yb, rows in self.loader:
                yield convert(xb), convert(yb), self._convert_ids(rows)
            return
        for xb, yb in self.loader:
            yield convert(xb), convert(yb)

    def dataset(self) -> torch.utils.data.IterableDataset[Tensors]:
        """This iterable as a ``torch.utils.data.IterableDataset``.

        Use it as ``torch.utils.data.DataLoader(ds, batch_size=None)`` (the
        batches are already formed) with ``num_workers=0`` (the loader shards
        and reads by itself; iterating in a worker process is a
        ``RuntimeError``).
        """
        made: torch.utils.data.IterableDataset[Tensors] = _iterable_class()(self)
        return made


def as_torch(
    loader: DataLoader, *, dtype: Any = None, device: Device = None, pin_memory: bool = False
) -> TorchLoader:
    """Wrap an exactbatch ``DataLoader`` to yield PyTorch tensors.

    Each ``iter()`` is one epoch of ``loader``; ``len()`` is ``len(loader)``.
    Batches are ``(xb, yb)`` tensors of shapes (rows, d) and (rows, l) (labels
    stay 2-D, like the loader's, matching an ``nn.Linear(d, l)`` output).
    Class labels (``DataLoader(..., label_dtype=np.int64)``) come as a long
    tensor, never cast by ``dtype``: ``CrossEntropyLoss`` takes
    ``yb[:, 0]`` as it is.

    * ``dtype=None`` (or the loader's own, ``torch.float64`` for a default
      loader, ``torch.float32`` for ``DataLoader(..., dtype=np.float32)``):
      the tensors share the loader's arrays (``torch.from_numpy``, no copy);
      another dtype casts on the CPU, a second pass over every batch: give
      the loader that dtype instead, where it is float32 or float64.
    * ``device``: each tensor is moved with ``.to(device, non_blocking=pin_memory)``.
    * A loader built with ``with_rows=True`` gives ``(xb, yb, rows)``: ``rows``
      the batch's global row ids, an int64 tensor (``torch.from_numpy``, no
      copy; never cast by ``dtype``), moved to ``device`` like the others.
    * A loader built with ``even_batches="pad"`` gives ``(xb, yb, mask)`` (and
      ``(xb, yb, rows, mask)`` with ``with_rows``): every batch has batch_size
      rows, ``mask`` a bool tensor, True for real rows (padded rows are zeros,
      their ids -1), never cast, moved to ``device`` like the others. Weigh a
      per-row metric by it: summed over the ranks, it is the whole data's.
    * ``pin_memory=True`` (with CUDA): each batch is gathered straight into
      page-locked memory (the loader's ``next_into``, into a buffer of a pool
      reused once no tensor of it is alive and its copy to the device is
      done), for asynchronous copies to a CUDA device; with a ``dtype`` other
      than the loader's, the cast batch is copied into pinned memory instead.
      Without CUDA there is no page-locked memory: a ``RuntimeWarning``, and
      batches stay in ordinary memory (zero-copy tensors).

    ``.dataset()`` gives the same batches as a ``torch.utils.data.IterableDataset``.
    """
    return TorchLoader(loader, dtype=dtype, device=device, pin_memory=pin_memory)


_TORCH_ITERABLE: type | None = None


def _iterable_class() -> type:
    """The ``TorchIterable`` class, defined on first use so that torch loads lazily."""
    global _TORCH_ITERABLE
    if _TORCH_ITERABLE is not None:
        return _TORCH_ITERABLE
    torch = _torch()
    from torch.utils.data import IterableDataset

    class TorchIterable(IterableDataset[Tensors]):
        """A :class:`TorchLoader` as a ``torch.utils.data.IterableDataset``.

        Each ``iter()`` is one epoch of the wrapped loader; ``len()`` is its
        batch count. Use with ``torch.utils.data.DataLoader(ds, batch_size=None)``
        and ``num_workers=0``.
        """

        def __init__(self, source: TorchLoader | DataLoader) -> None:
            super().__init__()
            if not isinstance(source, TorchLoader):
                source = TorchLoader(source)
            self.source = source

        def __len__(self) -> int:
            return len(self.source)

        def __iter__(self) -> Iterator[Tensors]:
            if torch.utils.data.get_worker_info() is not None:
                raise RuntimeError(
                    "an exactbatch TorchIterable was iterated in a DataLoader worker process: "
                    "every worker would hand out every batch. Use "
                    "torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0); the "
                    "exactbatch loader shards and reads by itself"
                )
            return iter(self.source)

        def __repr__(self) -> str:
            return f"TorchIterable({self.source!r})"

    TorchIterable.__module__ = __name__
    TorchIterable.__qualname__ = "TorchIterable"  # pickled by name via __getattr__
    _TORCH_ITERABLE = TorchIterable
    return TorchIterable


def __getattr__(name: str) -> type:
    if name == "TorchIterable":  # module attribute, made (and torch imported) on first use
        return _iterable_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
