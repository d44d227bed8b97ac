"""``history.jsonl``: one line of metrics per finished iteration, appended as the run goes.

A run that is killed leaves the lines of the iterations it finished; a resumed run first rewrites
the file from its checkpoint's history (dropping the iterations after that checkpoint, which it
runs again) and then appends. Only the primary process writes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from archer_jax.runtime import distributed

HISTORY = "history.jsonl"


def _line(row: Mapping[str, Any]) -> str:
    return json.dumps(dict(row)) + "\n"


def rewrite(workdir: Path, rows: Sequence[Mapping[str, Any]]) -> None:
    """Replaces ``history.jsonl`` with ``rows`` (atomically)."""
    if not distributed.is_primary():
        return
    path = Path(workdir) / HISTORY
    tmp = path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(_line(r) for r in rows))
    tmp.replace(path)


def append(workdir: Path, row: Mapping[str, Any]) -> None:
    """Adds one iteration's row (flushed before returning)."""
    if not distributed.is_primary():
        return
    with (Path(workdir) / HISTORY).open("a") as f:
        f.write(_line(row))


def recorded_iterations(workdir: Path) -> int:
    """How many iterations ``history.jsonl`` records (its non-empty lines, parsed or not)."""
    path = Path(workdir) / HISTORY
    if not path.is_file():
        return 0
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())


def read(workdir: Path) -> list[dict[str, Any]]:
    """The rows of ``history.jsonl`` (empty when there is none)."""
    path = Path(workdir) / HISTORY
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
