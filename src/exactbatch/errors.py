"""The exceptions and warnings exactbatch raises beyond the built-in ones."""

from __future__ import annotations

__all__ = ["NdfError", "TotalSizeWarning"]


class NdfError(ValueError):
    """A malformed or changed ``.ndf`` file.

    The message names the file, what was expected and what was found.
    It is a ``ValueError``, so ``except ValueError`` catches it too.
    """


class TotalSizeWarning(UserWarning):
    """A declared ``total_size`` disagrees with the rows a pass handed out.

    Issued at most once per loader, naming both numbers: a wrong N rescales
    a minibatch likelihood by the wrong factor and biases the posterior.
    """
