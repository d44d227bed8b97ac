"""A model name, without loading anything: a path or a Hugging Face hub id, whether the hub is
offline, whether the local Hugging Face cache holds it. Below the models, so that a config check
(e.g. an env's model oracle path) needs no model code."""

from __future__ import annotations

import os

CONFIG = "config.json"


def is_offline() -> bool:
    """True when ``HF_HUB_OFFLINE`` (or the older ``TRANSFORMERS_OFFLINE``) is set."""
    return any(os.environ.get(v, "").upper() in ("1", "ON", "YES", "TRUE") for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def looks_like_path(name: str) -> bool:
    """Whether ``name`` is meant as a filesystem path: hub ids are "name" or "owner/name"."""
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name


def is_cached(repo_id: str) -> bool:
    """Whether the local Hugging Face cache holds ``repo_id``'s ``config.json``."""
    import huggingface_hub

    try:
        return isinstance(huggingface_hub.try_to_load_from_cache(repo_id, CONFIG), str)
    except Exception:  # an invalid name: the loader says so
        return False
