"""What the minibatch-inference adapters (PyMC, NumPyro) share.

* :func:`check_exact_batches` refuses a loader that may hand out a batch of
  fewer than ``batch_size`` rows (a partial batch would be scaled by
  N / rows as if it were a full one's worth of data), or padded ones
  (``even_batches="pad"``, an evaluation setting), and
  :func:`check_batch_rows` stops a fit at such a batch when a stream's
  trusted size turns out wrong.
* :func:`check_one_process` refuses a sharded or elastic loader: a fit
  helper runs in one process and combines no gradients across ranks.
* :func:`first_batch` reads the batch the loader hands out next and leaves
  the loader where it stood.

No optional package is imported here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from exactbatch.loader.dataloader import DataLoader

__all__ = [
    "check_batch_rows",
    "check_exact_batches",
    "check_one_process",
    "epoch_length",
    "first_batch",
]


def check_exact_batches(loader: DataLoader, caller: str) -> None:
    """Refuse a loader whose batches are not all exactly ``batch_size`` rows."""
    b, n = loader.batch_size, loader.n
    if getattr(loader, "even_batches", False) == "pad":
        raise ValueError(
            f"{caller} fits on training batches, but the loader has even_batches='pad', "
            f"which is for evaluation: its padded rows (masked) would be fitted as data and "
            f"its batches carry a mask. Build the loader with even_batches=False (or "
            f"drop_last=True for batches of one shape)"
        )
    fix = (
        f"{caller} needs every batch to have exactly batch_size={b} rows (each batch is "
        f"scaled by total_size / batch_size, and the shapes are fixed)"
    )
    if not loader.drop_last:
        if n is None:
            raise ValueError(
                f"{fix}, but this stream has an unknown size (total_size=None) and "
                f"drop_last=False, so its last batch may be partial: pass drop_last=True"
            )
        if n % b:
            raise ValueError(
                f"{fix}, but with drop_last=False the loader's {n} rows end in a partial "
                f"batch of {n % b} rows: pass drop_last=True (or a batch_size that divides {n})"
            )
    if n is not None and len(loader) == 0:
        raise ValueError(
            f"{caller}: the loader has no full batch ({n} rows, batch_size={b}, "
            f"drop_last={loader.drop_last})"
        )


def check_one_process(loader: DataLoader, caller: str) -> None:
    """Refuse a loader of several shards (or an elastic one): the fit helpers run in one
    process, so each rank would fit its own shard weighted as if it were all the data."""
    shards, elastic = loader.num_shards, getattr(loader, "elastic", False)
    if shards > 1 or elastic:
        what = f"num_shards={shards}" if shards > 1 else "elastic=True"
        raise ValueError(
            f"{caller} runs in one process and averages no gradients across ranks, but the "
            f"loader has {what} (num_shards='auto' gives each torchrun or Ray rank its "
            f"shard): each rank would fit its own shard's rows scaled to "
            f"total_size={loader.total_size}, as if they were all the data, and the ranks' "
            f"posteriors would differ. Fit with one unsharded loader (num_shards=1, "
            f"elastic=False) in one process, or write a data-parallel loop of your own "
            f"that averages the gradients across ranks (an all-reduce) each step"
        )


def check_batch_rows(rows: int, batch_size: int) -> None:
    """A batch handed out during a fit must be full (a stream's size may be wrong)."""
    if rows != batch_size:
        raise ValueError(
            f"the loader handed out a batch of {rows} rows, not batch_size={batch_size}: "
            f"pass drop_last=True (a stream's total_size may be wrong; see TotalSizeWarning)"
        )


def epoch_length(loader: DataLoader) -> int | None:
    """Batches per epoch, or None for a stream of unknown size."""
    try:
        return len(loader)
    except TypeError:
        return None


def first_batch(loader: DataLoader) -> tuple[np.ndarray, np.ndarray]:
    """The next batch the loader would hand out, ``(xb, yb)`` (without row ids, where
    the loader hands them out), leaving its cursor where it stood."""
    state = loader.state_dict()
    try:
        loader.load_state_dict(state)  # the same cursor, not yet begun
        batch = next(iter(loader), None)
        if batch is None:  # the rest of this epoch is empty: try the next one
            batch = next(iter(loader), None)
    finally:
        loader.load_state_dict(state)
    if batch is None:
        raise ValueError("the loader handed out no batch: it has no data to feed")
    return batch[0], batch[1]
