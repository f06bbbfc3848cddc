"""``exactbatch mixing``'s report: the measurements of
:func:`~exactbatch.tools.mixing.mixing` as tables for a person (:func:`render`), and
as the JSON ``--json`` prints (:func:`public`)."""

from __future__ import annotations

from typing import Any

from exactbatch.tools.mixing import SLICES

__all__ = ["public", "render"]


def render(r: dict[str, Any]) -> str:
    """The measurements as tables for a person."""
    chunks = (
        f"{r['chunks']:,} chunks of {r['chunk_rows']:,} rows"
        if r["chunk_rows"]
        else f"{r['chunks']:,} row groups"
    )
    order = "in shuffled order" if r["shuffle_chunks"] else "in file order"
    t, f = r["travel"], r["travel_full_shuffle"]
    ks = r["ks"]
    lines = [
        f"{r['src']}: n={r['n']:,} rows; batch {r['batch_size']:,}; buffer "
        f"{r['buffer_size']:,} rows (mixing window {r['mixing_window']:,} rows); "
        f"{chunks} {order}; seed {r['seed']}",
        *_what_it_takes(r),
        "",
        "What the loader does to the file's order (the same for any data laid out alike):",
        f"how far rows travel, |position in epoch - position in file| / n "
        f"({t['sample_rows']:,} sampled rows)",
        f"  {'':<14}{'this loader':>12}{'full shuffle':>14}",
    ]
    for key, label in (("median", "median"), ("q90", "90%"), ("q99", "99%"), ("mean", "mean")):
        lines.append(f"  {label:<14}{t[key]:>12.4f}{f[key]:>14.4f}")
    if t["batch_spread"] is not None:
        lines.append(
            f"  {'batch spread':<14}{t['batch_spread']:>12.1f}{f['batch_spread']:>14.1f}"
            f"   (how many of {SLICES} slices of the file a batch draws from)"
        )
    lines += [
        "",
        "What that does to this data: how representative batches are, as the KS distance "
        "of a batch",
        f"to the whole data ({len(r['examined']):,} of {r['batches']:,} batches), against random "
        "batches (the same rows cut into",
        f"batches at random, {ks['replicates']} times: {ks['random_batches']:,} batches)",
        f"  {'column':<16}{'loader mean':>12}{'p95':>8}{'random mean':>13}{'p95':>8}",
    ]
    rows = [(c["name"], c) for c in ks["columns"]] + [("(mean of cols)", ks["all"])]
    for name, c in rows:
        lo, ra = c["loader"], c["random"]
        cells = [lo["mean"], lo["p95"], ra["mean"], ra["p95"]]
        txt = ["-" if v is None else f"{v:.3f}" for v in cells]
        lines.append(f"  {name[:16]:<16}{txt[0]:>12}{txt[1]:>8}{txt[2]:>13}{txt[3]:>8}")
    share, full = ks["share_worse_than_random_p95"], ks["share_full_shuffle"]
    lines += [
        f"  batches less representative than 95% of random batches: {share:.1%}",
        f"    (a full shuffle: {full['p05']:.1%} to {full['p95']:.1%} in 90% of "
        f"{ks['replicates']} simulated ones, median {full['median']:.1%})",
        *_entropy_lines(r["entropy"]),
        "",
    ]
    calibrated = (
        f"  calibrated on {ks['replicates']} simulated full shuffles: p = {ks['p_value']:.2f} "
        "(NOT well mixed at p <= 0.05,\n  which a full shuffle reaches in at most 5% of seeds)"
    )
    if r["well_mixed"]:
        lines.append("verdict: well mixed - batches look like uniformly random batches")
        lines.append(calibrated)
    else:
        lines.append("verdict: NOT well mixed - batches are not representative of the whole data.")
        lines.append(calibrated)
        lines.append(
            "  Shuffle the file once on disk (exactbatch shuffle), or raise --buffer-size."
        )
    return "\n".join(lines)


def _entropy_lines(e: dict[str, Any]) -> list[str]:
    """The stratum's entropy line: the ratio to random batches', or why there is none."""
    if e["column"] is None:
        return ["  class entropy per batch: no stratum (--stratum COLUMN names one)"]
    name = e["column"]
    if "skipped" in e:
        return [f"  class entropy per batch of {name}: not measured, {e['skipped']}"]
    if e["ratio"] is None:
        return [f"  class entropy per batch of {name}: one class only, nothing to mix"]
    full = e["full_shuffle"]
    return [
        f"  class entropy per batch of {name} ({e['classes']:,} classes): {e['ratio']:.4f} "
        f"of random batches' ({e['loader']:.3f} against {e['random']:.3f} nats)",
        f"    (a full shuffle: {full['p05']:.4f} to {full['p95']:.4f}; lower: batches "
        "cluster a class)",
    ]


def _what_it_takes(r: dict[str, Any]) -> list[str]:
    """The buffer a full mix needs, the random-access alternative, the columns skipped."""
    lines = []
    if r["halves"]:
        lines.append(
            "  this buffer reads ahead in two halves: rows mix within half of it "
            "(a window of W rows takes a buffer of about 2W)"
        )
    lines += [
        f"  a full mix needs --buffer-size {r['full_mix_buffer']:,}, the whole data "
        f"(about {r['full_mix_bytes'] / 2**20:,.1f} MiB; a buffer that holds it is one piece)",
        "  or random access, a full shuffle whatever the file order: "
        f"DataLoader({'open_ndf_dataset' if r['fmt'] == 'dataset' else 'open_ndf'}(...))",
    ]
    if r["fmt"] == "parquet":  # (a sharded dataset is .ndf parts already)
        lines.append("    (exactbatch convert writes the .ndf)")
    by_reason: dict[str, list[str]] = {}
    for c in r["skipped_columns"]:
        by_reason.setdefault(c["reason"], []).append(c["name"])
    for reason, names in by_reason.items():
        shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
        lines.append(f"  columns skipped ({reason}): {shown}")
    return lines


def public(r: dict[str, Any]) -> dict[str, Any]:
    """The result without the arrays kept for the plot (what --json prints)."""
    return {k: v for k, v in r.items() if not k.startswith("_")}
