"""What an agent is to the training loop: how it acts in the envs and what one iteration updates."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import jax

from archer_jax.learners.train_state import States
from archer_jax.replay import ReplayBuffer

if TYPE_CHECKING:  # only for type hints: components builds the agents' inputs
    from archer_jax.components import Components

# Purposes folded into the run's key, so each phase draws its own numbers.
ROLLOUT, CRITIC, ACTOR, EVAL = range(4)

Act = Callable[["Components", States, Sequence[str], jax.Array, bool, Sequence[int]], list[str]]
Learn = Callable[["Components", States, ReplayBuffer, int], tuple[States, dict[str, float]]]


@dataclasses.dataclass(frozen=True)
class Agent:
    """An algorithm as the loop sees it.

    ``act(run, states, observations, key, greedy, rows)`` picks one utterance per observation in
    the envs; ``rows`` are the observations' global game numbers (each dialogue's samples are keyed
    by its game). ``learn(run, states, replay, iteration)`` runs one iteration's updates and returns the
    new states with the seconds each phase took (``{"critic": ..., "actor": ...}``).
    ``needs_critic``: whether the run builds the double critic (or a function of the config that
    says, e.g. PPO's estimator). ``offline``: it learns from a fixed dataset
    (:mod:`archer_jax.data`) instead of its own rollouts; the envs only evaluate it. ``ppo``: the
    learner builds PPO's step from ``config.ppo`` (:mod:`archer_jax.learners.ppo`).
    """

    name: str
    act: Act
    learn: Learn
    needs_critic: bool | Callable[[object], bool] = True
    offline: bool = False
    ppo: bool = False

    def uses_critic(self, config) -> bool:
        """Whether a run of ``config`` builds the double critic."""
        return self.needs_critic(config) if callable(self.needs_critic) else self.needs_critic


def timed(fn, *args):
    """``(fn(*args), seconds)``: how the loop and the agents time their phases."""
    start = time.perf_counter()
    out = fn(*args)
    return out, time.perf_counter() - start


def sample_actions(run: Components, states: States, observations: Sequence[str], key: jax.Array, greedy: bool,
                   rows: Sequence[int] | None = None) -> list[str]:
    """Acting by the policy alone: a sample (or the greedy utterance) per observation."""
    return run.acting.sample(run.policy(states), observations, key, greedy=greedy, rows=rows)
