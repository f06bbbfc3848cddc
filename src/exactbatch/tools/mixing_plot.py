"""The picture of ``exactbatch mixing``: where rows go, and how representative batches are.

Left: a sample of rows, position in the file against position in the epoch
(a full shuffle fills the square evenly; a bounded buffer over sorted data
hugs the diagonal, or draws blocks when chunks are shuffled). Right: each
examined batch's KS distance to the whole data across the epoch, against
the band of random batches of the same size (the same rows cut into batches
at random: the simulated full shuffles the verdict is calibrated on). Drawn with
matplotlib's Agg canvas (no display, no pyplot state).
"""

from __future__ import annotations

import os
from typing import Any

from exactbatch.extras import need
from exactbatch.hints import PathLike

__all__ = ["check_path", "draw"]

EXTENSIONS = (".png", ".pdf", ".svg", ".jpg", ".jpeg")


def check_path(path: PathLike) -> None:
    """Refuse a picture path that cannot be written, before any work is done."""
    from exactbatch.tools.common import CliError, refuse_url

    path = os.fspath(path)
    refuse_url(path, "writing")
    if not path.lower().endswith(EXTENSIONS):
        raise CliError(f"{path}: --plot must end in one of {', '.join(EXTENSIONS)}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CliError(f"{path}: folder {folder} does not exist")


def draw(r: dict[str, Any], path: PathLike) -> None:
    """Write the two-panel picture of a :func:`~exactbatch.tools.mixing.mixing` result."""
    from exactbatch.tools.common import CliError

    figure = need("matplotlib.figure", by="--plot", package="matplotlib", error=CliError)
    p, n = r["_plot"], r["n"]
    band = r["ks"]["random_band"]
    fig = figure.Figure(figsize=(11, 4.4), layout="constrained")
    left, right = fig.subplots(1, 2)

    left.scatter(
        p["in"] / n, p["out"] / n, s=2, alpha=0.35, color="C0", linewidths=0, rasterized=True
    )
    left.plot([0, 1], [0, 1], "--", color="0.4", lw=0.8, label="no shuffle")
    left.set(
        xlim=(0, 1),
        ylim=(0, 1),
        aspect="equal",
        xlabel="position in the file (fraction)",
        ylabel="position in the epoch (fraction)",
        title=f"Where rows go ({len(p['in']):,} sampled rows)",
    )
    left.legend(loc="upper left", fontsize=8)

    x = [(k + 0.5) / max(1, r["batches"]) for k in r["examined"]]
    right.axhspan(band["p05"], band["p95"], color="C2", alpha=0.25, label="random batches, 5-95%")
    right.axhline(band["median"], color="C2", lw=1, label="random batches, median")
    right.plot(x, p["per_batch"], ".", ms=3, color="C3", label="this loader's batches")
    top = max([band["p95"], *p["per_batch"]]) if len(p["per_batch"]) else band["p95"]
    ncols = len(r["ks"]["columns"])
    right.set(
        xlim=(0, 1),
        ylim=(0, min(1.05, 1.35 * top) or 1.0),
        xlabel="batch position in the epoch (fraction)",
        ylabel=f"KS distance to the whole data\n(mean over {ncols} columns)",
        title="How representative each batch is",
    )
    right.legend(loc="upper right", fontsize=8)

    order = "shuffled" if r["shuffle_chunks"] else "file-order"
    chunks = f"{r['chunk_rows']:,}-row chunks" if r["chunk_rows"] else "row groups"
    verdict = "well mixed" if r["well_mixed"] else "NOT well mixed"
    fig.suptitle(
        f"{os.path.basename(r['src'])}: n={n:,}, batch {r['batch_size']:,}, buffer "
        f"{r['buffer_size']:,} rows, {order} {chunks}, seed {r['seed']}: {verdict}",
        fontsize=11,
    )
    fig.savefig(os.fspath(path), dpi=100)
