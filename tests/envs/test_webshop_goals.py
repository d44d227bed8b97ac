"""WebShop's goal ranges (issue 19, item 1): rollout and evaluation seeds map into separate goal
ranges of a local server that refuses goals out of its range (tests/envs/fake_webshop.py), the
ranges are checked against the server's goal count at the first reset, and bad ranges are one-line
errors naming the option. No network: the server is in this process, on 127.0.0.1."""

from __future__ import annotations

import functools
import logging
import re
import types

import ml_collections
import numpy as np
import pytest

from archer_jax import rollout
from archer_jax.envs import registry
from archer_jax.envs.base import EnvError
from archer_jax.envs.pool import EnvPool
from archer_jax.envs.webshop import WebShop
from archer_jax.envs.webshop_goals import EVAL_GOALS, TRAIN_GOALS, GoalRanges, count_goals, goal_range
from archer_jax.errors import ConfigError
from archer_jax.sampling import prompts
from tests.envs.fake_webshop import serve, shop

N = 40  # the stand-in server's goals
TRAIN, EVAL = (10, 40), (0, 10)


@pytest.fixture(scope="module")
def server():
    handler = shop([f"i need item number {i}, and price lower than 30.00 dollars" for i in range(N)])
    with serve(handler) as url:
        yield handler, url


def _fixed_goals(handler) -> list[int]:
    """The goal indices of the ``fixed_<n>`` sessions the server was asked for, in order."""
    return [int(m.group(1)) for _, path in handler.requests if (m := re.fullmatch(r"/fixed_(\d+)", path))]


def _run(url: str, rollout_size: int = 16, eval_size: int = 10) -> types.SimpleNamespace:
    """What rollout.collect/evaluate read from a run's parts: config, pool, keys."""
    import jax

    config = ml_collections.ConfigDict(dict(seed=0, rollout_size=rollout_size, rollout_group_size=1, eval_size=eval_size,
                                            env=dict(max_turns=1, turn_limit="game"), rollout=dict(staleness=0, slots=0)))
    pool = EnvPool(functools.partial(WebShop, url, train_goals=TRAIN, eval_goals=EVAL), max(rollout_size, eval_size))
    pipeline = types.SimpleNamespace(prompter=prompts.Prompter(prompts.get("plain"), tokenizer=None))  # actions as said
    return types.SimpleNamespace(config=config, pool=pool, pipeline=pipeline, key_for=lambda *path: jax.random.key(0))


class _Searcher:
    """An agent that searches on every turn."""

    def act(self, states, observations, key, greedy, rows):
        return ["search[item]"] * len(observations)


def test_rollouts_play_training_goals_and_evaluations_the_eval_goals(server):
    handler, url = server
    run = _run(url)
    try:
        handler.requests.clear()
        episodes = rollout.collect(run, _Searcher().act, None, iteration=3)
        seeds = np.random.SeedSequence([0, 3]).generate_state(16)  # the rollout seeds collect uses
        goals = [run.pool.local_env(i).goal for i in range(16)]
        assert goals == [TRAIN[0] + int(s) % (TRAIN[1] - TRAIN[0]) for s in seeds]
        assert all(TRAIN[0] <= g < TRAIN[1] for g in goals) and len(set(goals)) > 8
        assert set(goals) <= set(_fixed_goals(handler))  # each opened its session on the server
        assert len(episodes) == 16 and all(len(e) == 1 for e in episodes)
        assert rollout.summarize(episodes)["worker_restarts"] == 0.0
        assert int(seeds.max()) >= N  # sent as goal indices (the old behaviour), the server refuses them:
        with pytest.raises(EnvError, match="HTTP 500"):
            WebShop(url, train_goals=TRAIN, eval_goals=EVAL).reset(goal=int(seeds.max()))

        handler.requests.clear()
        first = rollout.evaluate(run, _Searcher().act, None)
        eval_goals = [run.pool.local_env(i).goal for i in range(10)]
        assert sorted(eval_goals) == list(range(*EVAL))  # ten distinct goals, all evaluation goals
        assert set(_fixed_goals(handler)) == set(eval_goals)  # and no other session was opened
        rollout.evaluate(run, _Searcher().act, None)
        assert [run.pool.local_env(i).goal for i in range(10)] == eval_goals  # the same every evaluation
        assert len(first) == 10
    finally:
        run.pool.close()


def test_the_goal_check_asks_the_server_once_per_process(server):
    handler, _ = server
    with serve(handler) as url:  # a server address this process has not checked yet
        handler.requests.clear()
        first, second = (WebShop(url, train_goals=TRAIN, eval_goals=EVAL) for _ in range(2))
        first.reset(seed=0)
        second.reset(seed=1)
        assert _fixed_goals(handler) == [N - 1, 10, 11]  # the highest goal of the ranges, once


