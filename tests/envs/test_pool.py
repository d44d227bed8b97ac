"""The env worker pool: parallel stepping, a killed worker restarted, in-process mode."""

import functools
import os
import signal

import pytest

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


def test_a_killed_worker_is_restarted_and_its_episodes_end_truncated():
    with EnvPool(functools.partial(Counter, 10), num_envs=4, num_workers=2, timeout_s=30) as pool:
        pool.reset(range(4))
        pool.step(["a"] * 4)
        victim = pool.worker_pids()[1]  # holds envs 1 and 3
        os.kill(victim, signal.SIGKILL)
        results = pool.step(["b"] * 4)
        assert all(r is not None for r in results)
        assert [r.observation for r in (results[0], results[2])] == ["b 2", "b 2"]
        for r in (results[1], results[3]):
            assert r.done and r.info.truncated and r.info.extra["worker_restarted"]
            assert r.observation == "a 1"  # the last observation seen
        assert pool.restarts == 1 and pool.worker_pids()[1] != victim
        assert pool.reset(range(4)) == [f"start {i}" for i in range(4)]  # the new worker plays on
        assert [r.observation for r in pool.step(["c"] * 4)] == ["c 1"] * 4


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
