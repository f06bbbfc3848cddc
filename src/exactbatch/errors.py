"""The exceptions and warnings exactbatch raises beyond the built-in ones."""

from __future__ import annotations

__all__ = [
    "ConvergenceWarning",
    "ExactnessError",
    "MixingWarning",
    "NdfError",
    "NdfOrderWarning",
    "TotalSizeWarning",
]


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


class NdfOrderWarning(UserWarning):
    """A Ray Data write of a sharded dataset whose parts may not follow the Dataset's
    row order (``NdfDatasink`` under Ray's ``preserve_order=False``)."""


class ConvergenceWarning(UserWarning):
    """A fit helper's parameters were still moving when it ended.

    Raised by ``exactbatch.numpyro.fit`` and ``exactbatch.pymc.fit`` when the
    posterior moved more than a stated threshold (in posterior sds of the
    guide) between the means of the fit's last two windows of steps. The
    message names the figure, the latent that moved most and what to do (run
    more steps); the result's ``.convergence`` holds the figures.
    """


class MixingWarning(UserWarning):
    """A fit helper found the loader's batches not well mixed before its first step.

    Raised by ``exactbatch.numpyro.fit`` and ``exactbatch.pymc.fit`` over a
    stream whose mixing window is smaller than the data, when the batches
    ahead are less representative than every one of 99 random cuts of the
    same rows (the test of ``exactbatch mixing``): a sorted source through a
    small buffer, which biases the fit without a convergence warning. The
    message names the figures and the fix (a one-time ``exactbatch shuffle``,
    or a larger ``buffer_size``).
    """


class ExactnessError(RuntimeError):
    """An epoch handed out other rows than it promised.

    Raised when an epoch ends and the loader's ledger (an order-independent
    digest of the row ids handed out, carried across resumes by
    ``state_dict``) differs from the digest of the rows the epoch promises:
    the shard's rows, less what ``drop_last`` or ``even_batches`` leave out.
    The message names the epoch, the shard, and the rows handed out against
    promised. A forged or mismatched state is caught by then at the latest.
    """