@pytest.mark.parametrize(
    "train, evaluation, named",
    [
        ((10, 100), EVAL, "train_goals=(10, 100)"),
        (TRAIN, (0, 41), "eval_goals=(0, 41)"),
        (TRAIN_GOALS, EVAL_GOALS, "train_goals=(1500, 12087)"),  # the defaults (a full server) on a small one
    ],
)
def test_ranges_past_the_servers_goals_fail_at_the_first_reset_with_its_count(server, train, evaluation, named):
    handler, url = server
    env = WebShop(url, train_goals=train, eval_goals=evaluation)
    handler.requests.clear()
    with pytest.raises(EnvError) as e:
        env.reset(seed=0)
    message = str(e.value)
    assert "\n" not in message
    assert f"has {N} goals (indices 0..{N - 1}" in message and named in message and f"within [0, {N})" in message
    asked = _fixed_goals(handler)
    assert asked[0] == max(train[1], evaluation[1]) - 1 and len(asked) <= 16  # one check, then a bisection
    assert env.session_id is None  # no episode was started


def test_count_goals_bisects():
    for count in (0, 1, 2, 39, 40, 12_087):
        asked = []

        def has(n: int) -> bool:
            asked.append(n)
            return n < count

        assert count_goals(has, 12_087 if count < 12_087 else 20_000) == count
        assert len(asked) <= 16


def test_seeds_map_into_the_ranges():
    goals = GoalRanges(TRAIN, EVAL)
    assert [goals.goal(s) for s in (0, 29, 30, 2**32 - 1)] == [10, 39, 10, 10 + (2**32 - 1) % 30]
    assert [goals.goal(rollout.EVAL_SEED + i, "eval") for i in range(10)] == list(range(10))
    assert goals.goal(np.uint32(4_000_000_000)) == 10 + 4_000_000_000 % 30
    assert goals.highest == N - 1 and not goals.overlap and GoalRanges((0, 5), (4, 9)).overlap
    assert GoalRanges() == GoalRanges((1500, 12087), (500, 1500))  # WebShop's train and dev splits
    with pytest.raises(ValueError, match="seed must be >= 0"):
        goals.goal(-1)
    with pytest.raises(ValueError, match="split must be one of train, eval"):
        goals.goal(0, "test")


@pytest.mark.parametrize("bad", [(5, 5), (6, 5), (-1, 3), (3,), (0, 3, 4), "05", (0.5, 3), (True, 3), None, 7])
def test_bad_ranges_are_one_line_value_errors(bad):
    with pytest.raises(ValueError, match=r"^train_goals must ") as e:
        goal_range("train_goals", bad)
    assert "\n" not in str(e.value)
    with pytest.raises(ValueError, match=r"^eval_goals must "):
        WebShop(eval_goals=bad)


def _config(**options) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(
        dict(eval_size=16, env=dict(name="webshop", max_turns=10, options=dict(base_url="http://127.0.0.1:3000", **options)))
    )


def test_config_check_names_the_option(caplog):
    registry.check_options("webshop", _config())  # the defaults
    registry.check_options("webshop", _config(train_goals=[1500, 12087], eval_goals=[0, 500]))  # lists (config.json)
    with pytest.raises(ConfigError, match=r"^config\.env\.options\.train_goals must satisfy 0 <= start < end"):
        registry.check_options("webshop", _config(train_goals=(20, 10)))
    with pytest.raises(ConfigError, match=r"^config\.env\.options\.eval_goals must be a pair"):
        registry.check_options("webshop", _config(eval_goals=(1, 2, 3)))
    with pytest.raises(ConfigError, match=r"^config\.eval_size: 16 evaluation games, but config\.env\.options\.eval_goals"):
        registry.check_options("webshop", _config(eval_goals=(0, 8)))
    with pytest.raises(ConfigError, match="not an option of env 'webshop'"):
        registry.check_options("webshop", _config(goals=(0, 8)))
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    with caplog.at_level(logging.WARNING):  # the official ArCHer setting: the same goals for both
        registry.check_options("webshop", _config(train_goals=(2000, 2100), eval_goals=(2000, 2100)))
    assert any("overlap" in r.getMessage() for r in caplog.records)


def test_the_registry_passes_the_ranges_to_the_env():
    env = registry.env_factory(_config(train_goals=[2000, 2100], eval_goals=(0, 500)).env)()
    assert env.goals == GoalRanges((2000, 2100), (0, 500)) and env.max_steps == 10
    assert registry.env_factory(_config().env)().goals == GoalRanges(TRAIN_GOALS, EVAL_GOALS)
