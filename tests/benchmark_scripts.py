"""Importing a benchmark script in tests as the script itself runs: from its own folder, whose
sibling modules (``common``, ``learning``) it imports by name."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def imported(name: str) -> Iterator[ModuleType]:
    """Yields ``benchmarks/{name}.py`` as a module, with the folder on ``sys.path`` meanwhile (for a
    module-scoped fixture: ``yield from imported(name)``)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))
