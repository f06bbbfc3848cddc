"""``exactbatch mixing --plot`` drawn in-process: the figure read back (its axes, their
data, titles and labels, legends) and the file it writes. test_mixing.py draws the plot
only in a subprocess, which no mutant reaches."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from matplotlib.colors import to_rgba  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.layout_engine import ConstrainedLayoutEngine  # noqa: E402

from exactbatch.tools.common import CliError  # noqa: E402
from exactbatch.tools.mixing_plot import check_path, draw  # noqa: E402


def result(**over) -> dict:
    """A hand-made result of :func:`~exactbatch.tools.mixing.mixing`, the keys draw reads."""
    r = {
        "src": "/data/some/sorted.ndf",
        "n": 20_000,
        "batch_size": 1_000,
        "buffer_size": 2_500,
        "chunk_rows": 1_500,
        "shuffle_chunks": True,
        "seed": 7,
        "well_mixed": False,
        "batches": 20,
        "examined": [0, 3, 19],
        "ks": {"random_band": {"p05": 0.1, "p95": 0.3, "median": 0.2}, "columns": [0, 1, 2]},
        "_plot": {
            "in": np.array([0, 5_000, 10_000, 19_999]),
            "out": np.array([2_000, 0, 15_000, 4_000]),
            "per_batch": [0.25, 0.4, 0.5],
        },
    }
    return {**r, **over}


def drawn(r: dict, path, monkeypatch, write: bool = False) -> Figure:
    """Draw ``r`` into ``path``; the figure draw saved (caught at its ``savefig``, which
    writes the file only where ``write``: rendering is most of a test's time)."""
    saved = []
    original = Figure.savefig

    def savefig(self, fname, **kw):
        saved.append((self, fname, kw))
        return original(self, fname, **kw) if write else None

    monkeypatch.setattr(Figure, "savefig", savefig)
    draw(r, path)
    assert len(saved) == 1
    fig, fname, kw = saved[0]
    assert fname == str(path) and type(fname) is str and kw == {"dpi": 100}
    return fig


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def legend(ax) -> tuple[list[str], int, float]:
    leg = ax.get_legend()
    return [t.get_text() for t in leg.get_texts()], leg._loc, leg.get_texts()[0].get_fontsize()


def test_the_figure_its_two_panels_and_the_file(tmp_path, monkeypatch):
    path = tmp_path / "mix.png"
    r = result()
    fig = drawn(r, path, monkeypatch, write=True)
    assert png_size(path) == (1100, 440)  # figsize (11, 4.4) at 100 dpi
    assert tuple(fig.get_size_inches()) == (11, 4.4)
    assert isinstance(fig.get_layout_engine(), ConstrainedLayoutEngine)
    left, right = fig.axes
    assert len(fig.axes) == 2
    assert left.get_subplotspec().get_geometry() == (1, 2, 0, 0)
    assert right.get_subplotspec().get_geometry() == (1, 2, 1, 1)
    assert fig._suptitle.get_text() == (
        "sorted.ndf: n=20,000, batch 1,000, buffer 2,500 rows, shuffled 1,500-row chunks, "
        "seed 7: NOT well mixed"
    )
    assert fig._suptitle.get_fontsize() == 11

    # left: where rows go
    (dots,) = left.collections
    assert np.array_equal(dots.get_offsets(), [[0, 0.1], [0.25, 0], [0.5, 0.75], [0.99995, 0.2]])
    assert list(dots.get_sizes()) == [2]
    assert dots.get_alpha() == 0.35
    assert np.allclose(dots.get_facecolor(), [to_rgba("C0", 0.35)])
    assert list(dots.get_linewidths()) == [0]
    assert dots.get_rasterized() is True
    (diagonal,) = left.lines
    assert list(diagonal.get_xdata()) == [0, 1] and list(diagonal.get_ydata()) == [0, 1]
    assert diagonal.get_linestyle() == "--"
    assert to_rgba(diagonal.get_color()) == to_rgba("0.4")
    assert diagonal.get_linewidth() == 0.8
    assert left.get_xlim() == (0, 1) and left.get_ylim() == (0, 1)
    assert left.get_aspect() == 1.0
    assert left.get_xlabel() == "position in the file (fraction)"
    assert left.get_ylabel() == "position in the epoch (fraction)"
    assert left.get_title() == "Where rows go (4 sampled rows)"
    assert legend(left) == (["no shuffle"], 2, 8)  # 2: upper left

    # right: how representative each batch is
    (band,) = right.patches
    assert band.get_label() == "random batches, 5-95%"
    corners = band.get_transform().transform(band.get_path().vertices)
    ys = right.transData.inverted().transform(corners)[:, 1]
    assert np.allclose([ys.min(), ys.max()], [0.1, 0.3])
    assert np.allclose(band.get_facecolor(), to_rgba("C2", 0.25))
    median, batches = right.lines
    assert median.get_label() == "random batches, median"
    assert list(median.get_ydata()) == [0.2, 0.2]
    assert to_rgba(median.get_color()) == to_rgba("C2") and median.get_linewidth() == 1
    assert batches.get_label() == "this loader's batches"
    assert np.allclose(batches.get_xdata(), [0.5 / 20, 3.5 / 20, 19.5 / 20])
    assert list(batches.get_ydata()) == [0.25, 0.4, 0.5]
    assert batches.get_marker() == "." and batches.get_linestyle() == "None"
    assert batches.get_markersize() == 3 and to_rgba(batches.get_color()) == to_rgba("C3")
    assert right.get_xlim() == (0, 1)
    assert right.get_ylim() == pytest.approx((0, 1.35 * 0.5))
    assert right.get_xlabel() == "batch position in the epoch (fraction)"
    assert right.get_ylabel() == "KS distance to the whole data\n(mean over 3 columns)"
    assert right.get_title() == "How representative each batch is"
    assert legend(right) == (
        ["random batches, 5-95%", "random batches, median", "this loader's batches"],
        1,  # upper right
        8,
    )


@pytest.mark.parametrize(
    "over, title",
    [
        (
            {"shuffle_chunks": False, "chunk_rows": None, "well_mixed": True, "seed": 0},
            "sorted.ndf: n=20,000, batch 1,000, buffer 2,500 rows, file-order row groups, "
            "seed 0: well mixed",
        ),
        (
            {"chunk_rows": 0, "buffer_size": 1_234_567, "src": "x.parquet"},
            "x.parquet: n=20,000, batch 1,000, buffer 1,234,567 rows, shuffled row groups, "
            "seed 7: NOT well mixed",
        ),
    ],
)
def test_the_title_says_the_order_the_chunks_and_the_verdict(over, title, tmp_path, monkeypatch):
    fig = drawn(result(**over), tmp_path / "m.svg", monkeypatch)
    assert fig._suptitle.get_text() == title


@pytest.mark.parametrize(
    "per_batch, band, top",
    [
        ([0.25], {"p05": 0.1, "p95": 0.6, "median": 0.2}, 1.35 * 0.6),  # the band above
        ([0.9, 0.2], {"p05": 0.1, "p95": 0.3, "median": 0.2}, 1.05),  # capped
        ([], {"p05": 0.1, "p95": 0.3, "median": 0.2}, 1.35 * 0.3),  # no batch: the band
        ([0.0], {"p05": 0.0, "p95": 0.0, "median": 0.0}, 1.0),  # all zero: 1
        ([], {"p05": 0.0, "p95": 0.0, "median": 0.0}, 1.0),
    ],
)
def test_the_right_panel_is_as_tall_as_its_top_mark(per_batch, band, top, tmp_path, monkeypatch):
    k = len(per_batch)
    r = result(
        examined=list(range(k)),
        batches=k,
        ks={"random_band": band, "columns": [0]},
        _plot={**result()["_plot"], "per_batch": per_batch},
    )
    fig = drawn(r, tmp_path / "m.png", monkeypatch)
    right = fig.axes[1]
    assert right.get_ylim() == pytest.approx((0, top))
    assert right.get_ylabel().endswith("(mean over 1 columns)")


def test_one_batch_sits_in_the_middle(tmp_path, monkeypatch):
    r = result(examined=[0], batches=1, _plot={**result()["_plot"], "per_batch": [0.3]})
    fig = drawn(r, tmp_path / "m.png", monkeypatch)
    assert list(fig.axes[1].lines[1].get_xdata()) == [0.5]


def test_without_matplotlib_the_error_names_it(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(CliError, match=r"^--plot needs matplotlib: pip install matplotlib$"):
        draw(result(), tmp_path / "m.png")
    assert not (tmp_path / "m.png").exists()


@pytest.mark.parametrize("name", ["a.png", "a.PDF", "a.svg", "a.jpg", "a.JPEG"])
def test_check_path_takes_a_picture_in_a_folder(name, tmp_path):
    check_path(tmp_path / name)  # a Path too
    check_path(str(tmp_path / name))


def test_check_path_refuses(tmp_path):
    with pytest.raises(CliError, match=r"^writing URLs is not supported"):
        check_path("s3://bucket/a.png")
    with pytest.raises(
        CliError, match=r"a\.gif: --plot must end in one of \.png, \.pdf, \.svg, \.jpg, \.jpeg$"
    ):
        check_path(tmp_path / "a.gif")
    with pytest.raises(CliError, match=r"a\.png: folder .*nowhere does not exist$"):
        check_path(tmp_path / "nowhere" / "a.png")
    with pytest.raises(CliError, match="--plot must end"):
        check_path(tmp_path / "png")  # the extension with its dot
