"""The loader: the one front door (:class:`DataLoader`) and what it runs on.

``dataloader`` the DataLoader; ``cursor`` its claims on the epoch and its
state (one claim protocol, a frozen ``Position``); ``epoch_iterator`` what
``iter(loader)`` returns; ``state`` the ``state_dict`` format. Read-ahead
threads are in :mod:`exactbatch.prefetch`, below this layer: the batching
and the sources use them too.
"""

from exactbatch.loader.dataloader import DataLoader

__all__ = ["DataLoader"]
