"""The columns a command reads: ``--features``, ``--labels``, ``--exclude`` and
``--columns`` given as names or positions, resolved against a file's column names,
and column lists shown in messages."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from exactbatch.tools.common import CliError

__all__ = ["resolve_columns", "shown_names", "split_columns"]


def shown_names(names: Iterable[object], near: str | None = None, limit: int = 20) -> str:
    """Column names for a message: all of them up to ``limit``; else the first and last
    few, how many in all and (for a name ``near`` that was not found) the names
    closest to it, so a long list never hides the name a user looks for."""
    shown = [str(v) for v in names]
    if len(shown) <= limit:
        return repr(shown)
    head, tail = shown[: limit - 5], shown[-3:]
    text = f"[{', '.join(map(repr, head))}, ..., {', '.join(map(repr, tail))}] ({len(shown)} in all"
    if near is not None:
        import difflib

        close = difflib.get_close_matches(near, shown, n=5, cutoff=0.6)
        close += [v for v in shown if near.lower() in v.lower() and v not in close][
            : 5 - len(close)
        ]
        text += f"; closest to {near!r}: {close}" if close else f"; none close to {near!r}"
    return text + ")"


def resolve_columns(
    spec: object, names: Sequence[str], path: object, what: str
) -> list[int] | None:
    """Column selectors (names, or integer positions, negative from the end) -> indices.

    ``spec`` is None (nothing chosen) or a comma-separated string. A name wins
    over a position when a column is called, say, ``"0"``.
    """
    if spec is None:
        return None
    out: list[int] = []
    for item in [s.strip() for s in str(spec).split(",") if s.strip()]:
        if item in names:
            out.append(names.index(item))
            continue
        try:
            k = int(item)
        except ValueError:
            raise CliError(
                f"{path}: no column {item!r} ({what}); columns are {shown_names(names, item)}"
            ) from None
        if not -len(names) <= k < len(names):
            raise CliError(
                f"{path}: column {k} ({what}) out of range: the data has {len(names)} columns"
            )
        out.append(k % len(names))
    if len(set(out)) != len(out):
        raise CliError(f"{path}: a column is named twice in {what}: {spec!r}")
    return out


def split_columns(
    features: object, labels: object, names: Sequence[str], path: object, exclude: object = None
) -> tuple[list[int], list[int]]:
    """Feature and label column indices; features default to every column not a label
    and not in ``exclude`` (``--exclude``: names or positions, as ``features``). A column
    both chosen and excluded is a :class:`CliError`.

    Columns are read by name, so a chosen column must have one, and one that no
    other column has: anything else is a :class:`CliError` naming the columns.
    """
    lab = resolve_columns(labels, names, path, "--labels") or []
    feat = resolve_columns(features, names, path, "--features")
    out = resolve_columns(exclude, names, path, "--exclude") or []
    if feat is None:
        feat = [j for j in range(len(names)) if j not in lab and j not in out]
    clash = [names[j] for j in feat + lab if j in out]
    if clash:
        raise CliError(f"{path}: column(s) {clash} are both chosen and given to --exclude")
    both = set(feat) & set(lab)
    if both:
        raise CliError(
            f"{path}: column(s) {[names[j] for j in sorted(both)]} are both features and labels"
        )
    chosen = feat + lab
    if not chosen:
        raise CliError(f"{path}: no columns chosen (--features {features!r}, --labels {labels!r})")
    unnamed = [j for j in chosen if not names[j].strip()]
    if unnamed:  # e.g. the index column of a CSV written by pandas
        raise CliError(
            f"{path}: the column(s) at position(s) {unnamed} have no name (columns: "
            f"{shown_names(names)}); name them, or choose other columns with --features/--labels"
        )
    twice = sorted({names[j] for j in chosen if names.count(names[j]) > 1})
    if twice:
        raise CliError(
            f"{path}: column name(s) {twice} appear more than once "
            f"(columns: {shown_names(names)}), "
            "so which column is meant is ambiguous; rename them, or choose other columns "
            "with --features/--labels"
        )
    return feat, lab
