"""Every config file has ``tiny`` and ``micro`` presets, and every preset of every file validates
offline (archer_jax.config.validate)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from archer_jax import config as config_lib
from archer_jax.models.tiny import offline_model
from archer_jax.records import report

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FILES = sorted(p.name for p in CONFIGS.glob("*.py"))
DETECTIVE_GAME = "ARCHER_JAX_DETECTIVE_GAME"  # a real detective.z5, if the machine has one


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"config_{name[:-3]}", CONFIGS / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_config_file_is_listed():
    assert FILES == ["20q.py", "20q_llm.py", "20q_offline.py", "20q_ppo.py", "20q_subset.py", "city.py", "city_offline.py",
                     "detective.py", "webshop.py"]


@pytest.mark.parametrize("name", FILES)
def test_every_config_has_tiny_and_micro_presets_with_tiny_models_and_small_counts(name):
    module = load(name)
    assert module.PRESETS[:3] == ("", "tiny", "micro")
    paper, tiny, micro = (module.get_config(p) for p in module.PRESETS[:3])
    base_keys = set(config_lib.base_config().keys())
    for c in (tiny, micro):
        assert set(c.keys()) == base_keys  # presets change values, never keys
        policy = "tiny:llama" if name == "20q_llm.py" else "tiny:gpt2"  # the 7B setting's tiny one is Llama-shaped
        assert (c.model.policy, c.model.critic) == (policy, "tiny:roberta")
        # The same game (20q's presets play its 10-object subset: a tiny policy cannot hold 157).
        assert c.env.name == ("twenty_questions_subset" if name in ("20q.py", "20q_offline.py", "20q_ppo.py")
                              else paper.env.name)
        assert dict(c.env.options) == dict(paper.env.options)
    assert tiny.iterations * tiny.rollout_size <= 1000 < paper.iterations * paper.rollout_size
    assert tiny.batch_size * tiny.grad_accum_steps <= 32 and tiny.model.max_prompt_length <= 256
    assert micro.iterations <= 2 and micro.rollout_size <= 4 and micro.env.max_turns <= 4
    assert micro.critic_steps <= 2 and micro.bc_steps <= 2 and micro.sft.steps <= 4
    with pytest.raises(ValueError, match="unknown preset 'big'"):
        module.get_config("big")


def test_further_presets_build_on_tiny_and_are_listed_by_the_error():
    """A file's own presets (configs/20q.py's "weak") are its "tiny" with a few keys changed, and
    the unknown-preset error lists them; PPO's file offers the same ones."""
    twenty_q = load("20q.py")
    assert twenty_q.PRESETS == ("", "tiny", "micro", "weak", "small") == load("20q_ppo.py").PRESETS
    tiny, weak = twenty_q.get_config("tiny").to_dict(), twenty_q.get_config("weak").to_dict()
    assert weak["sft"].pop("experts") == "optimal,random,random,random" and tiny["sft"].pop("experts") == "optimal,random_order"
    assert weak.pop("iterations") == 40 and tiny.pop("iterations") == 30
    # ArCHer's recipe on the weak start: 4x the tiny preset's learner steps, the critic from -9.
    assert [weak.pop(k) for k in ("critic_steps", "actor_steps", "critic_init_value")] == [40, 12, -9.0]
    assert [tiny.pop(k) for k in ("critic_steps", "actor_steps", "critic_init_value")] == [10, 3, 0.0]
    # The tiny critic reads a_π in its dialogue; the weak preset's, measured so, the official way.
    assert weak["model"].pop("critic_action") == "utterance" and tiny["model"].pop("critic_action") == "in_context"
    assert weak == tiny
    small = twenty_q.get_config("small")  # the whole game, on the small models built offline
    assert (small.env.name, small.env.max_turns) == ("twenty_questions", 20)
    assert (small.model.policy, small.model.critic) == ("small:gpt2", "small:roberta")
    assert (small.sft.experts, small.sft.dialogues, small.sft.steps) == ("optimal", 1024, 600)
    assert (small.critic_steps, small.actor_steps, small.critic_init_value) == (40, 12, -13.0)
    with pytest.raises(ValueError, match="known: '', 'tiny', 'micro', 'weak', 'small'"):
        twenty_q.get_config("strong")


def test_the_subset_presets_are_the_twenty_questions_ones():
    for preset in ("tiny", "micro"):
        assert load("20q_subset.py").get_config(preset).to_dict() == load("20q.py").get_config(preset).to_dict()
    assert load("20q_subset.py").get_config().env.name == "twenty_questions_subset"


@pytest.mark.parametrize("preset", ["", "tiny", "micro"])
def test_the_ppo_presets_are_the_twenty_questions_ones_with_agent_ppo(preset):
    """PPO starts where ArCHer does (same SFT warm start, models, rollouts, evaluation games)."""
    ppo, archer = load("20q_ppo.py").get_config(preset).to_dict(), load("20q.py").get_config(preset).to_dict()
    assert ppo.pop("agent") == "ppo" and archer.pop("agent") == "archer"
    # PPO's turn-level critic encodes the utterance alone (the tiny ArCHer's reads it in its dialogue).
    assert ppo["model"].pop("critic_action") == "utterance"
    archer["model"].pop("critic_action")
    assert ppo == archer


@pytest.mark.parametrize("name", ["20q.py", "20q_subset.py", "city.py", "20q_offline.py", "city_offline.py", "20q_ppo.py"])
def test_tiny_turn_limits_leave_room_for_the_optimal_expert(name):
    tiny = load(name).get_config("tiny")
    assert report.optimal_return(tiny.env.name, tiny.env.max_turns) is not None


@pytest.mark.parametrize("name, preset", [(n, p) for n in FILES for p in load(n).PRESETS])
def test_every_preset_validates(name, preset, tmp_path):
    c = load(name).get_config(preset)
    if offline_model(c.model.policy) is None:
        # The paper's presets name hub models; offline (as in tests) those must already be in the
        # HF cache, so the rest of the config is checked with the offline tiny models instead.
        c.model.policy, c.model.critic = "tiny:gpt2", "tiny:roberta"
    if c.env.name == "detective":  # the game file is not shipped: the one-line error first
        with pytest.raises(config_lib.ConfigError, match="config.env.options.game_path: missing"):
            config_lib.validate(c)
        game = os.environ.get(DETECTIVE_GAME)
        if not game:  # validate checks that the file exists; the game itself is read by the env
            game = tmp_path / "detective.z5"
            game.write_bytes(b"\0")
        c.env.options.game_path = str(game)
    # WebShop's server is contacted by the env, not by validate: no server is needed here.
    config_lib.validate(c)
