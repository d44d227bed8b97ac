"""The environment protocol: text observations in, text actions out.

    obs = env.reset(seed=0)
    result = env.step("Is it an animal?")
    result.observation, result.reward, result.done, result.info

``info`` tells the three ways a turn can end apart: ``success`` (the task was solved),
``truncated`` (the turn limit was reached without a true terminal state: learners bootstrap
from it), and ``invalid`` (the action was not understood; the episode goes on).
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class StepInfo:
    success: bool = False
    truncated: bool = False
    invalid: bool = False
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)  # env-specific facts (e.g. score)


class StepResult(NamedTuple):
    observation: str
    reward: float
    done: bool
    info: StepInfo

    @property
    def terminal(self) -> bool:
        """A true end of the episode: done, and not cut by the turn limit (the learners' flag)."""
        return self.done and not self.info.truncated


class EnvError(RuntimeError):
    """An environment cannot run (missing game file, unreachable server, dead worker)."""


@runtime_checkable
class Env(Protocol):
    """One episode at a time. ``reset`` must be called before ``step``."""

    def reset(self, seed: int | None = None) -> str:
        """Starts an episode (``seed`` picks e.g. the hidden object) and returns the first observation."""
        ...

    def step(self, action: str) -> StepResult:
        """Plays one turn. Any string is a valid input: bad actions get an answer, never an exception."""
        ...
