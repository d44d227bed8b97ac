"""The env worker pool: parallel stepping, a killed worker restarted (logged, counted in the
rollout metrics), in-process mode, the contract it enforces for any env (reset before step,
clean texts, splits)."""

import functools
import logging
import os
import re
import signal

import pytest

from archer_jax import rollout
from archer_jax.envs import EnvError, StepInfo, StepResult
from archer_jax.envs.pool import EnvPool


class Counter:
    """A tiny env for the pool's tests: counts its steps; 'crash' raises, 'exit' kills the process."""

    def __init__(self, limit: int = 3):
        self.limit = limit
        self.t = 0

    def reset(self, seed=None) -> str:
        self.t = 0
        return f"start {seed}"

    def step(self, action: str) -> StepResult:
        if action == "crash":
            raise ValueError("boom")
        if action == "exit":
            os._exit(3)
        self.t += 1
        done = self.t >= self.limit
        return StepResult(f"{action} {self.t}", -1.0, done, StepInfo(truncated=done))


@pytest.mark.parametrize("workers", [0, 2])
def test_pool_steps_every_env(workers):
    with EnvPool(functools.partial(Counter, 3), num_envs=5, num_workers=workers) as pool:
        assert pool.reset(range(5)) == [f"start {i}" for i in range(5)]
        results = pool.step(["a", None, "c", "d", "e"])
        assert results[1] is None
        assert [r.observation for r in results if r] == ["a 1", "c 1", "d 1", "e 1"]
        for _ in range(2):
            results = pool.step(["x"] * 5)
        assert results[0].done and not results[1].done  # env 1 skipped a step


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_a_killed_worker_is_restarted_and_its_episodes_end_truncated(caplog):
    with EnvPool(functools.partial(Counter, 10), num_envs=4, num_workers=2, timeout_s=30) as pool:
        pool.reset(range(4))
        pool.step(["a"] * 4)
        victim = pool.worker_pids()[1]  # holds envs 1 and 3
        os.kill(victim, signal.SIGKILL)
        with caplog.at_level(logging.WARNING, logger="archer_jax.envs.pool"):
            results = pool.step(["b"] * 4)
        (line,) = [r.getMessage() for r in caplog.records if r.name == "archer_jax.envs.pool"]
        assert "\n" not in line and re.match(r"env worker 1 \(2 Counter envs\) died (during|before) its step", line)
        assert f"exit code {-signal.SIGKILL}" in line and "restart 1 of this pool" in line
        assert all(r is not None for r in results)
        assert [r.observation for r in (results[0], results[2])] == ["b 2", "b 2"]
        for r in (results[1], results[3]):
            assert r.done and r.info.truncated and r.info.extra["worker_restarted"]
            assert r.observation == "a 1"  # the last observation seen
        assert pool.restarts == 1 and pool.worker_pids()[1] != victim
        assert pool.reset(range(4)) == [f"start {i}" for i in range(4)]  # the new worker plays on
        assert [r.observation for r in pool.step(["c"] * 4)] == ["c 1"] * 4


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_a_worker_that_exits_mid_step_is_restarted():
    with EnvPool(functools.partial(Counter, 10), num_envs=2, num_workers=2, timeout_s=30) as pool:
        pool.reset([0, 1])
        results = pool.step(["ok", "exit"])
        assert results[0].observation == "ok 1" and results[1].info.truncated and pool.restarts == 1


def test_an_env_exception_is_an_env_error_not_a_dead_pool():
    with EnvPool(functools.partial(Counter, 10), num_envs=2, num_workers=1, timeout_s=30) as pool:
        pool.reset([0, 1])
        with pytest.raises(EnvError, match="env 1 failed in step: ValueError: boom"):
            pool.step(["ok", "crash"])
        assert pool.step(["ok", "ok"])[1].observation == "ok 1"


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_envs must be >= 1"):
        EnvPool(Counter, num_envs=0)
    with EnvPool(Counter, num_envs=2) as pool, pytest.raises(ValueError, match="got 1 actions for 2 envs"):
        pool.step(["a"])


