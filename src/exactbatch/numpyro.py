"""NumPyro adapter: ``from exactbatch.numpyro import fit``.

A thin public name for :mod:`exactbatch.adapters.numpyro`; see there. NumPyro
and JAX are imported on first use, not by importing this module.
"""

from exactbatch.adapters.numpyro import fit

__all__ = ["fit"]
