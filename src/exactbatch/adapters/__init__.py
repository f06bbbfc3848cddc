"""Adapters to other libraries: thin, optional, imported lazily.

* :mod:`exactbatch.adapters.torch` - ``as_torch(loader)`` yields PyTorch
  tensors (zero-copy when no cast is asked), ``.dataset()`` wraps it as a
  ``torch.utils.data.IterableDataset``, and ``distributed_shard()`` says
  which shard this process is in a distributed job.
* :mod:`exactbatch.adapters.pymc` - ``data(loader)`` makes ``pm.Data``
  placeholders of the batch's fixed shape, and ``fit(loader, n)`` streams
  exactly ``n`` batches, one per step, into minibatch variational inference.

Users import them as ``exactbatch.torch`` and ``exactbatch.pymc``. Nothing
here is imported by ``import exactbatch``, and torch or PyMC is imported only
when a function that needs it is called.
"""
