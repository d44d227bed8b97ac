"""A cache of SFT warm starts (``config.sft.cache``), so that runs that differ only in what
comes after the warm start (the agent's seed, its learning rates, another agent with the same
policy network) do the same SFT once:

    python -m archer_jax.train --config=configs/20q.py:small --config.sft.cache=runs/sft_cache ...

An entry is the SFT result of one exact computation: its key hashes the demonstrations, the
policy's parameters before SFT (their tree, shapes, dtypes and values), the SFT keys, the
gradient clipping, the micro-batching, the devices, the JAX, Flax and optax versions and the
source of this package. A run with the same key takes the stored parameters and SFT history, so
it continues exactly as if it had done the SFT itself; anything else that differs trains and
stores a new entry. Entries are written whole or not at all (a temporary directory renamed).
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import flax
import jax
import numpy as np
import optax

from archer_jax.errors import ConfigError

log = logging.getLogger("archer_jax")

_FORMAT = 1
_PACKAGE = Path(__file__).resolve().parent


def _source_digest() -> str:
    """The digest of this package's Python source: a changed loss or step misses the cache."""
    digest = hashlib.sha256()
    for path in sorted(_PACKAGE.rglob("*.py")):
        digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def key(params: Any, observations: Sequence[str], actions: Sequence[str], settings: dict[str, Any]) -> str:
    """The cache key of an SFT of ``params`` on the pairs, under ``settings`` (its config keys,
    micro-batching and devices: every other input of the computation)."""
    digest = hashlib.sha256()
    header = dict(format=_FORMAT, settings=settings, jax=jax.__version__, flax=flax.__version__, optax=optax.__version__,
                  source=_source_digest(), tree=str(jax.tree.structure(params)))
    digest.update(json.dumps(header, sort_keys=True, default=str).encode())
    for text in (*observations, "\0\0", *actions):
        digest.update(text.encode() + b"\0")
    for leaf in jax.tree.leaves(params):
        array = np.asarray(jax.device_get(leaf))
        digest.update(f"{array.dtype}{array.shape}".encode())
        digest.update(np.asarray(array, order="C").tobytes())
    return digest.hexdigest()[:32]


def load(cache: str | Path, entry: str, like: Any) -> tuple[Any, list[dict], dict] | None:
    """``(params, history, info)`` of a stored entry, the params placed as ``like``'s leaves are;
    None when there is no such entry. A damaged entry is an error naming its path."""
    path = Path(cache).expanduser() / entry
    if not path.is_dir():
        return None
    try:
        meta = json.loads((path / "meta.json").read_text())
        with np.load(path / "params.npz") as stored:
            arrays = [stored[f"leaf{i}"] for i in range(len(meta["leaves"]))]
    except (OSError, ValueError, KeyError) as e:
        raise ConfigError(f"config.sft.cache: the entry {path} cannot be read ({type(e).__name__}: {e}); "
                          "delete it and run again") from None
    leaves, treedef = jax.tree.flatten(like)
    if len(arrays) != len(leaves):
        raise ConfigError(f"config.sft.cache: the entry {path} holds {len(arrays)} arrays, this policy has "
                          f"{len(leaves)}; delete it and run again")
    placed = []
    for (dtype, shape), raw, target in zip(meta["leaves"], arrays, leaves):
        if tuple(shape) != tuple(target.shape) or jax.numpy.dtype(dtype) != target.dtype:
            raise ConfigError(f"config.sft.cache: the entry {path} does not fit this policy ({shape} {dtype} against "
                              f"{list(target.shape)} {target.dtype}); delete it and run again")
        array = raw.view(jax.numpy.dtype(dtype)).reshape(shape)
        placed.append(jax.device_put(array, target.sharding) if isinstance(target, jax.Array) else array)
    return jax.tree.unflatten(treedef, placed), meta["history"], meta["info"]


def save_or_warn(cache: str | Path, entry: str, params: Any, history: list[dict], info: dict, what: str) -> Path | None:
    """:func:`save`, or a warning and None when the cache cannot be written (a full disk, a
    read-only cache): the result is in memory, so the run goes on without storing it."""
    try:
        return save(cache, entry, params, history, info)
    except OSError as e:
        log.warning("config.sft.cache: the %s could not be stored in %s (%s); the run goes on without storing it",
                    what, cache, e.strerror or e)
        return None


def save(cache: str | Path, entry: str, params: Any, history: list[dict], info: dict) -> Path:
    """Stores an entry (whole, or not at all); returns its path. An entry already there is kept."""
    root = Path(cache).expanduser()
    path = root / entry
    if path.is_dir():
        return path
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry}.", dir=root))
    try:
        arrays = [np.asarray(jax.device_get(leaf), order="C") for leaf in jax.tree.leaves(params)]  # 0-d stays 0-d
        # Raw bytes: npz does not keep dtypes such as bfloat16, so each leaf's dtype is in meta.json.
        np.savez(tmp / "params.npz", **{f"leaf{i}": a.reshape(-1).view(np.uint8) for i, a in enumerate(arrays)})
        meta = dict(leaves=[(str(a.dtype), list(a.shape)) for a in arrays], history=history, info=info)
        (tmp / "meta.json").write_text(json.dumps(meta, default=float))
        try:
            tmp.rename(path)
        except OSError:  # another run stored the same entry first
            if not path.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return path
