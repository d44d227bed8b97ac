"""Offline runs through the train app (configs/20q_offline.py:micro): a dataset generated when none
is given, offline ArCHer / BC / filtered BC steps without rollouts, exact resume, the handover to
an online ArCHer run (init_from), and one-line errors for the offline keys."""

from __future__ import annotations

import json
import logging

import pytest

from archer_jax.config import validate
from archer_jax import config as config_lib
from archer_jax.run import warm_start
from archer_jax.train import build_agent
from archer_jax.errors import ConfigError
from archer_jax.train import train_and_evaluate
from tests.run.test_train_app import assert_same_tree, micro, micro_of, restored, without_time


def offline_micro(file: str = "20q_offline.py", **overrides):
    return micro_of(file, **overrides)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("offline")
    c = offline_micro()
    lines, logger = _Lines(), logging.getLogger("archer_jax")
    logger.addHandler(lines)
    try:
        summary = train_and_evaluate(c, workdir)
    finally:
        logger.removeHandler(lines)
    return workdir, c, summary, lines.lines


@pytest.mark.slow
def test_offline_archer_generates_its_data_says_so_and_trains_without_rollouts(offline_run):
    workdir, c, summary, warnings = offline_run
    assert any(line.startswith("no offline.dataset given: generated 16 20q_subset dialogues") for line in warnings)
    assert summary["agent"] == "offline_archer" and summary["iterations"] == 2
    assert summary["env_samples"] == 0 and summary["episodes"] == 0  # the envs only evaluated it
    generated = workdir / "offline" / "generated" / "train.json"
    games = json.loads(generated.read_text())
    assert len(games) == c.offline.generate_episodes and all("lines" in g for g in games)
    history = [json.loads(line) for line in (workdir / "history.jsonl").read_text().splitlines()]
    assert all("critic/loss" in h and "actor/loss" in h and "rollout/return" not in h for h in history)
    assert all("critic/awr_weight" not in h for h in history)
    assert history[-1]["replay_size"] == sum(len(g["lines"]) for g in games)
    actor, critic, replay_state, loop = restored(workdir, c)
    assert int(critic.step) == 2 * c.critic_steps and int(actor.step) == 2 * c.actor_steps
    assert isinstance(replay_state, dict) and replay_state["kind"] == "offline"  # the sampler state, not the data
    assert (workdir / "learning_curve.png").is_file() and len(loop["evals"]) == 3


@pytest.mark.slow
def test_offline_resume_is_exact(offline_run, tmp_path):
    """A 1-iteration run trained on to 2 iterations is the 2-iteration run: how a run resumes, and
    how a finished run trains on to more iterations (benchmarks/offline_learning.py --extend)."""
    workdir, c, _, _ = offline_run
    train_and_evaluate(offline_micro(iterations=1), tmp_path)
    train_and_evaluate(offline_micro(), tmp_path)  # resumes at iteration 1, draws on from the saved sampler
    ref_actor, ref_critic, ref_replay, ref_loop = restored(workdir, c)
    actor, critic, replay, loop = restored(tmp_path, c)
    assert_same_tree(actor.params, ref_actor.params)
    assert_same_tree(critic.params, ref_critic.params)
    assert_same_tree(critic.target, ref_critic.target)
    assert replay["rng"] == ref_replay["rng"]
    assert without_time(loop["history"]) == without_time(ref_loop["history"])


@pytest.mark.slow
@pytest.mark.parametrize("agent", ["offline_bc", "offline_filtered_bc"])
def test_offline_bc_agents_train_the_policy_only(agent, tmp_path):
    summary = train_and_evaluate(offline_micro(agent=agent), tmp_path)
    history = [json.loads(line) for line in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert summary["env_samples"] == 0 and all("bc/loss" in h and "critic/loss" not in h for h in history)
    assert not (tmp_path / "checkpoints" / "2" / "critic").exists()


@pytest.mark.slow
def test_online_archer_starts_from_the_offline_run(offline_run, tmp_path):
    workdir, c, summary, _ = offline_run
    online = micro(init_from=str(workdir), sft__steps=0, iterations=1)
    agent = build_agent(validate(online), tmp_path / "components")
    run = agent.parts
    try:
        states = warm_start.initial_states(agent, agent.init_states(), workdir)
    finally:
        run.close()
    actor, critic, _, _ = restored(workdir, c)
    assert_same_tree(states.actor.params, actor.params)
    assert_same_tree(states.critic.params, critic.params)
    assert_same_tree(states.critic.target, critic.target)
    assert int(states.actor.step) == 0 and int(states.critic.step) == 0  # fresh optimizers
    # End to end: the online run's "before" evaluation is the offline run's last (same greedy policy, same games).
    result = train_and_evaluate(online, tmp_path / "online")
    assert result["evals"][0]["eval/return"] == summary["evals"][-1]["eval/return"]
    assert result["env_samples"] > 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(env__name="detective"), "config.env.name: offline agents have datasets for"),
        (dict(offline__dataset="/nowhere/lmrl.json"), "config.offline.dataset: /nowhere/lmrl.json does not exist"),
        (dict(offline__split="test"), "config.offline.split: unknown value 'test'"),
        (dict(learner__actor_loss="actor_pg"), "config.learner.actor_loss: offline_archer's actor is 'awr'"),
        (dict(learner__expectile=1.0), "config.learner.expectile: must be in (0, 1), got 1.0"),
        (dict(learner__iql_v_target="max"), "config.learner.iql_v_target: unknown value 'max'"),
        (dict(learner__awr_clip=0.0), "config.learner.awr_clip: must be finite and > 0, got 0.0"),
        (dict(init_from="/nowhere/run"), "config.init_from: /nowhere/run is not a run's workdir"),
        (dict(offline__policy_mix="optimal:1,genius:2"), "config.offline.policy_mix: unknown expert kind 'genius'"),
    ],
)
def test_offline_keys_fail_in_one_line(overrides, message):
    with pytest.raises(ConfigError) as err:
        config_lib.validate(offline_micro(**overrides))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_awr_is_refused_for_online_agents_and_init_from_with_sft(tmp_path):
    with pytest.raises(ConfigError, match="suits offline agents only"):
        config_lib.validate(micro(learner__actor_loss="awr"))
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(ConfigError, match=r"config.init_from: .* takes no SFT warm start"):
        config_lib.validate(micro(init_from=str(tmp_path)))


@pytest.mark.slow
def test_city_offline_micro_runs_on_generated_city_dialogues(tmp_path):
    summary = train_and_evaluate(offline_micro("city_offline.py", iterations=1), tmp_path)
    assert summary["env"] == "guess_my_city" and summary["env_samples"] == 0
    assert json.loads((tmp_path / "offline" / "generated" / "train.json").read_text())[0]["conversation"]


def test_preflight_checks_the_offline_paths(tmp_path):
    from archer_jax.run import preflight

    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(ConfigError, match=r"^config.offline.data_dir: "):
        preflight.check(offline_micro(offline__data_dir=str(blocker / "tfds")), tmp_path / "run")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match=r"^config.offline.dataset: .*empty holds no .json dialogue file$"):
        preflight.check(offline_micro(offline__dataset=str(tmp_path / "empty")), tmp_path / "run")
