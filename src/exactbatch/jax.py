"""JAX adapter: ``from exactbatch.jax import as_jax``.

A thin public name for :mod:`exactbatch.adapters.jax`; see there. jax is
imported on first use, not by importing this module.
"""

from exactbatch.adapters.jax import JaxLoader, as_jax

__all__ = ["JaxLoader", "as_jax"]
