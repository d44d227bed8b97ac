"""Online filtered behaviour cloning: imitate the best trajectories collected so far.

Each iteration keeps the trajectories whose return is in the top ``filtered_bc_fraction`` of all
in the buffer (:func:`archer_jax.learners.selection.filtered_bc_mask`) and takes ``bc_steps``
behaviour-cloning steps on uniform batches of their transitions. No critic.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

import numpy as np

from archer_jax.agents.agent import Agent, NetworkSpec, bc_step, group, timed
from archer_jax.agents.archer import OFFLINE_LOSSES, offline_loss_error
from archer_jax.agents.programs import Program
from archer_jax.learners.learner_config import LearnerConfig
from archer_jax.learners.selection import filtered_bc_mask
from archer_jax.learners.train_state import States
from archer_jax.replay import ReplayBuffer
from archer_jax.runtime.config_keys import key


@dataclasses.dataclass(frozen=True)
class Config:
    """Filtered BC's keys: the actor's learning rate and clipping (``config.learner``), the BC
    steps per iteration and the fraction of trajectories kept (top-level keys)."""

    agent: ClassVar[str] = "filtered_bc"  # the agent whose config this is (for errors)
    offline_agent: ClassVar[bool] = False  # offline BC takes any actor loss (its actor only imitates)

    learner: LearnerConfig = group(LearnerConfig)
    bc_steps: int = key(50, "filtered BC: optimizer steps per iteration")
    filtered_bc_fraction: float = key(0.1, "filtered BC: top fraction of trajectories kept, in (0, 1]")

    def __post_init__(self):
        if self.bc_steps < 0:
            raise ValueError(f"bc_steps: must be >= 0, got {self.bc_steps}")
        if not 0 < self.filtered_bc_fraction <= 1:
            raise ValueError(f"filtered_bc_fraction: must be in (0, 1], got {self.filtered_bc_fraction}")
        if self.learner.actor_loss in OFFLINE_LOSSES and not self.offline_agent:
            raise offline_loss_error(self.agent, self.learner.actor_loss)


def best_positions(replay: ReplayBuffer, fraction: float) -> np.ndarray:
    """The positions of the transitions of ``replay``'s episodes whose return is in the top
    ``fraction`` (all of them for 1.0)."""
    episode = replay.columns["episode"][: len(replay)]
    if fraction >= 1.0:
        return np.arange(len(replay))
    returns = replay.columns["episode_return"][: len(replay)]
    numbers, first = np.unique(episode, return_index=True)
    keep = numbers[filtered_bc_mask(returns[first], fraction)]
    return np.flatnonzero(np.isin(episode, keep))


class FilteredBC(Agent):
    """``bc_steps`` BC steps per iteration on the best episodes' transitions; no critic."""

    name = "filtered_bc"
    Config = Config
    fraction: float | None = None  # None: config.filtered_bc_fraction (offline_bc: 1.0, all of them)

    @classmethod
    def networks_for(cls, config: Config) -> NetworkSpec:
        return NetworkSpec(critic=False, token_baseline=config.learner.loss.needs_baseline)

    def __init__(self, parts, config: Config):
        super().__init__(parts, config)
        self.bc_step = bc_step(self.networks, self.actor_tx)

    def programs(self, iterations: int) -> list[Program]:
        """The behaviour-cloning step, ``bc_steps`` times an iteration."""
        return [Program("bc_step", self.bc_step, lambda s, rows: (self.abstract_actor(), s.bc_batch(rows)),
                        self.config.bc_steps)]

    def bc_updates(self, states: States, replay: ReplayBuffer, fraction: float) -> States:
        """The BC steps of one iteration on the transitions of the top ``fraction`` of episodes."""
        parts, actor = self.parts, states.actor
        positions = best_positions(replay, fraction)
        for _ in range(self.config.bc_steps):
            sample = replay.sample_from(positions, parts.batch)
            actor, metrics = self.bc_step(actor, parts.pipeline.policy_batch(sample))
            parts.metrics.add("bc", metrics)
        return States(actor, states.critic)

    def learn(self, states: States, replay: ReplayBuffer, iteration: int) -> tuple[States, dict[str, float]]:
        """``bc_steps`` BC steps on the transitions of the best trajectories in the buffer."""
        fraction = self.config.filtered_bc_fraction if self.fraction is None else self.fraction
        states, seconds = timed(self.bc_updates, states, replay, fraction)
        return states, {"critic": 0.0, "actor": seconds}
