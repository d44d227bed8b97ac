"""CHAI (Verma et al. 2022), online: ArCHer's critic, and a frozen policy steered by it.

Acting: ``chai_samples`` utterances sampled from the frozen policy per state, the one with the
highest ``min(Q̄1, Q̄2)`` under the target critic is taken (:meth:`archer_jax.acting.Acting.chai`).
Learning: ArCHer's critic steps, whose ``a_π`` is CHAI's own choice. The policy never changes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar

import jax

from archer_jax.agents import archer
from archer_jax.agents.agent import timed
from archer_jax.learners.train_state import States
from archer_jax.replay import ReplayBuffer


@dataclasses.dataclass(frozen=True)
class Config(archer.Config):
    """ArCHer's keys (its critic's), and the candidates per state."""

    agent: ClassVar[str] = "chai"

    chai_samples: int = 5  # candidate actions per state

    def __post_init__(self):
        super().__post_init__()
        if self.chai_samples < 1:
            raise ValueError(f"chai_samples: must be > 0, got {self.chai_samples}")


class CHAI(archer.ArCHer):
    """ArCHer's critic steps with CHAI's choices as ``a_π``; the policy is frozen."""

    name = "chai"
    Config = Config

    def act(self, states: States, observations: Sequence[str], key: jax.Array, greedy: bool = False,
            rows: Sequence[int] | None = None) -> list[str]:
        """CHAI's choice among samples (the same rule in evaluation: ``greedy`` is not used)."""
        return self.parts.acting.chai(self.policy(states), states.critic.target, observations, key, rows=rows).texts

    def pi_actions(self, states: States, sample: dict, key: jax.Array) -> list[str]:
        """CHAI's ``a_π`` for the critic's V-target: its own choice for each replayed observation."""
        return self.parts.acting.chai_texts(self.policy(states), states.critic.target, sample["observation"], key)

    def learn(self, states: States, replay: ReplayBuffer, iteration: int) -> tuple[States, dict[str, float]]:
        """``critic_steps`` critic steps; the policy is frozen."""
        states, seconds = timed(self.critic_updates, states, replay, iteration)
        return states, {"critic": seconds, "actor": 0.0}
