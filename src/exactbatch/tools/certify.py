"""``exactbatch certify STATE...``: the run certificate of saved loader states.

Each file is a JSON document holding one state (``DataLoader.state_dict()``),
a list of states, or an object with the state under ``"loader"`` (a
training checkpoint's usual key); every state of every file is merged, as
:func:`exactbatch.certify` does.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

from exactbatch.certificate import Certificate, certify_named
from exactbatch.ndf.regular import read_regular
from exactbatch.tools.common import CliError

__all__ = ["certify_files", "public"]

_MAX_BYTES = 1 << 30  # a state is a few KiB: a bigger file is not one


def _states(path: str) -> list[dict[str, Any]]:
    try:
        # a FIFO or a device would block (or never end): only a regular file is read
        doc = json.loads(read_regular(path, _MAX_BYTES, "a DataLoader state (JSON)"))
    except json.JSONDecodeError as e:
        raise CliError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None
    if isinstance(doc, dict) and isinstance(doc.get("loader"), dict):
        doc = doc["loader"]
    states = doc if isinstance(doc, list) else [doc]
    if not states or not all(isinstance(s, dict) and "version" in s for s in states):
        raise CliError(
            f"{path}: expected a DataLoader state (a JSON object from state_dict()), a list "
            'of them, or an object holding one under "loader"'
        )
    return states


def certify_files(paths: list[str]) -> Certificate:
    """The certificate of every state in the files ``paths``; an error about one state
    names the file that holds it (and its place there, for a file of several)."""
    states, owners = [], []
    for path in paths:
        found = _states(path)
        states += found
        owners += [
            path if len(found) == 1 else f"{path} (its state {j})" for j in range(len(found))
        ]
    try:
        return certify_named(states, owners, ", ".join(paths))
    except ValueError as e:
        raise CliError(str(e)) from None


def public(cert: Certificate) -> dict[str, Any]:
    """The certificate as JSON-safe data."""
    return {
        "certified": bool(cert),
        "epochs": [asdict(e) for e in cert.epochs],
        "set_aside": list(cert.set_aside),
    }
