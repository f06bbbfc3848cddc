"""PyMC adapter: ``from exactbatch.pymc import data, fit``.

A thin public name for :mod:`exactbatch.adapters.pymc`; see there. PyMC is
imported on first use, not by importing this module.
"""

from exactbatch.adapters.pymc import data, fit

__all__ = ["data", "fit"]
