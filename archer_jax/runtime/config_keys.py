"""A config key as a dataclass field: its default, its one line of documentation and its name in
the official code, declared once beside the code that reads it.

    seed: int = key(0, "the run's seed: model initialisation, sampling, env games, replay draws")

``--help`` prints each key's line with its default, and docs/algorithms.md's key table is
generated from them (:mod:`archer_jax.config_docs`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

NO_OFFICIAL = "—"  # the key has no argument in the official code


def key(default: Any = dataclasses.MISSING, doc: str = "", *, official: str = NO_OFFICIAL,
        default_factory: Any = dataclasses.MISSING, free_form: bool = False) -> Any:
    """A dataclass field for a config key with ``doc`` (one line) and ``official``, its name (and
    value) in the official code. ``free_form``: a group of keys the code below checks
    (``env.options``), which the config holds as a group, not as one value."""
    if not doc or "\n" in doc:
        raise ValueError(f"a config key needs one line of documentation, got {doc!r}")
    return dataclasses.field(default=default, default_factory=default_factory,
                             metadata={"doc": doc, "official": official, "group": free_form})


def doc_of(field: dataclasses.Field) -> str:
    """A field's line of documentation ("" for a field declared without :func:`key`)."""
    return field.metadata.get("doc", "")


def official_of(field: dataclasses.Field) -> str:
    """A field's name in the official code (:data:`NO_OFFICIAL` when it has none)."""
    return field.metadata.get("official", NO_OFFICIAL)
