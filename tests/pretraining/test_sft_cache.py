"""archer_jax.pretraining.sft_cache: what its key depends on, a store-and-load round trip that keeps every
dtype and placement, and damaged entries as one-line errors naming them. (That a run taking an
entry equals one that trained it is the train app's slow test.)"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from archer_jax.errors import ConfigError
from archer_jax.pretraining import sft_cache

SETTINGS = dict(sft=dict(steps=4, lr=1e-3, batch_size=8, seed=0), limit=None)
PAIRS = (["Questions:\n", "Questions:\nIs it an animal? No.\n"], ["Is it an animal?", "Is it a pen?"])


def params() -> dict:
    return {"wte": jnp.arange(12, dtype=jnp.float32).reshape(3, 4), "ln": {"scale": jnp.ones(4, jnp.bfloat16)},
            "step": jnp.asarray(3, jnp.int32)}


def test_the_key_changes_with_every_input_of_the_sft():
    base = sft_cache.key(params(), *PAIRS, SETTINGS)
    assert sft_cache.key(params(), *PAIRS, SETTINGS) == base  # deterministic
    other_value = params()
    other_value["wte"] = other_value["wte"].at[0, 0].set(0.5)
    other_dtype = dict(params(), wte=params()["wte"].astype(jnp.bfloat16))
    other_tree = dict(params(), extra=jnp.zeros(1))
    changed = [
        sft_cache.key(other_value, *PAIRS, SETTINGS),
        sft_cache.key(other_dtype, *PAIRS, SETTINGS),
        sft_cache.key(other_tree, *PAIRS, SETTINGS),
        sft_cache.key(params(), PAIRS[0], ["Is it an animal?", "Is it a cup?"], SETTINGS),
        sft_cache.key(params(), PAIRS[0][::-1], PAIRS[1][::-1], SETTINGS),  # the same pairs in another order
        sft_cache.key(params(), *PAIRS, dict(SETTINGS, sft=dict(SETTINGS["sft"], lr=1e-4))),
        sft_cache.key(params(), *PAIRS, dict(SETTINGS, limit=4)),
    ]
    assert len({base, *changed}) == len(changed) + 1


def test_an_entry_round_trips_with_its_dtypes_history_and_placement(tmp_path):
    like = params()
    trained = jax.tree.map(lambda x: x + 1, like)
    history = [{"loss": np.float32(2.5), "nonfinite": 0.0}, {"loss": 1.25, "nonfinite": 0.0}]
    assert sft_cache.load(tmp_path, "abc", like) is None  # nothing stored yet
    path = sft_cache.save(tmp_path, "abc", trained, history, dict(first_loss=2.5, last_loss=1.25))
    assert path == tmp_path / "abc" and [p.name for p in tmp_path.iterdir()] == ["abc"]  # no temporary left
    loaded, got_history, info = sft_cache.load(tmp_path, "abc", like)
    for a, b in zip(jax.tree.leaves(loaded), jax.tree.leaves(trained)):
        assert a.dtype == b.dtype and a.shape == b.shape and a.sharding == b.sharding
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))
    assert jax.tree.structure(loaded) == jax.tree.structure(like)
    assert got_history == [{"loss": 2.5, "nonfinite": 0.0}, {"loss": 1.25, "nonfinite": 0.0}]
    assert info == dict(first_loss=2.5, last_loss=1.25)
    sft_cache.save(tmp_path, "abc", like, [], {})  # an entry already there is kept
    assert sft_cache.load(tmp_path, "abc", like)[2] == info


def test_damaged_or_unfitting_entries_are_one_line_errors_naming_them(tmp_path):
    sft_cache.save(tmp_path, "abc", params(), [], {})
    smaller = dict(params(), wte=jnp.zeros((2, 4)))
    with pytest.raises(ConfigError, match=r"abc does not fit this policy .*delete it"):
        sft_cache.load(tmp_path, "abc", smaller)
    with pytest.raises(ConfigError, match=r"abc holds 3 arrays, this policy has 4"):
        sft_cache.load(tmp_path, "abc", dict(params(), extra=jnp.zeros(1)))
    (tmp_path / "abc" / "params.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match=r"config.sft.cache: the entry .*abc cannot be read"):
        sft_cache.load(tmp_path, "abc", params())


def test_a_cache_that_cannot_be_written_warns_and_loses_nothing(tmp_path, monkeypatch, caplog):
    """A full disk or a read-only cache after an SFT: one warning, no entry, no temporary left; the
    run keeps its result in memory (it was a traceback after the work was done)."""
    import errno
    import logging

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(np, "savez", full)
    with caplog.at_level(logging.WARNING, logger="archer_jax"):
        assert sft_cache.save_or_warn(tmp_path, "abc", params(), [], {}, "SFT") is None
    assert "config.sft.cache: the SFT could not be stored in" in caplog.text and "No space left on device" in caplog.text
    assert list(tmp_path.iterdir()) == []