@pytest.mark.parametrize("workers", [0, 2])
def test_resetting_some_envs(workers):
    with EnvPool(functools.partial(Counter, 3), num_envs=4, num_workers=workers) as pool:
        pool.reset(range(4))
        pool.step(["a"] * 4)
        assert pool.reset([7, 9], indices=[1, 3]) == ["start 7", "start 9"]
        assert [r.observation for r in pool.step(["b"] * 4)] == ["b 2", "b 1", "b 2", "b 1"]
        with pytest.raises(ValueError, match="indices must be in"):
            pool.reset([0], indices=[4])


@pytest.mark.slow  # over 5 s on 2 cores: the fast tier skips it
def test_worker_restarts_reach_the_rollout_metrics(caplog):
    def act(observations, turn, games):
        if turn == 1:
            os.kill(pool.worker_pids()[0], signal.SIGKILL)  # holds games 0 and 2
        return ["a"] * len(observations)

    with EnvPool(functools.partial(Counter, 3), num_envs=4, num_workers=2, timeout_s=30) as pool:
        with caplog.at_level(logging.WARNING, logger="archer_jax.envs.pool"):
            episodes = rollout.play(pool, act, seeds=range(4), max_turns=5)
        assert [e.truncated for e in episodes] == [True] * 4  # cut by the restart, or by Counter's limit
        assert [len(e) for e in episodes] == [2, 3, 2, 3]
        assert rollout.summarize(episodes)["worker_restarts"] == 1.0 and pool.restarts == 1
        assert sum("env worker 0" in r.getMessage() for r in caplog.records) == 1
        again = rollout.play(pool, lambda obs, turn, games: ["a"] * len(obs), seeds=range(4), max_turns=5)
        assert rollout.summarize(again)["worker_restarts"] == 0.0  # per batch, not cumulative


@pytest.mark.parametrize("workers", [0, 1])
def test_the_pool_refuses_steps_out_of_order_for_any_env(workers):
    with EnvPool(functools.partial(Counter, 1), num_envs=2, num_workers=workers) as pool:
        with pytest.raises(EnvError, match=r"^env 1 \(Counter\): step\(\) before reset\(\); call reset\(\) first$"):
            pool.step([None, "a"])
        pool.reset([0, 1])
        assert all(r.done for r in pool.step(["a", "a"]))
        with pytest.raises(EnvError, match=r"^env 0 \(Counter\): step\(\) after the episode ended"):
            pool.step(["a", None])  # Counter itself would step on: the pool refuses
        pool.reset([0], indices=[0])
        assert pool.step(["a", None])[0].observation == "a 1"


@pytest.mark.parametrize("workers", [0, 1])
def test_the_pool_cleans_a_user_envs_texts(workers):
    with EnvPool(functools.partial(Counter, 5), num_envs=1, num_workers=workers) as pool:
        pool.reset([0])
        (result,) = pool.step(["tab\tnul\x00esc\x1b surrogate\ud800 cr\r"])
        assert result.observation == "tab\tnulesc surrogate\ufffd cr\n 1"


class Splits:
    """An env with held-out tasks: its reset takes ``split``."""

    def reset(self, seed=None, *, split="train"):
        return f"{split} {seed}"

    def step(self, action):
        return StepResult(action, 0.0, True, StepInfo())


@pytest.mark.parametrize("workers", [0, 1])
def test_the_split_reaches_envs_that_take_it(workers):
    with EnvPool(Splits, num_envs=2, num_workers=workers) as pool:
        assert pool.reset([1, 2]) == ["train 1", "train 2"]
        assert pool.reset([3], indices=[1], split="eval") == ["eval 3"]
        with pytest.raises(ValueError, match="split must be one of train, eval"):
            pool.reset([3], split="test")
    with EnvPool(functools.partial(Counter, 3), num_envs=1, num_workers=workers) as pool:
        assert pool.reset([7], split="eval") == ["start 7"]  # an env without splits: reset(seed) only
