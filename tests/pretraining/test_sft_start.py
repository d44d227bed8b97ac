"""The SFT warm start is one program for every algorithm: runs of ArCHer and of PPO (with a value
model and a reference copy, or a value head on the policy) from the same weights and demonstrations
start from the same policy and share one SFT cache entry; a value model starts as built; and a run
whose entry another run stored first starts from the stored policy."""

from __future__ import annotations

import logging

import jax
import numpy as np
import pytest

from archer_jax.config import validate
from archer_jax.pretraining import sft, sft_cache
from archer_jax.records import report
from archer_jax.run.warm_start import sft_start
from archer_jax.train import build_agent
from tests.run.test_train_app import assert_same_tree, micro

FAMILIES = {
    "archer": {},
    "ppo_value_model": dict(agent="ppo", ppo__value_head="separate", ppo__kl_coef=0.1),
    "ppo_value_head": dict(agent="ppo", ppo__value_head="shared"),
}


def _config(cache, **overrides):
    return micro(sft__steps=6, sft__batch_size=8, sft__cache=str(cache), **overrides)


def warm_started(c, workdir, warm=sft_start, network: str = "actor"):
    """(``network``'s state after ``warm`` (``warm_start.sft_start`` or ``warm_start.critic_start``),
    its parameters as built, and the warm start's info)."""
    agent = build_agent(validate(c), workdir)
    try:
        states = agent.init_states()
        built = jax.device_get(getattr(states, network).params)
        states, info = warm(agent, states, report.Writers(workdir), sft.demonstrations(c))
        return jax.device_get(getattr(states, network)), built, info
    finally:
        agent.parts.close()


def _warm_start(c, workdir):
    """(the actor's trained parameters after the warm start, as built, and the SFT's info)."""
    state, built, info = warm_started(c, workdir)
    return state.params, built, info


@pytest.fixture(scope="module")
def starts(tmp_path_factory):
    """Each family's warm start, each with a cache of its own (so each trains its SFT)."""
    root = tmp_path_factory.mktemp("sft_start")
    return {name: (_warm_start(_config(root / name / "cache", **overrides), root / name), root / name / "cache")
            for name, overrides in FAMILIES.items()}


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_every_family_trains_the_same_policy_into_the_same_entry(starts):
    (archer, archer_built, archer_info), archer_cache = starts["archer"]
    assert any(not np.array_equal(a, b)  # the SFT trained the policy
               for a, b in zip(jax.tree.leaves(archer["policy"]), jax.tree.leaves(archer_built["policy"])))
    (entry,) = [p.name for p in archer_cache.iterdir()]
    for name in ("ppo_value_model", "ppo_value_head"):
        (params, built, info), cache = starts[name]
        assert [p.name for p in cache.iterdir()] == [entry], name
        assert_same_tree(params["policy"], archer["policy"])
        assert info["last_loss"] == archer_info["last_loss"]
        assert_same_tree(params["baseline"], built["baseline"])  # the SFT does not touch a value model or head
    assert set(starts["ppo_value_model"][0][0]) == {"policy", "baseline"}


def test_a_run_whose_entry_another_run_stored_first_starts_from_the_stored_policy(starts, tmp_path, monkeypatch, caplog):
    """Two runs that SFT at once: the one that stores second starts from the first one's policy."""
    (archer, _, _), archer_cache = starts["archer"]
    (entry,) = archer_cache.iterdir()
    stored, history, info = sft_cache.load(archer_cache, entry.name, archer["policy"])
    other = jax.tree.map(lambda x: x + 1.0, stored)  # stands for another process's rounding of the same SFT
    cache = tmp_path / "cache"
    sft_cache.save(cache, entry.name, other, [dict(h, loss=h["loss"] + 1) for h in history], dict(info, last_loss=-1.0))
    real_load, calls = sft_cache.load, []

    def load_after_the_first_lookup(*args):  # the entry appears while this run trains its SFT
        calls.append(args)
        return None if len(calls) == 1 else real_load(*args)

    monkeypatch.setattr(sft_cache, "load", load_after_the_first_lookup)
    with caplog.at_level(logging.WARNING, logger="archer_jax"):
        params, _, got = _warm_start(_config(cache, **FAMILIES["ppo_value_model"]), tmp_path / "run")
    assert len(calls) == 2 and "another run stored this SFT first" in caplog.text
    assert_same_tree(params["policy"], other)
    assert got["last_loss"] == -1.0 and got["cache"] == str(cache / entry.name)
    assert [p.name for p in cache.iterdir()] == [entry.name]
