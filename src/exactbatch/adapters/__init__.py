"""Adapters to other libraries: thin, optional, imported lazily.

* :mod:`exactbatch.adapters.torch` - ``as_torch(loader)`` yields PyTorch
  tensors (zero-copy when no cast is asked), ``.dataset()`` wraps it as a
  ``torch.utils.data.IterableDataset``, and ``distributed_shard()`` says
  which shard this process is in a distributed job.
* :mod:`exactbatch.adapters.pymc` - ``data(loader)`` makes ``pm.Data``
  placeholders of the batch's fixed shape, and ``fit(loader, n)`` streams
  exactly ``n`` batches, one per step, into minibatch variational inference.
* :mod:`exactbatch.adapters.jax` - ``as_jax(loader)`` yields ``jax.Array``
  batches put on the device ``prefetch`` batches ahead, laid out by a
  ``sharding``, padded to one shape with a mask by ``pad_last``.
* :mod:`exactbatch.adapters.numpyro` - ``fit(model, guide, loader, n, ...)``
  runs SVI over the loader, checking the model's subsample plate against
  ``loader.total_size`` first.
* :mod:`exactbatch.adapters.minibatch`, :mod:`~exactbatch.adapters.schedule`
  and :mod:`~exactbatch.adapters.convergence` - what the PyMC and NumPyro
  fits share: the loader checks, the default step-size schedule, and the
  convergence verdict.

Users import them as ``exactbatch.torch``, ``exactbatch.pymc``,
``exactbatch.jax`` and ``exactbatch.numpyro``. Nothing here is imported by
``import exactbatch``, and torch, PyMC, JAX or NumPyro is imported only when
a function that needs it is called.
"""
