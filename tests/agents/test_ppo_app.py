"""PPO runs through the train app (configs/20q_ppo.py:micro): archer_hierarchical's critic then PPO
steps with a KL penalty to a reference held in the checkpoint, exact resume, and one-line errors."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest

from archer_jax import config as config_lib
from archer_jax.errors import ConfigError
from archer_jax.train import train_and_evaluate
from tests.run.test_train_app import assert_same_tree, micro_of, restored, without_time


def ppo_micro(**overrides):
    """configs/20q_ppo.py's micro preset with archer_hierarchical and a KL penalty, then ``overrides``."""
    return micro_of("20q_ppo.py", **{"ppo__adv_estimator": "archer_hierarchical", "ppo__kl_coef": 0.1, **overrides})


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("ppo")
    c = ppo_micro()
    return workdir, c, train_and_evaluate(c, workdir)


@pytest.mark.slow
def test_hierarchical_ppo_trains_the_critic_then_ppo_with_a_fixed_reference(ppo_run):
    workdir, c, summary = ppo_run
    history = [json.loads(line) for line in (workdir / "history.jsonl").read_text().splitlines()]
    assert summary["agent"] == "ppo" and summary["iterations"] == 2 and summary["env_samples"] > 0
    assert c.warmup_iter == 1 and "critic/loss" in history[0] and "actor/loss" not in history[0]  # critic warm-up
    for key in ("critic/loss", "actor/policy_loss", "actor/value_loss", "actor/kl_to_reference", "actor/clip_fraction"):
        assert np.isfinite(history[1][key]), key
    start, _, _, _ = restored(workdir, c, step=1)  # the critic's warm-up left the SFT policy: the reference
    actor, critic, _, _ = restored(workdir, c)
    assert_same_tree(actor.target, start.params)  # the reference never moves
    moved = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(actor.params), jax.tree.leaves(start.params))]
    assert any(moved)  # PPO moved the policy (and its value head)
    assert critic is not None


@pytest.mark.slow
def test_ppo_resume_is_exact(ppo_run, tmp_path):
    workdir, c, _ = ppo_run
    train_and_evaluate(ppo_micro(iterations=1), tmp_path)
    train_and_evaluate(ppo_micro(), tmp_path)  # resumes at iteration 1
    ref_actor, ref_critic, _, ref_loop = restored(workdir, c)
    actor, critic, _, loop = restored(tmp_path, c)
    assert_same_tree(actor.params, ref_actor.params)
    assert_same_tree(actor.target, ref_actor.target)
    assert_same_tree(critic.params, ref_critic.params)
    assert without_time(loop["history"]) == without_time(ref_loop["history"])


@pytest.mark.parametrize("overrides, message", [
    (dict(ppo__adv_estimator="grpo"), "config.rollout_group_size: adv_estimator 'grpo' compares rollouts"),
    (dict(rollout_group_size=3), "config.rollout_group_size: must be >= 1 and divide rollout_size"),
    (dict(ppo__adv_estimator="vtrace"), "config.ppo.adv_estimator: unknown value 'vtrace'; known: gae, grpo"),
    (dict(ppo__value_head="twin"), "config.ppo.value_head: unknown value 'twin'"),
    (dict(model__lora__rank=4), "config.ppo.value_head: 'separate' copies the policy's weights"),
    (dict(ppo__clip=1.5), "config.ppo.clip: must be in \\(0, 1\\)"),
    (dict(ppo__lam=-0.1), "config.ppo.lam: must be in \\[0, 1\\]"),
    (dict(ppo__epochs=0), "config.ppo.epochs: must be >= 1"),
    (dict(ppo__adv_estimator="gae", ppo__critic_baseline=True),
     "config.ppo.critic_baseline: only archer_hierarchical reads the utterance critic, not adv_estimator 'gae'"),
])
def test_ppo_keys_are_checked_in_one_line(overrides, message):
    with pytest.raises(ConfigError, match=message):
        config_lib.validate(ppo_micro(**overrides))
